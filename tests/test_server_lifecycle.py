"""Server lifecycle: hygiene flags, health, resolved config from the log, no orphan processes."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from lab.core.errors import UsageError
from lab.engine import server as server_module
from lab.engine.build import EngineInfo
from lab.engine.pinning import cpus
from lab.engine.resolved import parse_resolved_config
from lab.engine.server import LlamaServer, ServerError, server_args
from lab.experiments.prefill_tps import LlamaBench, bench_command

from conftest import ENGINES, EngineOf, ServerFactory, server_settings

pytestmark = pytest.mark.engine


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(0); it has exited all the same
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


def wait_gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return True
        time.sleep(0.05)
    return False


def test_measurement_hygiene_flags(tiny_model: Path) -> None:
    args = server_args(server_settings(), tiny_model, 1234, [])
    joined = " ".join(args)
    for flag in ("--parallel 1", "--no-context-shift", "--ctx-checkpoints 0", "--cache-ram 0", "--host 127.0.0.1"):
        assert flag in joined
    assert "--model-draft" not in joined and "-md" not in args


def test_resolved_config_from_the_log(server: LlamaServer) -> None:
    cfg = server.config
    assert cfg.memory == "hybrid"
    assert cfg.n_ctx == 8192
    assert cfg.n_rs_seq == 0
    assert cfg.threads == 2 and cfg.threads_batch == 2
    assert cfg.flash_attn is not None
    assert cfg.n_ubatch == 512
    assert cfg.raw, "the raw llama_context lines are kept"


def test_parse_tolerates_unknown_logs() -> None:
    cfg = parse_resolved_config("nothing to see\n")
    assert cfg.n_ctx is None and cfg.memory is None


def test_stop_leaves_no_process(start_server: ServerFactory) -> None:
    srv = start_server()
    assert srv.proc is not None
    pid = srv.proc.pid
    assert srv.stop() is not None
    assert wait_gone(pid)
    assert not srv.alive()
    srv.stop()  # idempotent


def test_missing_model_is_a_clear_error(engine: EngineInfo, tmp_path: Path) -> None:
    srv = LlamaServer(engine, tmp_path / "nope.gguf", server_settings(), tmp_path / "log")
    with pytest.raises(ServerError, match="model not found"):
        srv.start()


def test_broken_model_fails_fast_with_the_log(engine: EngineInfo, tmp_path: Path) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 64)
    srv = LlamaServer(engine, bad, server_settings(), tmp_path / "log")
    with pytest.raises(ServerError, match="exited"):
        srv.start()
    assert not srv.alive()


def test_server_dies_with_its_parent(engine: EngineInfo, tiny_model: Path, tmp_path: Path) -> None:
    """Even a SIGKILLed parent (a crashed test run) leaves no orphan server behind."""
    script = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        from lab.engine.build import EngineInfo
        from lab.engine.server import LlamaServer
        from lab.core.settings_server import ServerSettings
        engine = EngineInfo.model_validate_json({engine.model_dump_json()!r})
        srv = LlamaServer(engine, Path({str(tiny_model)!r}), ServerSettings(threads=1, ctx_size=2048),
                          Path({str(tmp_path / "log")!r})).start()
        print(srv.proc.pid, flush=True)
        time.sleep(600)
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    server_pid = int(parent.stdout.readline())
    assert pid_alive(server_pid)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    assert wait_gone(server_pid), "llama-server outlived its parent"


def test_pinned_server_and_bench_stay_on_their_cpus(start_server: ServerFactory, engine: EngineInfo) -> None:
    """server.cpu_list pins the server's threads (taskset) and passes llama.cpp's -C mask; llama-bench alike;
    its context switches are read when it stops."""
    srv = start_server(cpu_list="0")
    assert srv.proc is not None
    tids = [int(t.name) for t in Path(f"/proc/{srv.proc.pid}/task").iterdir()]
    assert len(tids) > 1 and all(os.sched_getaffinity(t) == {0} for t in tids)
    cmd = srv.log_text().splitlines() or [""]
    assert any("-C 0x1 --cpu-strict 1" in line for line in cmd), cmd[:3]
    srv.stop()
    assert set(srv.ctx_switches) == {"voluntary", "nonvoluntary"} and srv.ctx_switches["voluntary"] > 0
    bench = bench_command(LlamaBench(engine, Path("m.gguf"), [16], [0], 1, 1, "auto", cpu_list="0-1"))
    assert bench.split()[1:4] == ["taskset", "--cpu-list", "0,1"] and "-C 0x3 --cpu-strict 1" in bench
    with pytest.raises(UsageError, match="cpu_list"):
        cpus("0-x")


class _Impostor(BaseHTTPRequestHandler):
    """Another process's server: healthy, and answering everything."""

    def do_GET(self) -> None:
        body = json.dumps({"status": "ok"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


class _SharingServer(ThreadingHTTPServer):
    def server_bind(self) -> None:
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)  # as llama-server's with --reuse-port
        super().server_bind()


@pytest.mark.faults
@pytest.mark.parametrize("release", ENGINES)
@pytest.mark.parametrize("shared", [False, True], ids=["port taken", "port shared"])
def test_another_server_on_its_port_is_never_measured(
    release: str, shared: bool, engine_of: EngineOf, tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two lab commands race for a port (free_port(), then the server binds it): the other one's server answers
    /health while ours fails to bind, or (with --reuse-port on both) binds the same port beside it and the kernel
    shares the connections out. Ours moves to another port, and every answer is its own."""
    impostor = (_SharingServer if shared else ThreadingHTTPServer)(("127.0.0.1", 0), _Impostor)
    threading.Thread(target=impostor.serve_forever, daemon=True).start()
    taken = impostor.server_address[1]
    ports, free_port = iter([taken]), server_module.free_port
    monkeypatch.setattr(server_module, "free_port", lambda: next(ports, 0) or free_port())
    extra = ["--reuse-port"] if shared else []
    srv = LlamaServer(engine_of(release), tiny_model, server_settings(), tmp_path / "server.log", extra)
    try:
        srv.start()
        assert srv.port != taken, srv.log_text()[-2000:]
        assert srv.config.build and all(srv.props().get("build_info") for _ in range(16))
        assert srv.tokenize("hello")
    finally:
        srv.stop()
        impostor.shutdown()
        impostor.server_close()
