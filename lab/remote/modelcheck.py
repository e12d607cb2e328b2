"""A model named by its path on the target host (`fab -H host measure --model /srv/models/x.gguf`), checked there
before anything is pushed or started: the file exists, it is a GGUF whose header the lab's cost model reads, and
its sha256 (computed once on the host, remembered by path, size and mtime in the lab's cache there: the memo a
run on the host reads too). The check is lab.core.modelfile, run by the host's own python3 with nothing
installed: its source and that of the two modules it uses travel in the command.

Through the image, the file is mounted read-only at a path the lab chooses (MOUNT_DIR/<its name>), and the run
records the host's path and hash (Settings.model_origin); through the bundle, the lab on the host opens the path
itself.
"""

from __future__ import annotations

import base64
import json
import re
import shlex
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.core import gguf_io, hashing, modelfile
from lab.core.errors import UsageError
from lab.models.hparams import HparamsError, hparams_of
from lab.remote.connect import RemoteError, SshShell, sh

MOUNT_DIR = "/models/host"
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$")


@dataclass(frozen=True)
class HostModel:
    """A model file on the target host, as the host described it."""

    path: str  # resolved there
    size: int
    mtime_ns: int
    sha256: str
    arch: str

    @property
    def mount(self) -> str:
        """Where the lab's container sees it (its own name when that is a plain file name)."""
        name = Path(self.path).name
        return f"{MOUNT_DIR}/{name if SAFE_NAME.match(name) else 'model.gguf'}"

    def origin(self) -> str:
        """What a run in the container records as its model (lab.core.modelfile.model_record)."""
        keys = ("path", "size", "mtime_ns", "sha256")
        return json.dumps({k: getattr(self, k) for k in keys}, separators=(",", ":"))


def check_script() -> str:
    """A `python3 -c` program: lab.core.hashing, gguf_io and modelfile, each executed into a module of its own
    name (they import nothing else of the lab), then modelfile's main on the arguments."""
    mods = [(m.__name__, Path(m.__file__ or "").read_text()) for m in (hashing, gguf_io, modelfile)]
    blob = base64.b64encode(zlib.compress(json.dumps(mods).encode())).decode()
    return (
        "import base64, json, sys, types, zlib\n"
        "for p in ('lab', 'lab.core'):\n"
        "    sys.modules[p] = types.ModuleType(p)\n"
        f"for name, src in json.loads(zlib.decompress(base64.b64decode('{blob}'))):\n"
        "    m = sys.modules[name] = types.ModuleType(name)\n"
        "    exec(compile(src, name, 'exec'), m.__dict__)\n"
        "sys.exit(sys.modules['lab.core.modelfile'].main(sys.argv[1:]))\n"
    )


def check_host_model(t: SshShell, path: str, remote_dir: str) -> HostModel:
    """The model at `path` on the host, described there; one line when it is missing, not a GGUF, or a model
    the cost model cannot read."""
    cmd = f"python3 -c {shlex.quote(check_script())} {sh(path)} {sh(remote_dir + '/cache')}"
    r = t.run(cmd, timeout=None)
    if r.exited == 127:
        raise RemoteError(f"{t.name}: python3 is needed there to check --model {path}")
    try:
        info: dict[str, Any] = json.loads(r.stdout.strip().splitlines()[-1]) if r.ok else {}
    except (ValueError, IndexError):
        info = {}
    if not info:
        raise RemoteError(f"{t.name}: checking --model {path} failed: {(r.stderr or r.stdout).strip()[-500:]}")
    if "error" in info:
        raise UsageError(f"--model {info['error']}")  # the task names the host
    try:
        arch = hparams_of(info["meta"]).arch
    except HparamsError as e:
        raise UsageError(f"--model {path}: {e}") from e
    return HostModel(str(info["path"]), int(info["size"]), int(info["mtime_ns"]), str(info["sha256"]), arch)


def model_arg(args: list[str]) -> str | None:
    """The value of `--model` in a lab command's arguments (None without one)."""
    return next((args[i + 1] for i, a in enumerate(args[:-1]) if a == "--model"), None)


def with_model(args: list[str], path: str) -> list[str]:
    """The arguments with `--model`'s value replaced."""
    return [path if i > 0 and args[i - 1] == "--model" else a for i, a in enumerate(args)]
