"""A conversation trace being written: step numbers per task, each step on disk as soon as its exchange is
complete, and its tool time appended later as a line of its own.

A step's `tool_s` is the agent's own time after its reply until the task's next request, known only when that
request arrives: the step is written as its reply reaches the agent, and a `StepToolTime` line follows when the
next request comes (none for the task's last step, and none in a side task: its requests are no loop of the
agent's). The recorder never lets two open requests share a task (see `record`), so a request that arrives
before the task's previous reply was settled is one whose agent left that reply early (at its `finish_reason`,
or gave up waiting): that step's tool time is 0. Each line is flushed and fsynced before the next event is
handled, so however the recorder ends (a signal, SIGKILL, the OOM killer) every complete exchange is in the
trace; a line cut mid-write is left out by the readers and set aside by `--append`."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel

from lab.conversation.load import ConversationError, read_trace
from lab.core.errors import LabError
from lab.core.jsonl import set_aside_torn_tail
from lab.core.schemas import ConversationStep, StepToolTime


class RecordError(LabError):
    pass


@dataclass
class ConversationLog:
    """`begin` when a request arrives (its step number), then `finish` with its row or `abandon` (nothing
    written, the number given back when no later request of the task took one)."""

    path: Path
    next_step: dict[str, int] = field(default_factory=dict)
    waiting: dict[str, tuple[int, float]] = field(default_factory=dict)  # per task: a written step, its reply's end
    written: int = 0

    @classmethod
    def open(cls, path: Path, append: bool = False) -> ConversationLog:
        """A new trace, or with `append` an existing conversation trace whose steps continue per task, checked
        whole first; then a torn last line is moved to a file of its own beside it (lab.core.jsonl.
        set_aside_torn_tail), and one whole but for its newline is ended, so the next row is a line of its own."""
        log = cls(path)
        if path.exists() and not append:
            raise RecordError(f"{path} exists: pass --append to add to it, or choose another -o")
        if path.exists():
            if path.is_dir():
                raise RecordError(f"{path} is a directory, not a conversation trace")
            try:
                lines = read_trace(path)
            except ConversationError as e:
                raise RecordError(str(e)) from None
            for _, row in lines.steps:
                log.next_step[row.task_id] = max(log.next_step.get(row.task_id, 0), row.step + 1)
            set_aside_torn_tail(path)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
        return log

    def begin(self, task: str, now: float) -> int:
        """A request of `task` arrived at monotonic time `now`: the task's last step gets its tool time; the new
        request's step number."""
        if (held := self.waiting.pop(task, None)) is not None:
            step, ended = held
            self._write(StepToolTime(task_id=task, step=step, tool_s=max(0.0, now - ended)))
        step = self.next_step.get(task, 0)
        self.next_step[task] = step + 1
        return step

    def abandon(self, task: str, step: int) -> None:
        """Nothing is written for this exchange (a retry of the same request then gets the same number)."""
        if self.next_step.get(task) == step + 1:
            self.next_step[task] = step

    def finish(self, row: ConversationStep, ended: float, loop: bool = True) -> None:
        """An exchange completed at monotonic time `ended`: written now. A later request of the task that arrived
        before it ended means the agent did not wait for it: its tool time is 0. Without `loop` (a side task)
        it gets none."""
        self._write(row)
        self.written += 1
        if not loop:
            return
        if self.next_step.get(row.task_id, 0) > row.step + 1:
            self._write(StepToolTime(task_id=row.task_id, step=row.step, tool_s=0.0))
        else:
            self.waiting[row.task_id] = (row.step, ended)

    def _write(self, row: BaseModel) -> None:
        """The row as a line of its own; one that cannot be written as JSON (nested too deep, a string no UTF-8
        holds) is a ValueError, with nothing written."""
        line = row.model_dump_json() + "\n"
        with self.path.open("a") as fh:
            fh.write(line)
            fh.flush()
            os.fsync(fh.fileno())
