"""A model that is only here, copied to the target host once: `--push-model` with a path here, and always for
a name the lab resolves here (`--model pretrained:NAME`, fetched here once: the host needs no network;
`tiny:ARCH`). It lands in
remote_dir/models/<its sha256's first 16 hex>/<its name>: the same file under another name here finds the copy,
and two files of one name never meet.

    skipped    when the host already holds that file whole (its sha256 there, memoised like any host model)
    resumed    a cut transfer leaves the bytes that arrived; the next push appends the rest (SSH carries them
               intact, and the whole file is hashed there at the end)
    checked    the copy's sha256, computed there, must be the file's here; a copy that is not is removed
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from rich.console import Console

from lab.core.errors import UsageError
from lab.core.gguf_io import read_gguf_metadata
from lab.core.modelfile import model_sha256
from lab.core.settings import Settings
from lab.core.units import MIB
from lab.models.resolve import PRETRAINED_PREFIX, TINY_PREFIX, resolve_model
from lab.remote.connect import RemoteError, SshShell, sh
from lab.remote.modelcheck import SAFE_NAME, HostModel, check_host_model

NAMED = (PRETRAINED_PREFIX, TINY_PREFIX)  # models the lab resolves here: always pushed


@dataclass(frozen=True)
class Pushed:
    """What a push did: the host's copy, the bytes sent (0: it was there) and the seconds it took."""

    model: HostModel
    sent: int
    resumed_at: int
    seconds: float

    def record(self) -> dict[str, int | float | str]:
        m = self.model
        return {"path": m.path, "sent_bytes": self.sent, "resumed_at": self.resumed_at, "seconds": self.seconds}

    def describe(self, name: str) -> str:
        if self.sent == 0:
            return f"{name} already there (sha256 {self.model.sha256[:12]}): nothing pushed ({self.seconds:.1f} s)"
        rate = self.sent / MIB / self.seconds if self.seconds > 0 else 0.0
        resumed = f", resumed at {self.resumed_at / MIB:.1f} MiB" if self.resumed_at else ""
        return (
            f"pushed {name}: {self.sent / MIB:.1f} MiB in {self.seconds:.1f} s ({rate:.0f} MiB/s{resumed}), "
            f"sha256 {self.model.sha256[:12]} checked there"
        )


def local_model(value: str, settings: Settings) -> Path:
    """--model's value as a GGUF here: a path, or a name the lab resolves here (pretrained:NAME, fetched once and
    hash-checked; tiny:ARCH, the lab's own, built once)."""
    if value.startswith(NAMED):
        return resolve_model(settings.model_copy(update={"model": Path(value)}))
    path = Path(value).expanduser()
    if not path.is_file():
        raise UsageError(f"--push-model: --model {value}: no such file here")
    try:
        read_gguf_metadata(path)
    except (ValueError, OSError) as e:
        raise UsageError(f"--push-model: {e}") from e
    return path


def size_there(t: SshShell, path: str) -> int | None:
    r = t.run(f"test -f {sh(path)} && wc -c < {sh(path)}")
    return int(r.stdout.strip()) if r.ok and r.stdout.strip().isdigit() else None


def push_model(t: SshShell, local: Path, remote_dir: str, cache_dir: Path, console: Console) -> Pushed:
    """The file at `local` on the host (see the module's docstring); returns what was done."""
    started = time.monotonic()
    sha, size = model_sha256(local, cache_dir), local.stat().st_size
    name = local.name if SAFE_NAME.match(local.name) else "model.gguf"
    dest = f"{remote_dir}/models/{sha[:16]}/{name}"
    have = size_there(t, dest)
    if have == size:
        there = check_host_model(t, dest, remote_dir)
        if there.sha256 == sha:
            return Pushed(there, 0, 0, time.monotonic() - started)
        have = None  # another file under the name: replaced
    offset = have if have is not None and have < size else 0
    if offset == 0:
        t.run(f"mkdir -p {sh(str(Path(dest).parent))} && rm -f {sh(dest)}")
    resuming = f", resuming at {offset / MIB:.1f} MiB" if offset else ""
    console.print(f"{t.name}: pushing {local.name} ({size / MIB:.1f} MiB{resuming}) to {dest} ...")

    def feed(stdin: BinaryIO) -> None:
        with local.open("rb") as f:
            f.seek(offset)
            while chunk := f.read(MIB):
                stdin.write(chunk)

    t.pipe_in(f"cat >> {sh(dest)}", feed)
    there = check_host_model(t, dest, remote_dir)
    if there.sha256 != sha:
        t.run(f"rm -f {sh(dest)}")
        raise RemoteError(f"the copy of {local.name} there hashes to {there.sha256[:12]}, not {sha[:12]}: removed")
    return Pushed(there, size - offset, offset, time.monotonic() - started)
