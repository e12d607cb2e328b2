"""Lab settings: defaults < params.yaml < LAB_* environment < CLI flags (one direction, one place).

`params.yaml` is also the DVC params file. Nested keys use `__` in the environment:
`LAB_ENGINE__SOURCE_MODE=git`, `LAB_SERVER__THREADS=4`.
"""

from __future__ import annotations

import difflib
import os
import re
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, PrivateAttr, ValidationError, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from lab.core import releases
from lab.core.paramsfile import ParamsFile, read_params_file
from lab.core.settings_profile import ProfileSettings
from lab.core.settings_server import ConversationSettings, RecordSettings, Section, ServerSettings, TuneSettings

PIN_COMMIT = "da87e9b612592ccd2a2e783eff631346459b9de0"
REPO_ROOT = Path(__file__).resolve().parents[2]


class EngineSettings(Section):
    """Where llama.cpp comes from and how it is built."""

    source_mode: Literal["sdist", "git", "path"] = "sdist"
    sdist_version: str = Field(
        default=releases.DEFAULT, description="llama-cpp-python sdist to build: a version, or pin / latest"
    )
    git_url: str = "https://github.com/ggml-org/llama.cpp"
    git_commit: str = PIN_COMMIT
    path: Path | None = Field(default=None, description="existing llama.cpp checkout (source_mode=path)")
    patches_dir: Path = REPO_ROOT / "patches" / "llama.cpp"
    build_type: Literal["Release", "RelWithDebInfo", "Debug"] = "Release"
    native: bool = True
    jobs: int = Field(default=max(1, os.cpu_count() or 1), ge=1)
    extra_cmake_flags: list[str] = Field(default_factory=list)
    stock: bool = Field(
        default=False, description="build the release as shipped, without the lab's patch (a stock today's server)"
    )
    prebuilt: Path | None = Field(
        default=None, description="an engine bundle pushed to a target host (bin/ + lab-build.json): use, never build"
    )

    @field_validator("sdist_version")
    @classmethod
    def _a_supported_release(cls, v: str) -> str:
        return releases.resolve_version(v)


SweepArm = Literal["baseline", "fake", "genuine", "plain", "estimate"]


