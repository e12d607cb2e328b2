"""Shared fixtures: the real patched engine (assertions on), the real tiny model, real servers.

Tiers (every test carries exactly one; `make test` runs them all, `make test-fast` only `fast`):
  fast    no server, no engine build, no browser: pure Python, run folders, catalog, rendered report files
  engine  the real patched llama-server / instrument / llama-bench on the tiny model
  browser a real headless Chromium opens the reports
  slow    containers, target hosts over SSH, DVC SSH remotes, other llama.cpp versions, own-cache rebuilds

Tests never read the developer's params.yaml or LAB_* environment (`isolated_config`), and never rebuild or
re-patch the shared engine cache a user measures with (a test that changes the patch builds in its own).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from lab.core.releases import NAMED, resolve_version
from lab.core.settings import ServerSettings, Settings, load_settings
from lab.engine.build import EngineInfo, build_engine
from lab.engine.server import LlamaServer
from lab.engine.source import PreparedSource, prepare_source
from lab.models.resolve import ensure_tiny_model
from lab.models.tiny.archs import TinyModelSpec, tiny_spec

from sshd import Sshd, fab_project, start_sshd

TIERS = ("fast", "engine", "browser", "slow")
ENGINES = tuple(NAMED)  # the supported releases every contract test runs on: pin, latest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    wrong = [
        f"{item.nodeid} ({', '.join(tiers) or 'none'})"
        for item in items
        if len(tiers := sorted({m.name for m in item.iter_markers() if m.name in TIERS})) != 1
    ]
    if wrong:
        raise pytest.UsageError(f"tests need exactly one tier marker ({', '.join(TIERS)}): {', '.join(wrong[:5])}")


@pytest.fixture(scope="session", autouse=True)
def isolated_config(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """An empty params file and no LAB_* variables, for the tests and every `lab` process they start."""
    saved = {k: v for k, v in os.environ.items() if k.startswith("LAB_")}
    for k in saved:
        del os.environ[k]
    params = tmp_path_factory.mktemp("config") / "params.yaml"
    params.write_text("{}\n")
    os.environ["LAB_PARAMS_FILE"] = str(params)
    yield params
    del os.environ["LAB_PARAMS_FILE"]
    os.environ.update(saved)


@pytest.fixture(scope="session")
def settings(isolated_config: Path) -> Settings:
    return load_settings()


@pytest.fixture(scope="session")
def source(settings: Settings) -> PreparedSource:
    return prepare_source(settings.engine, settings.cache_dir)


@pytest.fixture(scope="session")
def engine(settings: Settings) -> EngineInfo:
    """The assertions-on build: kv-cells / recurrent asserts abort the server instead of passing silently."""
    return build_engine(settings.engine, settings.cache_dir, flavor="assert")


EngineOf = Callable[[str], EngineInfo]


@pytest.fixture(scope="session")
def engine_of(settings: Settings) -> EngineOf:
    """engine_of("latest") -> that supported release's assertions-on build (`make test` builds both first)."""
    built: dict[str, EngineInfo] = {}

    def of(name: str) -> EngineInfo:
        version = resolve_version(name)
        if version not in built:
            es = settings.engine.model_copy(update={"sdist_version": version})
            built[version] = build_engine(es, settings.cache_dir, flavor="assert")
        return built[version]

    return of


@pytest.fixture(scope="session")
def tiny_model(settings: Settings, source: PreparedSource) -> Path:
    return ensure_tiny_model(settings.cache_dir, source)


@pytest.fixture(scope="session")
def iswa_model(settings: Settings, source: PreparedSource) -> Path:
    return ensure_tiny_model(settings.cache_dir, source, TinyModelSpec(arch="gemma3", n_layer=4))


@pytest.fixture(scope="session")
def oss_model(settings: Settings, source: PreparedSource) -> Path:
    """The tiny gpt-oss: window and full attention alternating, attention sinks, a biased MoE."""
    return ensure_tiny_model(settings.cache_dir, source, tiny_spec("gpt-oss", n_layer=4))


def server_settings(**kw: object) -> ServerSettings:
    base: dict[str, object] = {"threads": 2, "ctx_size": 8192, "startup_timeout_s": 60.0}
    base.update(kw)
    return ServerSettings.model_validate(base)


ServerFactory = Callable[..., LlamaServer]

# a chat template that keeps earlier turns' reasoning only when asked (--reasoning-preserve sets preserve_thinking)
THINKING_TEMPLATE = """{%- for message in messages -%}
<|im_start|>{{ message.role }}
{% if message.role == 'assistant' and message.reasoning_content and preserve_thinking %}<think>
{{ message.reasoning_content }}
</think>
{% endif %}{{ message.content }}<|im_end|>
{% endfor -%}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif -%}"""


def thinking_conversation(folder: Path, steps: int = 3) -> tuple[Path, Path]:
    """An agent that sends its reasoning back (`reasoning_content`), and THINKING_TEMPLATE: (the trace, the
    template file)."""
    template = folder / "thinking.jinja"
    template.write_text(THINKING_TEMPLATE)
    history: list[dict[str, object]] = []
    lines = []
    for k in range(steps):
        history.append({"role": "user", "content": f"look at screen {k} and say what you see"})
        thought, answer = f"the screen shows window {k} with {k + 3} buttons", f"I see window {k}."
        reply = {"role": "assistant", "content": f"<think>\n{thought}\n</think>\n{answer}"}
        lines.append({"task_id": "t", "step": k, "request": {"messages": list(history)}, "reply": reply})
        history.append({"role": "assistant", "content": answer, "reasoning_content": thought})
    trace = folder / "thinking.jsonl"
    trace.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return trace, template


def interrupt_after_first_row(
    cmd: list[str], rows: str, root: Path, cwd: Path, env: dict[str, str] | None = None, timeout: float = 240
) -> None:
    """Start a `lab` command, SIGTERM it once a raw table matching the glob `rows` under `root` has a row, and
    wait for it to end (its run is then incomplete)."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + timeout
    while not any(p.stat().st_size for p in root.glob(rows)):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)


@pytest.fixture
def start_server(
    engine: EngineInfo, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerFactory]:
    """start_server(model=..., extra_args=[...], **server_settings) -> a started server, stopped at teardown."""
    started: list[LlamaServer] = []

    def start(model: Path | None = None, extra_args: list[str] | None = None, **kw: object) -> LlamaServer:
        log = tmp_path_factory.mktemp("server") / "server.log"
        srv = LlamaServer(engine, model or tiny_model, server_settings(**kw), log, extra_args)
        started.append(srv)
        return srv.start()

    yield start
    for srv in started:
        srv.stop()


@pytest.fixture(scope="module")
def server(engine: EngineInfo, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    """One server per module (the tiny model loads in about a second; asserts are on)."""
    log = tmp_path_factory.mktemp("server") / "server.log"
    with LlamaServer(engine, tiny_model, server_settings(), log) as srv:
        yield srv
        assert srv.alive(), f"server died during the module; log {log}"


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    """nuc16, a target host: a real sshd in its own network namespace (its llama-server's loopback and ports are
    not this machine's), one per test module."""
    server = start_sshd(tmp_path_factory.mktemp("nuc16"), netns=True)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Path:
    """A lab project to run `fab` in (its fabfile, params and runs folder), one per test module."""
    return fab_project(tmp_path_factory.mktemp("project"))
