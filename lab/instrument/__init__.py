"""The per-node prefill profiler: a small C++ program linked against the engine's libllama
(`profile_prefill.cpp`), built and cached by the lab like the engine. It and the in-process arms driver
(lab/inproc) share the header lab/native/labtool.h: part of every tool's build key.

It may import the engine and the core.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

from pydantic import BaseModel

from lab.core.errors import LabError
from lab.engine.build import EngineInfo
from lab.engine.pinning import taskset
from lab.engine.source import locked

SOURCE = Path(__file__).with_name("profile_prefill.cpp")
BINARY = "lab-profile-prefill"
NATIVE = Path(__file__).parent.parent / "native"  # the C++ tools' shared header: on their -I path, in their key
HEADERS = (NATIVE / "labtool.h", NATIVE / "kvlayout.h")


class InstrumentInfo(BaseModel):
    binary: Path
    source: Path
    source_sha256: str
    headers_sha256: str = ""  # the shared headers (HEADERS): one digest over their names and bytes
    compile_cmd: list[str]
    engine_patch_sha256: str


class InstrumentBuildError(LabError):
    pass


def compile_command(engine: EngineInfo, out: Path, source: Path = SOURCE) -> list[str]:
    cxx = shutil.which("g++") or shutil.which("c++") or "c++"
    return [
        cxx,
        "-std=c++17",
        "-O2",
        "-Wall",
        "-Wextra",
        f"-I{NATIVE}",
        f"-I{engine.include_dir}",
        f"-I{engine.ggml_include_dir}",
        str(source),
        "-o",
        str(out),
        f"-L{engine.lib_dir}",
        "-lllama",
        "-lggml",
        "-lggml-base",
        f"-Wl,-rpath,$ORIGIN:{engine.lib_dir}",  # $ORIGIN: the copy inside an engine bundle finds its libs
    ]


def headers_sha256() -> str:
    """One digest over the shared headers (names and bytes): a header change is a new build of every tool."""
    h = hashlib.sha256()
    for header in HEADERS:
        h.update(header.name.encode() + b"\0" + header.read_bytes() + b"\0")
    return h.hexdigest()


def tool_key(engine: EngineInfo, source: Path) -> str:
    """The build cache key of a tool: its source, the shared headers and the engine build."""
    src_sha = hashlib.sha256(source.read_bytes()).hexdigest()
    parts = f"{src_sha}|{headers_sha256()}|{engine.build_dir}|{engine.patch_sha256}|{engine.flags}"
    return hashlib.sha256(parts.encode()).hexdigest()


def build_tool(engine: EngineInfo, cache_dir: Path, source: Path, binary_name: str) -> InstrumentInfo:
    """Compile a C++ tool that links the engine's libllama, once per (its source, the shared headers, engine
    build); a repeat is a stamp check. An engine bundle (a prebuilt engine on a target host) carries the compiled
    tool: used as is."""
    src_sha = hashlib.sha256(source.read_bytes()).hexdigest()
    bundled = engine.lib_dir / binary_name
    if engine.build_dir == engine.source_dir and bundled.exists():
        return InstrumentInfo(
            binary=bundled,
            source=source,
            source_sha256=src_sha,
            headers_sha256=headers_sha256(),
            compile_cmd=["(prebuilt in the engine bundle)"],
            engine_patch_sha256=engine.patch_sha256,
        )
    key = tool_key(engine, source)
    out_dir = cache_dir / "instrument" / key[:16]
    binary = out_dir / binary_name
    stamp = out_dir / f"{binary_name}.json"
    with locked(out_dir.with_suffix(".lock")):
        if stamp.exists() and binary.exists():
            return InstrumentInfo.model_validate_json(stamp.read_text())
        out_dir.mkdir(parents=True, exist_ok=True)
        cmd = compile_command(engine, binary, source)
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise InstrumentBuildError(f"compiling {source.name} failed:\n{proc.stderr[-3000:]}")
        info = InstrumentInfo(
            binary=binary,
            source=source,
            source_sha256=src_sha,
            headers_sha256=headers_sha256(),
            compile_cmd=cmd,
            engine_patch_sha256=engine.patch_sha256,
        )
        stamp.write_text(json.dumps(json.loads(info.model_dump_json()), indent=2))
    return info


def build_instrument(engine: EngineInfo, cache_dir: Path) -> InstrumentInfo:
    """The per-node profiler, compiled and cached against the engine (lab.instrument.build_tool)."""
    return build_tool(engine, cache_dir, SOURCE, BINARY)


def instrument_command(
    inst: InstrumentInfo,
    model: Path,
    out: Path,
    *,
    chunk: int,
    depths: list[int],
    fill: str,
    reps: int,
    process: int,
    threads: int,
    threads_batch: int,
    check_depth: int | None = None,
    threadpool: bool = False,
    cpu_list: str | None = None,
    kv: list[str] | None = None,
) -> list[str]:
    """One process of a profile (lab/instrument/profile_prefill.cpp); threadpool: attach a persistent polling
    threadpool, as llama-bench does (llama-server does not); cpu_list: pin it like the server (lab.engine.pinning)."""
    return [
        *taskset(cpu_list),
        str(inst.binary),
        "--model",
        str(model),
        "--out",
        str(out),
        "--chunk",
        str(chunk),
        "--depths",
        ",".join(str(d) for d in depths),
        "--fill",
        fill,
        "--reps",
        str(reps),
        "--process",
        str(process),
        "-t",
        str(threads),
        "-tb",
        str(threads_batch),
        *(["--check-depth", str(check_depth)] if check_depth is not None else []),
        *(["--threadpool"] if threadpool else []),
        *(kv or []),
    ]