class SweepSettings(Section):
    """The fake-prefix sweep grid: every (L, new) point, the arms interleaved rep after rep, each point until
    its verdicts are decided (min_reps..max_reps), through llama-server, in one process with libllama, or both."""

    where: Literal["server", "inproc", "both"] = Field(
        default="server", description="server: through HTTP; inproc: in one process (text points); both: each point"
    )
    Ls: list[int] = Field(default=[512, 1024, 2048, 4096], min_length=1, description="fake prefix lengths")
    news: list[int] = Field(default=[64, 256], min_length=1, description="new tokens per step")
    reps: int | None = Field(default=None, ge=1, le=100, description="fixed reps per point (min = max = reps)")
    min_reps: int = Field(default=5, ge=1, le=200, description="reps every point gets")
    max_reps: int = Field(default=100, ge=1, le=200, description="reps a point may get to decide its verdicts")
    target: float = Field(default=0.03, gt=0, lt=1, description="stop at this half-width of fake/genuine")
    arms: list[SweepArm] = Field(
        default=["fake", "genuine", "estimate"],
        description="what each rep measures (fake always; baseline: direct reps, else the fill passes give it)",
    )
    baseline_reps: int | None = Field(
        default=3, ge=1, description="at most this many direct baseline samples per point (each prefills L + new)"
    )
    bench_reps: int = Field(default=3, ge=1, le=100, description="llama-bench -r of the estimate's cross-check")
    bench_check: bool = Field(default=True, description="llama-bench at the two smallest L (smallest new), once")
    genuine_prefix: Literal["restore", "prefill"] = Field(
        default="restore", description="the genuine arm's prefix: a saved depth-L state, or prefilled every rep"
    )
    estimate_tool: Literal["inproc", "llama-bench"] = Field(
        default="inproc", description="the estimate per rep: the driver's chunk, or a llama-bench -d L call (slow)"
    )
    processes: int = Field(
        default=5, ge=1, le=50, description="server (and driver) processes each point's reps are spread over"
    )
    fill_passes: int = Field(
        default=5,
        ge=1,
        le=50,
        description="in-process cumulative fill passes, one per process: the baseline and the depth-L states",
    )
    tolerance: float = Field(default=0.05, gt=0, lt=1, description="verdicts: agree within 1 +- tolerance")
    seed: int = 0
    rates: str | None = Field(
        default=None, description="the plan's rates: a rates file or a profile run (else the fill passes' chunks)"
    )
    images: list[str] = Field(
        default=["none"], description="screenshot in the new part: none (text only) and/or sizes WxH, e.g. 640x400"
    )
    n_out: int = Field(
        default=0, ge=0, description="the fake arm also generates this many tokens: decode ms/token at L + new (0: off)"
    )

    @field_validator("images")
    @classmethod
    def _sizes(cls, v: list[str]) -> list[str]:
        for x in v:
            w, _, h = x.partition("x")
            if x != "none" and not (w.isdigit() and h.isdigit() and int(w) >= 32 and int(h) >= 32):
                raise ValueError(f"images: 'none' or WxH with sides >= 32, got {x!r}")
        return list(dict.fromkeys(v))

    @field_validator("Ls", "news")
    @classmethod
    def _positive(cls, v: list[int]) -> list[int]:
        bad = [x for x in v if x < 1]
        if bad:
            raise ValueError(f"must be positive integers, got {bad}")
        return sorted(set(v))

    @model_validator(mode="after")
    def _reps(self) -> SweepSettings:
        if self.reps is not None:  # a fixed count: every point gets exactly `reps`
            self.min_reps = self.max_reps = self.reps
        if self.min_reps > self.max_reps:
            raise ValueError(f"sweep.min_reps ({self.min_reps}) > sweep.max_reps ({self.max_reps})")
        if "fake" not in self.arms:
            raise ValueError("sweep.arms must include fake (the arm the sweep is about)")
        if self.n_out == 1:
            raise ValueError("sweep.n_out: 0 (off) or at least 2 (a decode is timed between two generated tokens)")
        if self.n_out and self.where == "inproc":
            raise ValueError("sweep.n_out decodes through the server: set sweep.where to server or both")
        self.arms = [a for a in ("baseline", "fake", "genuine", "plain", "estimate") if a in self.arms]
        return self


class RebuildSettings(Section):
    """The rebuild labs (exact rebuild, rebuild span, rebuild cost); the defaults print the reference tables."""

    window: int = Field(default=3, ge=1, description="exact: attention window W")
    depth: int = Field(default=2, ge=1, description="exact: layers D")
    length: int = Field(default=8, ge=1, description="exact: inputs 1..length")
    keep: int = Field(default=3, ge=1, description="exact: rebuild from the last `keep` inputs")
    next_input: str | None = Field(default=None, description="exact: the decode step's input (default length+1)")
    span_windows: list[int] = Field(default=[2, 3, 4], description="span: windows to check exhaustively")
    span_depths: list[int] = Field(default=[1, 2, 3], description="span: depths to check exhaustively")
    cost_window: int = Field(default=3, ge=1, description="cost: SWA window of the example table")
    cost_keep: int = Field(default=4, ge=0, description="cost: keep count of the example table")
    producer_layers: int = Field(default=20, ge=0)
    consumer_layers: int = Field(default=20, ge=0)
    row_keep: int = Field(default=140, ge=0, description="cost: keep count of the row-work table")
    lengths: list[int] = Field(default=[64, 1024, 16384], description="cost: prompt lengths of the row-work table")
    chunked_length: int = Field(default=1024, ge=1, description="cost: prompt of the chunked example")
    chunk: int = Field(default=256, ge=1, description="cost: chunk size of the chunked example")

    @field_validator("span_windows", "span_depths", "lengths")
    @classmethod
    def _positive(cls, v: list[int]) -> list[int]:
        if not v or any(x < 1 for x in v):
            raise ValueError(f"must be positive integers, got {v}")
        return v

    @model_validator(mode="after")
    def _keep_fits(self) -> RebuildSettings:
        if self.keep > self.length:
            raise ValueError(f"rebuild.keep ({self.keep}) cannot exceed rebuild.length ({self.length})")
        return self


