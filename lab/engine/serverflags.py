"""What a llama-server binary says of itself: its version, and the defaults of the flags its prompt cache depends on,
read from its own `--help` (each version has its own: `--checkpoint-min-step` is 256 at the pin and 8192 at
0c1e57098, `--reasoning-preserve` exists only on the newer). A binary the lab did not build (a user's stock
server) is read the same way, so today's server is modelled with the defaults it really has.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from lab.core import releases
from lab.core.errors import LabError


class ServerFlagsError(LabError):
    pass


@dataclass(frozen=True)
class ServerDefaults:
    """A server's version line and its prompt-cache defaults; None: the binary has no such flag."""

    version: str
    checkpoints: int  # --ctx-checkpoints
    checkpoint_min_step: int  # --checkpoint-min-step
    cache_ram_mib: int  # --cache-ram
    cache_reuse: int  # --cache-reuse
    ubatch: int  # --ubatch-size
    batch: int  # --batch-size
    cache_idle_slots: bool | None  # --cache-idle-slots
    reasoning_preserve: bool | None  # --reasoning-preserve


# the first spelling of each flag, as `--help` lists it at the start of an option's line
_FLAGS = {
    "checkpoints": "--ctx-checkpoints",
    "checkpoint_min_step": "--checkpoint-min-step",
    "cache_ram_mib": "--cache-ram",
    "cache_reuse": "--cache-reuse",
    "ubatch": "--ubatch-size",
    "batch": "--batch-size",
    "cache_idle_slots": "--cache-idle-slots",
    "reasoning_preserve": "--reasoning-preserve",
}
_DEFAULT = re.compile(r"\(default:\s*([^,)\s]+)")


def options(help_text: str) -> dict[str, str]:
    """Each option's text (its flag line and the wrapped description under it, joined), by every flag it names."""
    out: dict[str, str] = {}
    current: list[str] = []
    for line in [*help_text.splitlines(), "-"]:
        if line.startswith("-"):  # an option starts at column 0, its description lines are indented
            if current:
                text = " ".join(s.strip() for s in current)
                head = _flags_column(current[0])
                for flag in re.findall(r"--?[a-z][a-z0-9-]*", head):
                    out.setdefault(flag, text)
            current = [line]
        elif current:
            current.append(line)
    return out


def _flags_column(line: str) -> str:
    """The flags of an option's first line: its first 40 columns when the description starts there, the whole
    line when the flags are longer (the description then starts on the next line)."""
    return line[:40] if len(line) > 40 and line[39] == " " else line


def parse_defaults(help_text: str, version: str) -> ServerDefaults:
    """The defaults `--help` prints: `(default: 8192, 0 = no minimum)`, `(default: enabled)`."""
    opts = options(help_text)
    values: dict[str, int | bool | None] = {}
    for field, flag in _FLAGS.items():
        text = opts.get(flag)
        m = _DEFAULT.search(text) if text is not None else None
        if m is None:
            values[field] = None
        elif m.group(1) in ("enabled", "true", "disabled", "false"):
            values[field] = m.group(1) in ("enabled", "true")
        else:
            values[field] = int(m.group(1))
    missing = [f for f in _FLAGS if f not in ("cache_idle_slots", "reasoning_preserve") and values[f] is None]
    if missing:
        flags = ", ".join(_FLAGS[f] for f in missing)
        raise ServerFlagsError(f"{version}: --help names no default for {flags}; is this a llama-server?")
    return ServerDefaults(version=version, **values)  # type: ignore[arg-type]


def release_of(version: str) -> str:
    """The supported release (its sdist version) a server's `--version` line names, else the newest: the patched
    build nearest a server the lab did not build."""
    named = releases.named_by(version)
    return named.sdist_version if named else releases.NAMED["latest"]


def users_server(binary: Path) -> tuple[Path, ServerDefaults]:
    """A binary a user names for today's server, checked (an executable file, one line otherwise), and its
    defaults (its libraries beside it or where the system finds them)."""
    path = binary.expanduser()
    if not path.is_file() or not os.access(path, os.X_OK):
        raise ServerFlagsError(f"conversation.today_server: {binary}: not an executable file")
    path = path.resolve()
    return path, read_defaults(path, path.parent)


def read_defaults(binary: Path, lib_dir: Path | None = None) -> ServerDefaults:
    """Run `binary --version` and `--help` (each a second or less) and read its defaults; once per binary and
    build (a run reads them where it derives, plans and replays)."""
    return _read_defaults(str(binary), binary.stat().st_mtime_ns if binary.exists() else 0, str(lib_dir or ""))


@functools.lru_cache(maxsize=16)
def _read_defaults(binary_path: str, mtime_ns: int, lib_dir_path: str) -> ServerDefaults:
    binary = Path(binary_path)
    env = dict(os.environ, LD_LIBRARY_PATH=lib_dir_path) if lib_dir_path else None
    texts = []
    for flag in ("--version", "--help"):
        try:
            r = subprocess.run([str(binary), flag], capture_output=True, text=True, timeout=60, env=env)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise ServerFlagsError(f"{binary} {flag}: {e}") from e
        if r.returncode != 0:
            raise ServerFlagsError(f"{binary} {flag} failed ({r.returncode}): {(r.stderr or r.stdout).strip()[-200:]}")
        texts.append(r.stdout + r.stderr)
    version = next((s.strip() for s in texts[0].splitlines() if s.startswith("version:")), "version: unknown")
    return parse_defaults(texts[1], version.removeprefix("version:").strip())
