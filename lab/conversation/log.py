"""A conversation trace being written: step numbers per task, and one pending step per task held back until
its tool time is known.

A step's `tool_s` is the agent's own time after its reply until the task's next request, so a finished
exchange waits (in memory) for that request, is then appended with its `tool_s`, and the rest are appended
with `tool_s` None when the recorder stops. Each line is flushed and fsynced before the next event is
handled, so a stop loses nothing that was complete; a SIGKILL loses at most the one pending step per task."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from lab.core.errors import LabError
from lab.core.runs import read_jsonl
from lab.core.schemas import ConversationStep


class RecordError(LabError):
    pass


@dataclass
class ConversationLog:
    """`begin` when a request arrives (its step number), then `finish` with its row or `abandon` (nothing
    written, the number given back when no later request of the task took one); `close` when stopping."""

    path: Path
    next_step: dict[str, int] = field(default_factory=dict)
    pending: dict[str, tuple[ConversationStep, float]] = field(default_factory=dict)
    written: int = 0
    stopping: bool = False

    @classmethod
    def open(cls, path: Path, append: bool = False) -> ConversationLog:
        """A new trace, or with `append` an existing conversation trace whose steps continue per task."""
        log = cls(path)
        if path.exists() and not append:
            raise RecordError(f"{path} exists: pass --append to add to it, or choose another -o")
        if path.exists():
            if path.is_dir():
                raise RecordError(f"{path} is a directory, not a conversation trace")
            for row in read_jsonl(path, ConversationStep):
                log.next_step[row.task_id] = max(log.next_step.get(row.task_id, 0), row.step + 1)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
        return log

    def begin(self, task: str, now: float) -> int:
        """A request of `task` arrived at monotonic time `now`: the task's pending step gets its tool time and
        is written; the new request's step number."""
        if (held := self.pending.pop(task, None)) is not None:
            row, ended = held
            self._write(row.model_copy(update={"tool_s": max(0.0, now - ended)}))
        step = self.next_step.get(task, 0)
        self.next_step[task] = step + 1
        return step

    def abandon(self, task: str, step: int) -> None:
        """Nothing is written for this exchange (a retry of the same request then gets the same number)."""
        if self.next_step.get(task) == step + 1:
            self.next_step[task] = step

    def finish(self, row: ConversationStep, ended: float) -> None:
        """An exchange completed at monotonic time `ended`: held until the task's next request (or written now
        while stopping). A step still held here overlapped this one, so it has no tool time of its own."""
        if self.stopping:
            self._write(row)
            return
        if (held := self.pending.pop(row.task_id, None)) is not None:
            self._write(held[0])
        self.pending[row.task_id] = (row, ended)

    def close(self) -> None:
        """Stopping: every held step is written with tool_s None, and later completions at once."""
        self.stopping = True
        for task in list(self.pending):
            self._write(self.pending.pop(task)[0])

    def _write(self, row: ConversationStep) -> None:
        with self.path.open("a") as fh:
            fh.write(row.model_dump_json() + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        self.written += 1
