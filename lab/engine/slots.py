"""The server's saved depth-L states for the genuine arm: one slot file per L, really prefilled once per run
(cumulatively: each from the deepest state below it) and restored before every genuine request."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from rich.console import Console

from lab.engine.contract import ContractClient, ContractError, Step


@contextlib.contextmanager
def scratch_dir(cache_dir: Path) -> Iterator[str]:
    """A directory for the server's slot files (the saved depth-L states), removed when the run ends: it is
    scratch under the cache, never part of a run folder. It is named after this process, so the ones a killed
    run left behind (SIGKILL removes nothing; a reference host's states are gigabytes) go when the next starts."""
    root = cache_dir / "slots"
    root.mkdir(parents=True, exist_ok=True)
    for left in root.iterdir():
        owner = left.name.partition("-")[0]
        if left.is_dir() and owner.isdigit() and not alive(int(owner)):
            shutil.rmtree(left, ignore_errors=True)
    with tempfile.TemporaryDirectory(dir=root, prefix=f"{os.getpid()}-") as d:
        yield d


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


class SavedStates:
    """The server's really prefilled depth-L states, one slot file per L, made when a point first needs one: the
    slot starts from the deepest state below L, so the run prefills the grid's deepest L once in all."""

    def __init__(self, client: ContractClient, console: Console) -> None:
        self.client, self.console = client, console
        self.names: dict[int, str] = {}
        self.refused = ""

    def of(self, step: Step) -> str | None:
        """The slot file of `step`'s depth-L state (None once the server refused one: the arm then prefills)."""
        if self.refused:
            return None
        if step.L not in self.names:
            below = max((L for L in self.names if L < step.L), default=None)
            name = f"L{step.L}.bin"
            try:
                self.client.save_state(step, name, (below, self.names[below]) if below is not None else None)
            except ContractError as e:
                self.refused = str(e)
                self.console.print(
                    f"[yellow]warning:[/yellow] no saved states ({e}); the genuine arm prefills its prefix per rep",
                    highlight=False,
                )
                return None
            self.names[step.L] = name
        return self.names[step.L]
