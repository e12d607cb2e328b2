"""What the kernels see after a fake prefix, compared exactly with a real prefix (no timing).

The profiler's --layout pass (lab/instrument/profile_prefill.cpp, lab/native/kvlayout.h) decodes one chunk at each
depth L three times: after a live fill of L tokens, after that fill's state saved and restored (what a genuine
hit restored from a prompt cache holds), and after `llama_memory_seq_fake_prefix(L)`. For each it prints every KV
cache's cells, positions and head before the chunk is placed, every layer's graph (ops and shapes; the integer
inputs it reads and its ops' parameters), and each attention node's mask (n_kv, unmasked keys per query row, live
64x64 tiles, a digest of the whole pattern) and parameters, with the cells its keys are written to.

The kernels are data-independent (the only value-dependent branch in ggml-cpu's attention is the online softmax
rescale), so equal graphs, masks and cells mean equal work. Against the restored state everything must be equal,
cell by cell. A live fill keeps a sliding window's cells where its ring put them, so against it only the counts
must be equal: n_kv, the graph's shapes and the unmasked keys of every row; its tiles are reported, not required
(the window can sit at another offset from the tile grid: a live hit may cost more or less than a restored one).
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from rich.console import Console

from lab.core.errors import LabError
from lab.core.settings import Settings
from lab.engine.build import EngineInfo, Flavor, build_engine
from lab.engine.cells import parse_cell_dumps
from lab.engine.slot_layout import SlotLayout, slot_layout
from lab.instrument import build_instrument
from lab.models.hparams import model_hparams

Kind = Literal["full", "window", "recurrent"]
KIND_OF_LAYER: dict[str, Kind] = {"attention": "full", "sliding": "window", "recurrent": "recurrent"}
FAMILY = {
    frozenset({"full"}): "kv",
    frozenset({"full", "window"}): "iSWA",
    frozenset({"full", "recurrent"}): "hybrid",
    frozenset({"full", "window", "recurrent"}): "hybrid-iSWA",
}
CHUNKS = (64, 512)
DEEPEST = 8192


class LayoutError(LabError):
    pass


def layout_depths(window: int | None) -> list[int]:
    """The depths the comparison visits: 0, either side of the window (512 without one), four windows, 8192."""
    w = window or 512
    return sorted({0, w - 1, w, w + 1, 4 * w, DEEPEST})


@dataclass
class LayoutReport:
    """One model's comparison: what was compared and every difference found."""

    model: str
    family: str
    kinds: tuple[Kind, ...]  # per layer
    depths: list[int]
    chunks: list[int]
    differences: list[str] = field(default_factory=list)  # against the restored state: each is an error
    live_differences: list[str] = field(default_factory=list)  # counts against a live fill: each is an error
    live_tiles: list[str] = field(default_factory=list)  # tiles a live fill visits otherwise: reported only
    compared: int = 0  # attention nodes and caches compared against the restored state
    slot: SlotLayout | None = None  # a sliding-window model through llama-server: a fake slot against a genuine hit

    @property
    def ok(self) -> bool:
        return not self.differences and not self.live_differences and (self.slot is None or self.slot.ok)

    def first(self) -> str:
        """The first difference, named with the model ("" when there is none)."""
        every = self.differences + self.live_differences + (self.slot.differences if self.slot else [])
        return f"{self.model}: {every[0]}" if every else ""

    def record(self) -> dict[str, Any]:
        """JSON-ready (`lab engine check --json`)."""
        return {
            "model": self.model,
            "family": self.family,
            "depths": self.depths,
            "chunks": self.chunks,
            "compared": self.compared,
            "ok": self.ok,
            "line": self.line(),
            "differences": self.differences,
            "live_differences": self.live_differences,
            "live_tiles": self.live_tiles,
            "slot": asdict(self.slot) if self.slot else None,
        }

    def line(self) -> str:
        """The one line `lab engine check` prints for this model's memory family."""
        head = f"{self.family} ({self.model}): "
        grid = f"L in {','.join(map(str, self.depths))}, chunks {','.join(map(str, self.chunks))}"
        if not self.ok:
            n = len(self.differences) + len(self.live_differences) + (len(self.slot.differences) if self.slot else 0)
            first = self.first().removeprefix(f"{self.model}: ")
            return head + f"fake prefix does NOT lay out as a restored hit: {first} ({n} differences; {grid})"
        live = "; against a live fill n_kv and unmasked keys equal" + (
            f", mask tiles differ at {len(self.live_tiles)} (the live ring's offset)" if self.live_tiles else ""
        )
        slot = (
            f"; through a slot, n_fake_cached holds a genuine hit's cells at L in {','.join(map(str, self.slot.Ls))}"
            if self.slot
            else ""
        )
        return head + f"fake prefix lays out as a restored hit: n_kv, cells, mask tiles equal ({grid}){live}{slot}"


