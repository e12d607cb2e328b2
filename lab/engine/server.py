"""Patched llama-server lifecycle: start with measurement hygiene, wait for health, read the resolved graph
config from its log (lab.engine.resolved), stop reliably (process group + parent-death signal: no orphans)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from lab.core.errors import LabError
from lab.core.hostnoise import proc_ctx_switches
from lab.core.settings_server import ServerSettings
from lab.engine.build import EngineInfo
from lab.engine.pinning import llama_args, taskset
from lab.engine.ports import listeners, socket_inodes
from lab.engine.resolved import ResolvedConfig, parse_resolved_config


class ServerError(LabError):
    pass


class PortTaken(ServerError):
    """Another process listens on the port the server was started on."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def die_with_parent() -> None:
    # PR_SET_PDEATHSIG: the server gets SIGTERM if the Python process that started it dies
    with contextlib.suppress(OSError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)


def mmproj_args(projector: Path | None) -> list[str]:
    """The flags that load a vision projector (none without one)."""
    return ["--mmproj", str(projector)] if projector else []


def server_args(settings: ServerSettings, model: Path, port: int, extra: list[str]) -> list[str]:
    """Measurement hygiene: one slot, no context shift, no draft, checkpoints/prompt cache as configured,
    no projector unless one is given explicitly (``--mmproj PATH`` in the extra args)."""
    extra = list(settings.extra_args) + list(extra)
    # --no-mmproj also drops an explicit --mmproj (common_params_handle_models), so leave it out then
    mmproj = "--mmproj" in extra or "-mm" in extra
    args = [
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--model",
        str(model),
        "--threads",
        str(settings.threads),
        "--threads-batch",
        str(settings.threads_batch or settings.threads),
        "--ctx-size",
        str(settings.ctx_size),
        "--batch-size",
        str(settings.batch_size),
        "--ubatch-size",
        str(settings.ubatch_size),
        "--parallel",
        "1",
        "--no-context-shift",
        "--ctx-checkpoints",
        str(settings.checkpoints),
        "--checkpoint-min-step",
        str(settings.checkpoint_min_step),
        "--cache-ram",
        str(settings.cache_ram_mib),
        "--cache-reuse",
        str(settings.cache_reuse),
        "--flash-attn",
        settings.flash_attn,
        *settings.kv_args,
        "--fit",
        "off",
        "--no-ui",
        *([] if mmproj else ["--no-mmproj"]),
        *(["--swa-full"] if settings.swa_full and "--swa-full" not in extra else []),
        "--log-verbosity",
        "4",  # llama_context / memory lines: the resolved config is parsed from them
        *llama_args(settings.cpu_list),
    ]
    return args + extra


