"""In-process arms: `driver.cpp`, a small C++ driver linked against the engine's libllama (public API plus the
lab's llama_memory_seq_fake_prefix), measures one step several ways inside one long-lived process, with no
server in the numbers. Built and cached like the profiler instrument.

The driver loads the model once and takes commands on stdin (`DriverSession`): a `fill` pass decodes the grid's
token stream once, keeping a state blob at every grid L and timing a chunk of each `new` at that depth; a
`rep` times the arms of one point, each starting the new tokens from a depth-L state that costs no prefill
(fabricated, or restored from the fill). So a rep costs its new tokens, not its prefix.

It may import the instrument, the engine and the core.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any

from lab.core.errors import LabError, UsageError
from lab.engine.build import EngineInfo
from lab.engine.pinning import taskset
from lab.instrument import InstrumentInfo, build_tool

if TYPE_CHECKING:
    from lab.core.settings import Settings

SOURCE = Path(__file__).with_name("driver.cpp")
BINARY = "lab-inproc-driver"
ARMS = ("baseline", "fake", "genuine", "plain")


class DriverError(LabError):
    pass


def build_driver(engine: EngineInfo, cache_dir: Path) -> InstrumentInfo:
    return build_tool(engine, cache_dir, SOURCE, BINARY)


def driver_command(
    driver: InstrumentInfo,
    model: Path,
    *,
    Ls: list[int],
    news: list[int],
    threads: int,
    threads_batch: int | None = None,
    n_ctx: int | None = None,
    ubatch: int = 512,
    flash_attn: str = "auto",
    tokens: Path | None = None,
    cpu_list: str | None = None,
    fake: bool = True,
    check: bool = False,
    threadpool: bool = False,
    swa_full: bool = False,
    kv: list[str] | None = None,
) -> list[str]:
    """tokens: a file of whitespace-separated ids (else a seeded filler); check: validate and exit; threadpool:
    attach a persistent one, as llama-bench does (llama-server does not, nor does the sweep)."""
    return [
        *taskset(cpu_list),
        *(str(driver.binary), "--model", str(model)),
        *("--Ls", ",".join(map(str, Ls)), "--news", ",".join(map(str, news))),
        *("-t", str(threads), *(["-tb", str(threads_batch)] if threads_batch else [])),
        *("--ubatch", str(ubatch), "--flash-attn", flash_attn, *(["--n-ctx", str(n_ctx)] if n_ctx else [])),
        *(["--tokens", str(tokens)] if tokens else []),
        *([] if fake else ["--no-fake"]),
        *(["--check"] if check else []),
        *(["--threadpool"] if threadpool else []),
        *(["--swa-full"] if swa_full else []),
        *(kv or []),
    ]


def _reason(stderr: str, code: int | None) -> str:
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    return f"the in-process driver failed ({code}): {lines[-1] if lines else 'no reason'}"


def check_driver(cmd: list[str], log_path: Path) -> None:
    """Run the driver's startup checks (the model, the context, the fake op, the tokens) and measure nothing."""
    from lab.engine.server import die_with_parent  # here: the image's tool layer builds without the server

    assert "--check" in cmd, "a check command measures nothing"
    proc = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL, preexec_fn=die_with_parent)
    with log_path.open("a") as log:
        log.write(proc.stderr)
    if proc.returncode != 0:
        raise DriverError(_reason(proc.stderr, proc.returncode))


