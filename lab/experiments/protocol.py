"""The experiment protocol every experiment follows (sweep, trace replay, profile, the rebuild labs).

An experiment says what it is called, which settings sections are its inputs (`records`: the protocol records
them as the run's params and puts them back on resume, one record for every experiment; `own_params` and
`restore_own` for inputs that are not settings), what it checks before anything is created (`prepare`), and
how it measures in an open run (`measure`, which returns the run's results). `run_experiment` does the rest
the same way for all of them:

    lock     a resumed run's one writer lock, held to the end       (a second writer is refused, by pid; a side
             of an interleaved run is refused before it: its run resumes it, lab.experiments.versus)
    resume?  settings = restore(experiment, settings, run)          (a resumed run keeps its own inputs)
    parts    engine build, model, its sha256                        (before any run folder exists; the build is
             held in use to the end, so no prune removes it)
    prepare  everything else that can be validated                  (a bad input creates nothing)
    open     a new write-once run folder (its writer lock taken at once) with its provenance, or the resumed
             one (same engine and model)
    measure  under the run's guard: an interruption or a failure leaves it `incomplete`, with the reason
    finish   results into the manifest (never into params), then `.ready`
    show     the caller's printer of what it found (`show`: the CLI passes lab.cli.show.show_run, which
             prints from the experiment's records; a library caller may pass none)

Provenance is one record for every run (`open_run`): host snapshot, the lab checkout's git state, and for
runs that use the engine the engine's source, patch and flags and the model's path, size and sha256.
"""

from __future__ import annotations

import contextlib
import json
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, TypeAdapter, ValidationError
from rich.console import Console
from rich.progress import Progress

from lab import __version__
from lab.core.console import lab_console
from lab.core.errors import UsageError, validation_line
from lab.core.hostnoise import NoiseFigures, NoiseWindow, read_state
from lab.core.modelfile import model_record
from lab.core.releases import resolve_version
from lab.core.runs import LOCAL_FILES, RunError, RunFolder
from lab.core.settings import REPO_ROOT, Settings, revalidated
from lab.core.shell import LocalShell, Shell
from lab.core.snapshot import snapshot_git, snapshot_host
from lab.engine.build import EngineInfo, build_engine, engine_patch_text, in_use
from lab.engine.server import LlamaServer
from lab.models.resolve import resolve_model


@dataclass
class RunParts:
    """What a measurement runs with, resolved before a run folder exists."""

    shell: Shell
    engine: EngineInfo | None = None
    model: Path | None = None
    model_record: dict[str, Any] = field(default_factory=dict)


@dataclass
class OpenRun:
    """An open run and the parts it measures with."""

    settings: Settings
    run: RunFolder
    parts: RunParts
    resumed: bool = False
    servers: list[LlamaServer] = field(default_factory=list)  # started for this run (their ctx switches count)

    @property
    def shell(self) -> Shell:
        return self.parts.shell

    @property
    def engine(self) -> EngineInfo:
        if self.parts.engine is None:
            raise RunError(f"{self.run.path.name}: this experiment runs without the engine")
        return self.parts.engine

    @property
    def model(self) -> Path:
        if self.parts.model is None:
            raise RunError(f"{self.run.path.name}: this experiment runs without a model")
        return self.parts.model

    def server(self, log: str = "server.log", engine: EngineInfo | None = None, **overrides: Any) -> LlamaServer:
        """A server on the run's settings (of the run's engine, or another build's binary), logging to the run's
        logs/`log`; `extra_args` come after the user's server.extra_args, never instead."""
        server_settings = self.settings.server.with_overrides(**overrides)
        srv = LlamaServer(engine or self.engine, self.model, server_settings, self.run.path / "logs" / log)
        self.servers.append(srv)
        return srv

    def record_server(self, srv: LlamaServer) -> None:
        self.run.update(server_config=srv.config.model_dump(mode="json"))


@dataclass
class Outcome:
    """What `measure` returns: the results for the manifest, and why the run failed ('' when it did not)."""

    results: dict[str, Any] = field(default_factory=dict)
    failure: str = ""