class LlamaServer:
    """`with LlamaServer(engine, model, settings, log_path) as srv: srv.completion({...})`."""

    def __init__(
        self,
        engine: EngineInfo,
        model: Path,
        settings: ServerSettings,
        log_path: Path,
        extra_args: list[str] | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.engine = engine
        self.model = model
        self.settings = settings
        self.log_path = log_path
        self.extra_args = list(extra_args or [])
        self.env = dict(env or {})  # on top of this process's (e.g. lab.engine.cells.DEBUG_ENV)
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.config = ResolvedConfig()
        self.ctx_switches: dict[str, int] = {}  # voluntary / nonvoluntary, read when it stops
        self._client: httpx.Client | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def client(self) -> httpx.Client:
        if self._client is None:
            self._client = httpx.Client(base_url=self.url, timeout=httpx.Timeout(600.0, connect=5.0))
        return self._client

    def launch(self) -> None:
        """Start the process on a free port without waiting for it (`start` waits): a caller may load something
        else meanwhile."""
        if not self.model.exists():
            raise ServerError(f"model not found: {self.model}")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        args = server_args(self.settings, self.model, self.port, self.extra_args)
        cmd = [*taskset(self.settings.cpu_list), str(self.engine.server), *args]
        env = dict(os.environ, **self.env, LD_LIBRARY_PATH=str(self.engine.lib_dir))
        with self.log_path.open("ab") as log:
            log.write(f"\n# {' '.join(cmd)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )

    def start(self) -> LlamaServer:
        """Launch (unless `launch` already did) and wait until healthy; a port taken between probe and bind is
        retried on another."""
        for _attempt in range(3):
            if self.proc is None:
                self.launch()
            try:
                self._wait_healthy()
            except ServerError as e:
                self.stop()
                if isinstance(e, PortTaken) or "couldn't bind" in str(e):
                    continue  # port taken between probe and bind: try another
                raise
            self.config = parse_resolved_config(self.log_text())
            self.config.build = str(self.props().get("build_info") or "") or None
            return self
        raise ServerError("could not bind a free port after 3 attempts")

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.settings.startup_timeout_s
        assert self.proc is not None
        while time.monotonic() < deadline:
            rc = self.proc.poll()
            if rc is not None:
                tail = "\n".join(self.log_text().splitlines()[-25:])
                raise ServerError(f"llama-server exited with {rc} during startup; log {self.log_path}:\n{tail}")
            with contextlib.suppress(httpx.HTTPError):
                if self.client.get("/health", timeout=2.0).status_code == 200:
                    self._check_port_is_ours()
                    return
            time.sleep(0.1)
        raise ServerError(f"llama-server not healthy after {self.settings.startup_timeout_s}s; log {self.log_path}")

    def _check_port_is_ours(self) -> None:
        """Whoever answered /health, every socket listening on the port must be our process's: another lab
        command's server can take the port between free_port() and our bind (ours then exits, but the other
        answers first), or share it (`--reuse-port` on both, the kernel dealing connections out between them)."""
        assert self.proc is not None
        listening = listeners(self.port)
        if not listening or not listening <= socket_inodes(self.proc.pid):
            raise PortTaken(f"another process listens on port {self.port}; log {self.log_path}")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def died(self, dropped: bool = False) -> bool:
        """After a request: has the server died? A dropped connection (`dropped`) gets a few seconds to show it."""
        if dropped and self.wait_exit(5.0):
            return True
        return not self.alive()

    def wait_exit(self, timeout_s: float) -> bool:
        """True if the server process has exited within timeout_s (e.g. after a dropped connection)."""
        if self.proc is None:
            return True
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return False
        return True

    def stop(self, timeout_s: float = 15.0) -> int | None:
        """SIGTERM the server's process group, SIGKILL after timeout. Returns the exit code."""
        if self._client is not None:
            self._client.close()
            self._client = None
        proc, self.proc = self.proc, None
        if proc is None:
            return None
        if proc.poll() is None:
            self.ctx_switches = proc_ctx_switches(proc.pid)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        return proc.returncode

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # --- HTTP helpers -------------------------------------------------------------------------------

    def completion(self, body: dict[str, Any]) -> httpx.Response:
        return self.client.post("/completion", json=body)

    def tokenize(self, text: str, add_special: bool = False) -> list[int]:
        r = self.client.post("/tokenize", json={"content": text, "add_special": add_special})
        r.raise_for_status()
        return [int(t) for t in r.json()["tokens"]]

    def n_vocab(self) -> int:
        """The loaded model's vocabulary size, as the server reports it (/v1/models); never guessed."""
        r = self.client.get("/v1/models")
        r.raise_for_status()
        try:
            n = int(r.json()["data"][0]["meta"]["n_vocab"])
        except (KeyError, IndexError, TypeError, ValueError) as e:
            raise ServerError(f"llama-server at {self.url} did not report the model's n_vocab (/v1/models)") from e
        if n <= 0:
            raise ServerError(f"llama-server reports n_vocab = {n}")
        return n

    def props(self) -> dict[str, Any]:
        r = self.client.get("/props")
        r.raise_for_status()
        out: dict[str, Any] = r.json()
        return out


class LogTail:
    """What the server logged since the last call. mtmd reports the vision encode and the LM prefill of the
    image tokens only in its log ("image slice encoded in N ms", "image decoded (batch i/n) in N ms")."""

    ENCODED = re.compile(r"slice encoded in (\d+) ms")
    DECODED = re.compile(r"decoded \(batch \d+/\d+\) in (\d+) ms")

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = path.stat().st_size if path.exists() else 0

    def read(self) -> str:
        if not self.path.exists():
            return ""
        with self.path.open("rb") as fh:
            fh.seek(self.offset)
            data = fh.read()
        self.offset += len(data)
        return data.decode(errors="replace")

    def image_ms(self) -> tuple[float | None, float | None]:
        """(encode ms, image-token decode ms) logged since the last call; None when no image was processed."""
        text = self.read()
        enc = [int(m) for m in self.ENCODED.findall(text)]
        dec = [int(m) for m in self.DECODED.findall(text)]
        return (float(sum(enc)) if enc else None), (float(sum(dec)) if dec else None)


def adhoc_server(
    engine: EngineInfo,
    model: Path,
    settings: ServerSettings,
    cache_dir: Path,
    what: str,
    extra_args: list[str] | None = None,
    env: dict[str, str] | None = None,
) -> LlamaServer:
    """A server that serves no run (an engine check, a plan's calibration, a trace's derivation before its run
    exists): its log in the cache's logs/, named by what it is for, when and by whom, so no two share a log. A run's
    own servers are OpenRun.server's, logging into the run folder."""
    log = cache_dir / "logs" / f"{what}-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.log"
    return LlamaServer(engine, model, settings, log, extra_args, env)