class DecodeSettings(Section):
    """`lab engine decode`: decode at depth through the server (a fake prefix, then n_out tokens) against
    llama-bench, per depth L + new."""

    depths: list[int] = Field(default=[512, 1024, 2048], description="depths L + new to decode at")
    new: int = Field(default=64, ge=1, description="new tokens before the generation (L = depth - new)")
    n_out: int = Field(default=32, ge=2, description="tokens generated per sample (a decode is timed between two)")
    reps: int = Field(default=5, ge=1, description="samples per depth, each tool (each rep a server of its own)")
    tolerance: float = Field(default=0.1, gt=0, lt=1, description="agree: server / llama-bench within 1 +- this")


class ReportSettings(Section):
    """`lab report` (the dvc.yaml `report` stage depends on this section only)."""

    tolerance: float = Field(default=0.05, gt=0, lt=1, description="agreement band around y = x")
    width: int = Field(default=520, ge=100)
    height: int = Field(default=360, ge=100)
    png_scale: float = Field(default=2.0, gt=0, le=4)
    formats: list[Literal["html", "png", "svg"]] = Field(default=["html", "png", "svg"])


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="LAB_",
        env_nested_delimiter="__",
        extra="forbid",
    )

    cache_dir: Path = Field(default_factory=lambda: _default_cache_dir(), description="sources, builds, models")
    model: Path | None = Field(default=None, description="GGUF model; default: the tiny synthetic model")
    mmproj: Path | None = Field(
        default=None, description="vision projector GGUF for image steps; default with the tiny model: the tiny one"
    )
    model_origin: str | None = Field(
        default=None,
        description="set by the lab when --model is a target host's file mounted into the lab's container: JSON of "
        "its path, size, mtime_ns and sha256 there (checked on the host), recorded as the run's model",
    )
    runs_dir: Path = Field(default=Path("catalog/runs"), description="where run folders are written")
    host_name: str | None = Field(default=None, description="name in run folder names; default: hostname")
    engine: EngineSettings = Field(default_factory=EngineSettings)
    server: ServerSettings = Field(default_factory=ServerSettings)
    conversation: ConversationSettings = Field(default_factory=ConversationSettings)
    tune: TuneSettings = Field(default_factory=TuneSettings)
    record: RecordSettings = Field(default_factory=RecordSettings)
    sweep: SweepSettings = Field(default_factory=SweepSettings)
    profile: ProfileSettings = Field(default_factory=ProfileSettings)
    rebuild: RebuildSettings = Field(default_factory=RebuildSettings)
    decode: DecodeSettings = Field(default_factory=DecodeSettings)
    report: ReportSettings = Field(default_factory=ReportSettings)
    catalog_dir: Path = Field(default=Path("catalog"), description="catalog tables (catalog/tables) and metrics")
    reports_dir: Path = Field(default=Path("reports"), description="where `lab report` writes")
    _params_read: ParamsFile | None = PrivateAttr(default=None)  # set by load_settings

    @property
    def params_read(self) -> ParamsFile | None:
        """The params file these settings read (lab.core.paramsfile; None: made without load_settings)."""
        return self._params_read

    @model_validator(mode="after")
    def _sweep_fits_context(self) -> Settings:
        need = max(self.sweep.Ls) + max(self.sweep.news) + self.sweep.n_out
        if need >= self.server.ctx_size:
            raise ValueError(
                f"sweep.Ls + sweep.news + sweep.n_out need {need} tokens but server.ctx_size is {self.server.ctx_size}"
            )
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # earlier wins: CLI (init kwargs) > env > params.yaml > defaults; the params file as load_settings read it
        params = _READING.get() or read_params_file()
        return (init_settings, env_settings, InitSettingsSource(settings_cls, params.data))