class DriverSession:
    """The driver as a subprocess for a whole run: `call` sends one command and returns its rows. Every row is
    also appended to `raw_log` (what the driver said, verbatim); its stderr goes to `log_path`."""

    def __init__(self, cmd: list[str], log_path: Path, raw_log: Path | None = None) -> None:
        self.cmd, self.log_path, self.raw_log = cmd, log_path, raw_log
        self.proc: subprocess.Popen[str] | None = None
        self.meta: dict[str, Any] = {}
        self._err: IO[str] | None = None

    def __enter__(self) -> DriverSession:
        from lab.engine.server import die_with_parent

        self._err = self.log_path.open("a")
        self.proc = subprocess.Popen(
            self.cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._err,
            text=True,
            bufsize=1,
            preexec_fn=die_with_parent,
        )
        first = self._line()
        if first.get("kind") != "meta":
            raise DriverError(f"the in-process driver began with {first!r}, not its meta line")
        self.meta = first
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        proc = self.proc
        if proc is not None:
            with contextlib.suppress(OSError, ValueError):
                assert proc.stdin is not None
                proc.stdin.write("quit\n")
                proc.stdin.close()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._err is not None:
            self._err.close()

    def _failed(self) -> DriverError:
        assert self.proc is not None
        code = self.proc.poll()
        if code is None:
            self.proc.kill()
            code = self.proc.wait()
        tail = self.log_path.read_text(errors="replace")[-2000:] if self.log_path.exists() else ""
        return DriverError(_reason(tail, code) + f" (log: {self.log_path})")

    def _line(self) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise self._failed()
        row: dict[str, Any] = json.loads(line)
        if self.raw_log is not None:
            with self.raw_log.open("a") as f:
                f.write(line)
        return row

    def call(self, command: str) -> list[dict[str, Any]]:
        """Send one command; its rows, up to the driver's `done`. An `error` row raises with its reason."""
        assert self.proc is not None and self.proc.stdin is not None
        try:
            self.proc.stdin.write(command + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as e:
            raise self._failed() from e
        rows: list[dict[str, Any]] = []
        errors: list[dict[str, Any]] = []
        while (row := self._line()).get("kind") != "done":  # read up to `done`, so the next call starts clean
            (errors if row.get("kind") == "error" else rows).append(row)
        if errors:
            raise DriverError(f"the in-process driver refused {command!r}: {errors[0].get('reason')}")
        return rows

    def fill(self, n: int) -> list[dict[str, Any]]:
        return self.call(f"fill {n}")

    def rep(self, L: int, new: int, rep: int, arms: list[str]) -> list[dict[str, Any]]:
        return self.call(f"rep {L} {new} {rep} {','.join(arms)}")


def sweep_driver_command(
    driver: InstrumentInfo,
    settings: Settings,
    model: Path,
    news: list[int],
    tokens: Path | None = None,
    fake: bool = True,
    check: bool = False,
) -> list[str]:
    """The driver over the sweep's Ls (and these news), with the server's threads, batch, context and pinning."""
    srv = settings.server
    return driver_command(
        driver,
        model,
        Ls=settings.sweep.Ls,
        news=news,
        threads=srv.threads,
        threads_batch=srv.threads_batch,
        n_ctx=srv.ctx_size,
        ubatch=srv.ubatch_size,
        flash_attn=srv.flash_attn,
        tokens=tokens,
        cpu_list=srv.cpu_list,
        fake=fake,
        check=check,
        swa_full=srv.swa_full_on,
        kv=srv.kv_args,
    )


def prepare_driver(
    engine: EngineInfo, settings: Settings, model: Path, news: list[int], fake: bool, who: str
) -> tuple[InstrumentInfo, int]:
    """Build the driver and run its startup checks (the model, the context, the fake op) before any run folder
    exists; returns it and the model's vocabulary size (from the GGUF, as the driver and the server see it)."""
    from lab.core.gguf_io import read_gguf_metadata

    driver = build_driver(engine, settings.cache_dir)  # a compile error creates no run
    try:
        n_vocab = len(read_gguf_metadata(model).get("tokenizer.ggml.tokens", []))
    except (OSError, ValueError) as e:
        raise UsageError(f"lab {who}: {e}") from e
    log = settings.cache_dir / "logs" / f"{who}-check.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    try:
        check_driver(sweep_driver_command(driver, settings, model, news, fake=fake, check=True), log)
    except DriverError as e:
        raise UsageError(str(e).replace("the in-process driver failed (2): ", f"lab {who}: ")) from e
    return driver, n_vocab