def run_layout(
    engine: EngineInfo,
    cache_dir: Path,
    model: Path,
    depths: Iterable[int],
    chunk: int,
    out: Path,
    threads: int = 2,
    kv: list[str] | None = None,
) -> list[dict[str, Any]]:
    """One --layout pass of the profiler; its rows. `kv`: the KV cache's type flags (-ctk/-ctv), as measured."""
    info = build_instrument(engine, cache_dir)
    cmd = [
        str(info.binary),
        "--model",
        str(model),
        "--out",
        str(out),
        "--layout",
        "--chunk",
        str(chunk),
        "--depths",
        ",".join(str(d) for d in sorted(set(depths))),
        "-t",
        str(threads),
        "--warmup",
        "0",
        *(kv or []),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or ["(no message)"]
        raise LayoutError(f"the layout pass on {model.name} failed: {tail[0]}")
    return [json.loads(line) for line in out.read_text().splitlines() if line.strip()]


def compare(
    rows: list[dict[str, Any]], kinds: tuple[Kind, ...], chunk: int
) -> tuple[list[str], list[str], list[str], int]:
    """(differences against the restored state, count differences against the live fill, tile differences
    against the live fill, nodes and caches compared). Each difference names the layer kind, L and what differs."""
    by: dict[tuple[str, str, int, int], dict[str, Any]] = {}
    for r in rows:
        if r["kind"] in ("attn", "graph"):
            by[(r["kind"], r["fill"], r["depth"], r["layer"])] = r
        elif r["kind"] == "cells":  # llama.cpp's dump of each cache before the chunk is placed
            for i, c in enumerate(parse_cell_dumps(r["dump"])):
                by[("cells", r["fill"], r["depth"], i)] = {**asdict(c), "kind": "cells"}
    restored_diffs: list[str] = []
    live_diffs: list[str] = []
    live_tiles: list[str] = []
    compared = 0
    for (what, fill, depth, index), fake in sorted(by.items()):
        if fill != "fake":
            continue
        kind = _kind(what, index, fake, kinds)
        where = f"{kind} layer {index}" if what != "cells" else f"{kind} cache"
        at = f"L={depth} chunk={chunk}"
        restored, live = by.get((what, "restored", depth, index)), by.get((what, "live", depth, index))
        if restored is None or live is None:
            restored_diffs.append(f"{where}, {at}: no row after the real prefix to compare with")
            continue
        compared += 1
        for field_ in _FIELDS[what]:
            if fake[field_] != restored[field_]:
                restored_diffs.append(
                    f"{where}, {at}: {field_} {_show(fake[field_])} after the fake prefix, "
                    f"{_show(restored[field_])} after the restored one"
                )
        for field_ in _LIVE_FIELDS[what]:
            if fake[field_] != live[field_]:
                live_diffs.append(
                    f"{where}, {at}: {field_} {_show(fake[field_])} after the fake prefix, "
                    f"{_show(live[field_])} after the live fill"
                )
        if what == "attn" and fake["tiles"] != live["tiles"]:
            live_tiles.append(f"{where}, {at}: {fake['tiles']} tiles, {live['tiles']} after the live fill")
    return restored_diffs, live_diffs, live_tiles, compared


_FIELDS = {
    "attn": ("op", "n_kv", "rows", "unmasked", "tiles", "mask", "params", "k_writes"),
    "graph": ("nodes", "shapes", "params"),
    "cells": ("size", "n_swa", "head", "used", "cells"),
}
_LIVE_FIELDS = {"attn": ("op", "n_kv", "rows", "unmasked"), "graph": ("nodes", "shapes"), "cells": ()}


def _kind(what: str, index: int, row: dict[str, Any], kinds: tuple[Kind, ...]) -> str:
    if what == "cells":
        return "window" if row["n_swa"] else "full"
    return kinds[index] if 0 <= index < len(kinds) else "other"


def _show(v: Any) -> str:
    text = json.dumps(v)
    return text if len(text) <= 60 else text[:57] + "..."


def check_layout(
    engine: EngineInfo,
    cache_dir: Path,
    model: Path,
    work: Path,
    chunks: Iterable[int] = CHUNKS,
    threads: int = 2,
    depths: list[int] | None = None,
    kv: list[str] | None = None,
) -> LayoutReport:
    """The comparison at every depth (layout_depths of the model's window unless given) and every chunk."""
    h = model_hparams(model)
    kinds = tuple(KIND_OF_LAYER[k] for k in h.kinds)
    chunks = list(chunks)
    if depths is None:
        depths = [d for d in layout_depths(h.window) if not h.n_ctx_train or d + max(chunks) <= h.n_ctx_train]
    report = LayoutReport(model.name, FAMILY.get(frozenset(kinds), "other"), kinds, depths, chunks)
    for chunk in chunks:
        rows = run_layout(engine, cache_dir, model, depths, chunk, work / f"layout-{chunk}.jsonl", threads, kv)
        diffs, live, tiles, n = compare(rows, kinds, chunk)
        report.differences += diffs
        report.live_differences += live
        report.live_tiles += tiles
        report.compared += n
    return report


TINY_FAMILIES = ("qwen3moe", "gemma3", "gpt-oss", "qwen35moe")  # kv, iSWA (twice: a window of 128 each), hybrid


def check_models(settings: Settings, flavor: Flavor, console: Console) -> list[LayoutReport]:
    """`lab engine check`'s layout comparison: settings.model's, else the tiny model of each memory family."""
    from lab.models.resolve import ensure_tiny, resolve_model

    engine = build_engine(settings.engine, settings.cache_dir, flavor=flavor, quiet=True)
    if settings.model is not None:
        models = [resolve_model(settings)]
    else:
        models = [ensure_tiny(settings, arch, seed=0, vision=False)[0] for arch in TINY_FAMILIES]
    reports = []
    with tempfile.TemporaryDirectory(prefix="lab-layout-") as work:
        for model in models:
            with console.status(f"comparing what the kernels see after a fake and a real prefix on {model.name} ..."):
                report = check_layout(engine, settings.cache_dir, model, Path(work))
            if "window" in report.kinds:  # the window's cells through a slot too
                with console.status(f"comparing a fake slot's cells with a genuine hit's on {model.name} ..."):
                    report.slot = check_slot(engine, settings, model)
            reports.append(report)
    return reports


SLOT_NEW = 64  # the step's new tokens through a slot


def check_slot(engine: EngineInfo, settings: Settings, model: Path) -> SlotLayout:
    """The slot comparison at L in {w-1, w, w+1, 4w} that fit the server's context."""
    w = model_hparams(model).window or 512
    Ls = [L for L in (w - 1, w, w + 1, 4 * w) if settings.server.ctx_size > L + SLOT_NEW]
    return slot_layout(engine, model, settings.server, settings.cache_dir, Ls, SLOT_NEW)