# a measurement a process at a time: after each, the number of the process that ended (the `process` its rows
# carry, which an interleaved run records in its pair table); its Outcome returned
Processes = Generator[int, None, Outcome]


def drain(steps: Processes) -> Outcome:
    """Every step of a measurement, in a row; its Outcome."""
    while True:
        try:
            next(steps)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]


class Experiment(ABC):
    """One kind of run. Instances are made per run and may keep what `prepare` found for `measure`."""

    name: str  # the manifest's `experiment`, and part of the run folder's name
    needs_engine: ClassVar[bool] = True
    records: ClassVar[tuple[str, ...]] = ()  # the Settings fields that are this experiment's inputs
    label = ""  # what its progress lines start with (an interleaved run's side: "A ", "B ")
    progress: Progress | None = None  # a progress display its caller shares (an interleaved run's two sides)
    holds_progress: ClassVar[bool] = False  # whether its progress display lasts from one process to the next

    def own_params(self, settings: Settings) -> dict[str, Any]:
        """Inputs that are not settings (a trace file, say), recorded beside the settings sections."""
        return {}

    def restore_own(self, settings: Settings, params: dict[str, Any], run: RunFolder) -> Settings:
        """Put back what `own_params` recorded (refuse a run of an older format: RunError); the settings sections
        are back."""
        return settings

    def prepare(self, settings: Settings, parts: RunParts) -> None:  # noqa: B027 (optional hook)
        """Validate everything that can be validated before a run folder exists (raise a LabError)."""

    @abstractmethod
    def measure(self, sess: OpenRun, console: Console) -> Outcome:
        """The work, in the open run; raise to leave the run incomplete."""

    def processes(self, sess: OpenRun, console: Console) -> Processes:
        """The work a process at a time: after each of the run's processes a step ends, yielding that process's
        number, so an interleaved run of two configurations (lab.experiments.versus) can alternate two
        experiments' processes and record which ran next to which. An experiment whose processes are levels of
        variance (the sweep, the profile, the decode check) yields after each; the default is one step, process
        0."""
        return (yield from _one_step(self.measure(sess, console)))

    def tables(self) -> dict[str, Any]:
        """The records its closing tables are printed from (lab.presenters.runs), JSON-ready (what `--json`
        prints)."""
        return {}


def _one_step(outcome: Outcome) -> Processes:
    yield 0
    return outcome


def engine_record(engine: EngineInfo) -> dict[str, Any]:
    return {
        "source": engine.source.model_dump(mode="json"),
        "release": engine.release,
        "series": engine.series,
        "patch_sha256": engine.patch_sha256,
        "patches": engine.patches,
        "flags": engine.flags,
        "flavor": engine.flavor,
        "server": str(engine.server),
    }


def record_params(experiment: Experiment, settings: Settings) -> dict[str, Any]:
    """A run's params: the settings fields the experiment records, as JSON, and its own inputs."""
    out: dict[str, Any] = {}
    for name in experiment.records:
        value = getattr(settings, name)
        out[name] = value.model_dump(mode="json") if isinstance(value, BaseModel) else value and str(value)
    return out | experiment.own_params(settings)


def restore(experiment: Experiment, settings: Settings, run: RunFolder) -> Settings:
    """`settings` with the inputs `run` was started with put back (a field an older run did not record keeps
    today's value), the llama.cpp release it was measured with among them. What comes back is validated whole,
    as a user's own settings are (a host wrote this manifest if the run was measured there): a value they would
    refuse (a flag in server.extra_args, a grid the context cannot hold) is one line (RunError)."""
    m = run.manifest()
    params = m.params
    try:
        update = {name: _field(name).validate_python(params[name]) for name in experiment.records if name in params}
        if settings.engine.source_mode == "sdist" and (release := m.engine.get("release")):
            update["engine"] = settings.engine.model_copy(update={"sdist_version": resolve_version(release)})
        return revalidated(experiment.restore_own(settings.model_copy(update=update), params, run))
    except (ValidationError, KeyError, TypeError, ValueError) as e:
        raise RunError(
            f"{run.path.name}: its recorded params do not fit this lab's settings ({validation_line(e, 'params')})"
        ) from e


