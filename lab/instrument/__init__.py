"""The per-node prefill profiler: a small C++ program linked against the engine's libllama
(`profile_prefill.cpp`), built and cached by the lab like the engine."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

from pydantic import BaseModel

from lab.engine.build import EngineInfo
from lab.engine.pinning import taskset
from lab.engine.source import locked
from lab.errors import LabError

SOURCE = Path(__file__).with_name("profile_prefill.cpp")
BINARY = "lab-profile-prefill"


class InstrumentInfo(BaseModel):
    binary: Path
    source: Path
    source_sha256: str
    compile_cmd: list[str]
    engine_patch_sha256: str


class InstrumentBuildError(LabError):
    pass


def compile_command(engine: EngineInfo, out: Path, source: Path = SOURCE) -> list[str]:
    cxx = shutil.which("g++") or shutil.which("c++") or "c++"
    return [
        cxx, "-std=c++17", "-O2", "-Wall", "-Wextra",
        f"-I{engine.include_dir}", f"-I{engine.ggml_include_dir}",
        str(source), "-o", str(out),
        f"-L{engine.lib_dir}", "-lllama", "-lggml", "-lggml-base",
        f"-Wl,-rpath,$ORIGIN:{engine.lib_dir}",  # $ORIGIN: the copy inside an engine bundle finds its libs
    ]  # fmt: skip


def build_tool(engine: EngineInfo, cache_dir: Path, source: Path, binary_name: str) -> InstrumentInfo:
    """Compile a C++ tool that links the engine's libllama, once per (its source, engine build); a repeat is a
    stamp check. An engine bundle (a prebuilt engine on a target host) carries the compiled tool: used as is."""
    bundled = engine.lib_dir / binary_name
    if engine.build_dir == engine.source_dir and bundled.exists():
        return InstrumentInfo(
            binary=bundled,
            source=source,
            source_sha256=hashlib.sha256(source.read_bytes()).hexdigest(),
            compile_cmd=["(prebuilt in the engine bundle)"],
            engine_patch_sha256=engine.patch_sha256,
        )
    src_sha = hashlib.sha256(source.read_bytes()).hexdigest()
    key = hashlib.sha256(f"{src_sha}|{engine.build_dir}|{engine.patch_sha256}|{engine.flags}".encode()).hexdigest()
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
            binary=binary, source=source, source_sha256=src_sha, compile_cmd=cmd,
            engine_patch_sha256=engine.patch_sha256,
        )  # fmt: skip
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
    max_depth: int,
    cycles: int,
    threads: int,
    threads_batch: int,
    threadpool: bool = False,
    first_cycle: int = 0,
    cpu_list: str | None = None,
) -> list[str]:
    """threadpool: attach a persistent polling threadpool, as llama-bench does (llama-server does not);
    cpu_list: pin it like the server (lab.engine.pinning)."""
    return [
        *taskset(cpu_list), str(inst.binary), "--model", str(model), "--out", str(out),
        "--chunk", str(chunk), "--max-depth", str(max_depth), "--cycles", str(cycles),
        "-t", str(threads), "-tb", str(threads_batch), *(["--threadpool"] if threadpool else []),
        *(["--first-cycle", str(first_cycle)] if first_cycle else []),
    ]  # fmt: skip
