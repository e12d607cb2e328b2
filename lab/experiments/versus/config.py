"""The second configuration of an interleaved run: `--vs KEY=VALUE ...` sets settings for side B, A being the
command's own settings. What may differ is what a user compares: the engine (`engine=latest`, `engine.stock=true`,
`engine.source_mode=path engine.path=...`), the server's flags (`server.threads=8`, `server.flash_attn=off`,
`server.cache_type_k=q8_0`, `server.extra_args="--no-mmap"`), the model (`model=...`, `mmproj=...`) and the profile
instrument's own flags (`profile.threads`, `profile.threads_batch`, `profile.threadpool`). The grid, depths and reps
are the run's, the same on both sides; `--vs same` measures the same configuration twice (the A/A test)."""

from __future__ import annotations

import difflib
import random
import shlex
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from lab.core.errors import UsageError, validation_line
from lab.core.settings import Settings

SAME = "same"  # `--vs same`: side B is side A (the A/A test)
SECTIONS = ("engine", "server")  # sections side B may set any key of
TOP = ("model", "mmproj")  # top-level settings side B may set
OWN = {"profile": ("threads", "threads_batch", "threadpool")}  # an experiment's own flags that are a driver's
SHORT = {"engine": "engine.sdist_version", "threads": "server.threads"}  # `engine=latest`, `threads=1`


def parse_vs(items: list[str]) -> dict[str, str]:
    """`KEY=VALUE` items (or `same`) as {key: value}: a key given twice or an item without `=` is refused."""
    out: dict[str, str] = {}
    for item in items:
        if item.strip() == SAME:
            continue
        key, eq, value = item.partition("=")
        key = SHORT.get(key.strip(), key.strip())
        if not eq or not key:
            raise UsageError(f"--vs {item!r}: give KEY=VALUE (e.g. engine=latest, server.threads=1) or 'same'")
        if key in out:
            raise UsageError(f"--vs {key} is given twice")
        out[key] = value
    return out


def side_b(settings: Settings, vs: dict[str, str], experiment: str) -> Settings:
    """Side B's settings: A's with the --vs keys set, each checked by name and value (one line if refused)."""
    update: dict[str, Any] = {}
    sections: dict[str, dict[str, Any]] = {}
    own = OWN.get(experiment, ())
    for key, text in vs.items():
        section, dot, name = key.partition(".")
        if not dot and key in TOP:
            update[key] = Path(text) if text else None
            continue
        if not dot or not (section in SECTIONS or (section == experiment and name in own)):
            allowed = [*(f"{s}.*" for s in SECTIONS), *TOP, *(f"{experiment}.{k}" for k in own)]
            raise UsageError(
                f"--vs {key}: both sides measure the same grid, depths and reps; side B may set "
                f"{', '.join(allowed)} (or engine=, threads=)"
            )
        model = type(getattr(settings, section))
        if name not in model.model_fields:
            close = difflib.get_close_matches(name, list(model.model_fields), n=1, cutoff=0.5)
            raise UsageError(
                f"--vs {key}: unknown setting" + (f"; did you mean {section}.{close[0]}?" if close else "")
            )
        sections.setdefault(section, {})[name] = _value(model, name, text)
    for section, fields in sections.items():
        current: BaseModel = getattr(settings, section)
        try:
            update[section] = type(current).model_validate({**current.model_dump(), **fields})
        except ValidationError as e:
            raise UsageError(f"--vs {section}: {validation_line(e, root=section, limit=2)}") from e
    return settings.model_copy(update=update)


def _value(model: type[BaseModel], name: str, text: str) -> Any:
    """A flag's text for the setting: a list from shell words (`-ctk q8_0 -ctv q8_0`), nothing from an empty
    text, else the text, which the section's validation reads as its type (`1`, `off`, `true`)."""
    if typing.get_origin(model.model_fields[name].annotation) is list:
        return shlex.split(text)
    return text or None


def paired_design(settings: Settings) -> Settings:
    """What both sides run with so that every process of one side has its partner in the other (a process pair):
    a fixed count of reps per sweep point (no stop rule that ends one side's point a process earlier) and a
    profile's fixed processes."""
    sw = settings.sweep
    reps = sw.reps or sw.min_reps
    return settings.model_copy(
        update={
            "sweep": sw.model_copy(update={"reps": reps, "min_reps": reps, "max_reps": reps}),
            "profile": settings.profile.model_copy(update={"max_processes": None}),
        }
    )


def pair_order(pair: int, seed: int) -> tuple[str, str]:
    """The order of process pair `pair`'s two processes: pairs go in twos, one A-then-B and one B-then-A, the first
    of the two picked at random (seeded, so a resumed run goes on with the same order): every process of one side
    is next in time to one of the other, and neither side is always first."""
    first = ("a", "b") if random.Random(f"{seed}:{pair // 2}").random() < 0.5 else ("b", "a")
    return first if pair % 2 == 0 else (first[1], first[0])