def _field(name: str) -> TypeAdapter[Any]:
    annotation = Settings.model_fields[name].annotation
    assert annotation is not None
    return TypeAdapter(annotation)


def resolve_parts(settings: Settings, needs_engine: bool) -> RunParts:
    """The host shell, and for engine experiments the built engine and the model (hashed), before any folder."""
    parts = RunParts(shell=LocalShell(settings.host_name))
    if needs_engine:
        parts.engine = build_engine(settings.engine, settings.cache_dir, flavor="release", quiet=True)
        parts.model = resolve_model(settings)
        parts.model_record = model_record(parts.model, settings.cache_dir, settings.model_origin)
    return parts


def open_run(
    settings: Settings,
    experiment: str,
    params: dict[str, Any],
    parts: RunParts,
    resume: RunFolder | None = None,
    writer: contextlib.ExitStack | None = None,
    side: RunFolder | None = None,
    side_name: str = "",
) -> OpenRun:
    """A new run folder with its provenance recorded, or `resume` reopened after checking it was measured with
    the same engine build and model. `side`: the interleaved run whose side `side_name` this is (its folder is
    made inside that run's, which is the one a target host reports)."""
    if resume is not None:
        m = resume.resumable(experiment)
        if parts.engine is not None and (
            m.engine.get("patch_sha256") != parts.engine.patch_sha256 or m.engine.get("flags") != parts.engine.flags
        ):
            raise RunError(f"{resume.path.name} was measured with another engine build; start a new run")
        if parts.model is not None and m.model.get("sha256") != parts.model_record["sha256"]:
            raise RunError(f"{resume.path.name} was measured with another model ({m.model.get('path')})")
        resume.begin_resume(experiment)
        if side is None:
            report_run(resume)
        return OpenRun(settings, resume, parts, resumed=True)
    if side is not None:
        run = RunFolder.create_side(side, side_name, experiment, params)
    else:
        run = RunFolder.create(settings.runs_dir, experiment, parts.shell.name, params)
        report_run(run)
    if writer is not None:  # held until the caller's run ends
        writer.enter_context(run.writer())
    with run.guard():
        host = snapshot_host(parts.shell, run.path / "host")
        engine_diff = engine_patch_text(parts.engine) if parts.engine is not None else None
        lab_git = snapshot_git(parts.shell, REPO_ROOT, run.path / "git", engine_diff)
        run.update(
            engine=engine_record(parts.engine) if parts.engine is not None else {},
            model=parts.model_record,
            host_summary=host,
            lab=lab_record(settings, lab_git),
        )
    return OpenRun(settings, run, parts)


def measured_here(run: RunFolder, host_name: str | None, host_ok: bool = False) -> None:
    """Refuse, in one line, to resume here a run measured elsewhere: its manifest names another host than this
    machine's, or a fetch from a host added to it. Its rest would be measured on this machine beside the host's
    rows, under the host's name; `host_ok` (--host-ok) asks for exactly that."""
    here, m = LocalShell(host_name).name, run.manifest()
    fetched = next((f for f in LOCAL_FILES if (run.path / f).exists()), None)
    if host_ok or (m.host == here and fetched is None):
        return
    why = f"was measured on {m.host}, not on this machine ({here})" if m.host != here else "was fetched from a host"
    raise UsageError(
        f"{run.path.name} {why}: resume it there (fab -H {m.host} <task> --resume {run.path.name}), or pass "
        "--host-ok to measure the rest of it here"
    )


def lab_record(settings: Settings, lab_git: dict[str, Any]) -> dict[str, Any]:
    """The lab's part of a run's provenance: its version, the checkout's commit and whether it was dirty, and the
    params file the settings read (its path and sha256; both None when there was none: the defaults)."""
    read = settings.params_read
    params = {"params_file": read.record} if read is not None else {}
    return {"version": __version__, "commit": lab_git["commit"], "dirty": lab_git["dirty"], **params}


def say_params(settings: Settings, console: Console) -> None:
    """Which params file the run's settings read, or that there was none (a run from another directory than the
    checkout measures the defaults), in one line."""
    if settings.params_read is not None:
        console.print(settings.params_read.describe(), highlight=False, markup=False)