_READING: ContextVar[ParamsFile | None] = ContextVar("params_file_read", default=None)


def unknown_key(e: ValidationError) -> str | None:
    """A one-line refusal of the first unknown key, with the closest valid one (None: no unknown key)."""
    bad = next((x for x in e.errors() if x["type"] == "extra_forbidden"), None)
    if bad is None:
        return None
    *parent, key = (str(x) for x in bad["loc"])
    model: type[BaseModel] = Settings
    for name in parent:
        ann = model.model_fields[name].annotation if name in model.model_fields else None
        if not (isinstance(ann, type) and issubclass(ann, BaseModel)):
            break
        model = ann
    where = ".".join([*parent, key])
    close = difflib.get_close_matches(key.lower(), list(model.model_fields), n=1, cutoff=0.5)
    hint = f"; did you mean {'.'.join([*parent, close[0]])}?" if close else ""
    return f"unknown setting {where} (from params.yaml, a LAB_* variable or a flag){hint}"


def _default_cache_dir() -> Path:
    # shared by every clone on the machine: entries are keyed by content, so sharing is safe and fast
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "prefill-lab"


# LAB_* variables that are not settings: the params file, and the container build's and remote tests' own
NOT_SETTINGS = {
    "LAB_PARAMS_FILE",
    "LAB_RUN_ID_FILE",  # where a lab on a target host reports the run it opened (lab.experiments.protocol)
    "LAB_REVISION",
    "LAB_DOCKER_DIR",
    "LAB_DOCKER_KEEP_STORAGE",
    "LAB_UID",
    "LAB_GID",
    "LAB_SSH_KNOWN_HOSTS",
    "LAB_DEBIAN_MIRROR",
    "LAB_BASE_IMAGE",
}


def check_environment() -> None:
    """A LAB_* variable whose first part is no setting is refused by name (the settings source would ignore it;
    an unknown key inside a section is refused by the section itself)."""
    from lab.core.errors import UsageError

    for name in sorted(os.environ):
        if not name.startswith("LAB_") or name in NOT_SETTINGS:
            continue
        first = name[len("LAB_") :].split("__")[0].lower()
        if first not in Settings.model_fields:
            close = difflib.get_close_matches(first, list(Settings.model_fields), n=1, cutoff=0.5)
            hint = f"; did you mean LAB_{close[0].upper()}{name[len('LAB_') + len(first) :]}?" if close else ""
            raise UsageError(f"unknown setting {name} (no setting {first!r}){hint}")


def load_settings(**overrides: Any) -> Settings:
    """Settings with CLI overrides on top; `None` values mean "not given on the command line". The params file
    is read once (lab.core.paramsfile: a bad one is one line), and the settings remember it (`params_read`)."""
    from lab.core.errors import UsageError

    check_environment()
    params = read_params_file()
    reading = _READING.set(params)
    try:
        settings = Settings(**_drop_none(overrides))
    except SettingsError as e:  # a LAB_* value of a list or a section that is not JSON
        field = m.group(1) if (m := re.search(r'field "(\w+)"', str(e))) else ""
        names = sorted(n for n in os.environ if n.upper().startswith(f"LAB_{field.upper()}")) or ["a LAB_* variable"]
        raise UsageError(
            f"{', '.join(names)}: not a value of its setting (a list or a mapping is JSON, e.g. "
            "LAB_SWEEP__LS='[512, 1024]')"
        ) from None
    finally:
        _READING.reset(reading)
    settings._params_read = params
    return settings


def revalidated(settings: Settings) -> Settings:
    """`settings` validated whole again, as loading them validates them (a model_copy checks nothing): settings
    put back from a run's manifest are checked as a user's own (lab.experiments.protocol.restore)."""
    out = Settings.model_validate(settings.model_dump())
    out._params_read = settings.params_read
    return out


def _drop_none(d: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            nested = _drop_none(v)
            if nested:
                out[k] = nested
        elif v is not None:
            out[k] = v
    return out
