"""The shapes a run's manifest has where its readers rely on them: the free-form sections a run fills (engine,
model, lab, results, params), checked field by field where a reader takes a field, and its times, UTC times.
A folder from a host, a colleague's push or a hand edit whose `engine.source` is a string, say, is then one
error naming its file and the field (lab.core.runs.load_manifest) rather than a traceback in whichever reader
comes to it first. Every other field of those sections stays free, and the manifest keeps it as it is."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

# what lab.core.runs.utc_now writes (to the second, or to the millisecond)
UTC_TIME = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?Z$"
UtcTime = Annotated[str, StringConstraints(pattern=UTC_TIME)]


class Open(BaseModel):
    """A section whose other fields are free."""

    model_config = ConfigDict(extra="allow")


class SourceShape(Open):
    commit: str = ""
    origin: str = ""
    pinned: bool | None = None


class EngineShape(Open):
    source: SourceShape = Field(default_factory=SourceShape)
    patch_sha256: str = ""
    release: str | None = None


class ModelShape(Open):
    path: str = ""
    sha256: str = ""


class LabShape(Open):
    commit: str = ""
    dirty: bool | None = None


class Warned(Open):
    """The host's state before a run, or its noise over it: the warnings the catalog keeps."""

    warnings: list[str] = Field(default_factory=list)


class ResultsShape(Open):
    host_state: Warned = Field(default_factory=Warned)
    host_noise: Warned = Field(default_factory=Warned)


class ProfileParams(Open):
    chunk: int | None = None  # what a sweep's rates are fitted at (lab.experiments.profile.rates)


class ParamsShape(Open):
    server: dict[str, Any] = Field(default_factory=dict)
    profile: ProfileParams = Field(default_factory=ProfileParams)
    tolerance: float | None = None


class ManifestShape(BaseModel):
    """The checked view of a manifest (Manifest.shape): what the catalog's run record is built from."""

    started_utc: UtcTime
    finished_utc: UtcTime | None = None
    resumed_utc: list[UtcTime] = Field(default_factory=list)
    params: ParamsShape = Field(default_factory=ParamsShape)
    results: ResultsShape = Field(default_factory=ResultsShape)
    engine: EngineShape = Field(default_factory=EngineShape)
    model: ModelShape = Field(default_factory=ModelShape)
    lab: LabShape = Field(default_factory=LabShape)