def report_run(run: RunFolder) -> None:
    """The run this command opened, into the file LAB_RUN_ID_FILE names (a fab task sets it on a target host, to
    fetch this run and no other)."""
    if path := os.environ.get("LAB_RUN_ID_FILE"):
        Path(path).write_text(run.path.name + "\n")


def run_output(experiment: Experiment, run: RunFolder, as_json: bool) -> str:
    """What a command prints when its run is done: the run folder, or with --json the folder (`run`) and the
    records its tables were printed from."""
    return json.dumps({"run": str(run.path), **experiment.tables()}, indent=1) if as_json else str(run.path)


Show = Callable[[Experiment, OpenRun, Outcome, Console], None]  # prints what a finished run found


def run_experiment(
    experiment: Experiment,
    settings: Settings,
    resume: RunFolder | None = None,
    console: Console | None = None,
    show: Show | None = None,
) -> RunFolder:
    """Run (or resume) one experiment under the protocol above; returns its run folder."""
    console = console or lab_console()
    with contextlib.ExitStack() as writer:
        if resume is not None:  # one writer per run folder, from before its inputs are read
            resume.resumed_alone()  # a side of an interleaved run resumes with its run
            writer.enter_context(resume.writer())
        return _run(experiment, settings, resume, console, writer, show)


def ready(
    experiment: Experiment, settings: Settings, resume: RunFolder | None, writer: contextlib.ExitStack
) -> tuple[Settings, RunParts]:
    """What a run measures with, before any folder of it exists: a resumed run's own inputs put back, the engine
    built (and held in use to the end) and the model hashed, everything else checked by the experiment."""
    if resume is not None:
        resume.resumable(experiment.name)  # before its inputs are read back
        settings = restore(experiment, settings, resume)
    parts = resolve_parts(settings, experiment.needs_engine)
    if parts.engine is not None:
        writer.enter_context(in_use(parts.engine))
    experiment.prepare(settings, parts)
    return settings, parts


def _run(
    experiment: Experiment,
    settings: Settings,
    resume: RunFolder | None,
    console: Console,
    writer: contextlib.ExitStack,
    show: Show | None,
) -> RunFolder:
    settings, parts = ready(experiment, settings, resume, writer)
    sess = open_run(settings, experiment.name, record_params(experiment, settings), parts, resume, writer)
    console.print(f"run folder: {sess.run.path}", highlight=False)
    say_params(settings, console)
    with sess.run.guard():
        window = watch_host(sess, console) if experiment.needs_engine else None
        outcome = experiment.measure(sess, console)
        finish(sess, outcome, window.stop(ctx_switches([sess])) if window else None, console)
    if show is not None:
        show(experiment, sess, outcome, console)
    return sess.run


def ctx_switches(sessions: list[OpenRun]) -> dict[str, int]:
    """The context switches of every server the runs started."""
    ctx: dict[str, int] = {}
    for srv in (srv for sess in sessions for srv in sess.servers):
        for k, v in srv.ctx_switches.items():
            ctx[k] = ctx.get(k, 0) + v
    return ctx


def finish(sess: OpenRun, outcome: Outcome, noise: NoiseFigures | None, console: Console) -> None:
    """A measured run's results (and the host's noise over it) into its manifest, then complete or failed."""
    if noise is not None:
        outcome.results["host_noise"] = noise.model_dump(mode="json")
        console.print(f"host noise over the run: {noise.line()}", highlight=False)
        for w in noise.warnings:
            console.print(f"[yellow]warning:[/yellow] {w}", highlight=False)
    sess.run.add_results(**outcome.results)
    if outcome.failure:
        sess.run.fail(outcome.failure)
    else:
        sess.run.complete()


def watch_host(sess: OpenRun, console: Console) -> NoiseWindow:
    """Record and print what on this host can disturb the measurement, then sample it over the run."""
    state = read_state(sess.shell)
    sess.run.add_results(host_state=state.model_dump(mode="json"))
    for w in state.warnings:
        console.print(f"[yellow]warning:[/yellow] {w}", highlight=False)
    return NoiseWindow().start()
