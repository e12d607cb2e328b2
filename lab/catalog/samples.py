"""The samples behind a run's compared rows: per (key, metric) each value with the process it came from and
its place there (rep, fill pass), what B/A's interval resamples (lab.catalog.compare)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from lab.core.schemas import InprocFill
from lab.core.stats import PairRep
from lab.measure.fills import fill_values

TOTAL_BAND = "all bands (FUSED chunk)"
REP_FIELDS = ("rep", "fill_pass")  # a sample's place within its process, by table
Side = dict[str, list[dict[str, Any]]]  # one run's tables: name -> flattened rows


def present(v: Any) -> Any:
    return None if v is None or v != v else v  # NaN (a catalog's missing value) is None


class Samples(NamedTuple):
    """The samples behind one (key, metric) of one run, the process each came from (all 0: one process, a
    within-run interval) and its rep (fill pass) there."""

    values: list[float]
    procs: list[int]
    reps: list[int]

    def by_pair(self, pair_of: Mapping[int, int] | None = None) -> dict[PairRep, float]:
        """The samples keyed by (pair, i): the i-th of that process pair in rep order, what pairs them with the
        other configuration's of the same process pair in an interleaved run. `pair_of`: the process pair each
        process ran in (its side's rows of raw/pairs.jsonl); a process it lacks (one an interruption cut short
        before its row) is left out. Without it a process's number stands for its pair (a table from before
        processes were recorded)."""
        out: dict[PairRep, float] = {}
        seen: dict[int, int] = {}
        for j in sorted(range(len(self.values)), key=lambda j: (self.procs[j], self.reps[j], j)):
            pair = self.procs[j] if pair_of is None else pair_of.get(self.procs[j])
            if pair is None:
                continue
            i = seen[pair] = seen.get(pair, -1) + 1
            out[(pair, i)] = self.values[j]
        return out


def samples_of(experiment: str, side: Side) -> dict[tuple[tuple[Any, ...], str], Samples]:
    """The samples behind each (key, metric) of one run: the timed requests of each arm, the estimate's samples,
    the vision encodes, the fill passes' baseline; a profile's FUSED walls per depth and its bands' ms/token per
    process; a conversation's prompt ms per step and arm."""
    out = SampleBook()
    add = out.add
    if experiment == "profile":
        for w in side.get("profile_walls", []):
            if w["mode"] == "fused" and not w.get("check"):  # the profile's probes, not the fake-vs-real check's
                add((w["depth"], TOTAL_BAND), "fused_chunk_ms", w["ms"], w)
        for c in side.get("profile_band_processes", []):
            add((c["depth"], c["band"]), "ms_per_token", c["ms_per_token"], c)
        return out
    if experiment == "decode":  # a depth's samples are lists in its row, each with its process
        for r in side.get("decode_depths", []):
            for tool in ("server", "bench"):
                values, procs = list(r.get(f"{tool}_samples_ms") or []), list(r.get(f"{tool}_processes") or [])
                for v, k in zip(values, procs, strict=False):
                    add((r["depth"],), f"{tool}_ms_value", v, {"process": k})
        return out
    if experiment == "conversation":
        for smp in side.get("conversation_samples", []):
            if smp["ok"] and present(smp.get("prompt_ms")) is not None:
                add((smp["task_id"], smp["step"]), f"{smp['arm']}_ms_value", smp["prompt_ms"], smp)
        return out
    _sweep_samples(side, out)
    return out


class SampleBook(dict[tuple[tuple[Any, ...], str], Samples]):
    """The samples of one run by (key, metric), filled a row at a time."""

    def add(self, key: tuple[Any, ...], metric: str, value: float, row: dict[str, Any]) -> None:
        got = self.setdefault((key, metric), Samples([], [], []))
        got.values.append(float(value))
        got.procs.append(int(present(row.get("process")) or 0))
        got.reps.append(int(next((present(row.get(k)) for k in REP_FIELDS if present(row.get(k)) is not None), 0)))


def _sweep_samples(side: Side, out: SampleBook) -> None:
    """A sweep's: each arm's timed requests, the vision encodes and cache reads, fake / genuine and fake / estimate
    paired by rep, the estimate's samples, and the fill passes' baseline (in one process without the estimate's
    own samples, its estimate too)."""
    add = out.add
    points = side.get("sweep_points", [])
    keys = {(_where(r), r["point"]): (_where(r), r["L"], r["new"], present(r.get("image"))) for r in points}
    encode = {(_where(r), r["point"]): present(r.get("encode_ms")) or 0.0 for r in points}
    for smp in side.get("sweep_samples", []):
        key = keys.get((_where(smp), smp["point"]))
        if key is None or not smp["ok"] or present(smp.get("prompt_ms")) is None:
            continue
        add(key, f"{smp['arm']}_median_ms", smp["prompt_ms"], smp)
        if smp["arm"] == "fake" and present(smp.get("encode_ms")) is not None:
            add(key, "encode_ms", smp["encode_ms"], smp)
        if smp["arm"] == "genuine" and present(smp.get("prep_ms")) is not None:  # in-process: the cache read
            add(key, "restore_prep_ci_value", smp["prep_ms"], smp)
    for key, ratio, row in _paired_ratios(side.get("sweep_samples", []), keys, "fake", "genuine"):
        add(key, "fake_vs_genuine_ci_value", ratio, row)
    estimates = []
    for t in side.get("prefill_tps", []):
        # the estimate's samples (rep set) = the chunk at depth L (+ the point's encode); rep None: the cross-check
        key = keys.get((_where(t), present(t.get("point"))))
        if key is not None and present(t.get("rep")) is not None:
            ms = float(t["avg_ms"]) + encode[(_where(t), t["point"])]
            add(key, "opt_prefill_ms", ms, t)
            estimates.append({**t, "arm": "estimate", "ok": True, "prompt_ms": ms})
    fake_samples = [smp for smp in side.get("sweep_samples", []) if smp["arm"] == "fake"]
    for key, ratio, row in _paired_ratios(fake_samples + estimates, keys, "fake", "estimate"):
        add(key, "fake_vs_estimate_ci_value", ratio, row)
    fills = [
        InprocFill.model_validate({k: present(v) for k, v in f.items() if k != "run_id" and present(v) is not None})
        for f in side.get("sweep_fills", [])
    ]
    for point in points:  # no direct baseline reps: the fill passes' prefix sums; in one process the estimate
        key = keys[(_where(point), point["point"])]
        only_new = int(point["new"]) + int(present(point.get("image_tokens")) or 0)
        baseline, chunks, procs = fill_values(fills, int(point["L"]), only_new)
        if baseline and (key, "baseline_median_ms") not in out:
            out[(key, "baseline_median_ms")] = Samples(baseline, procs, [0] * len(procs))
        if chunks and _where(point) == "inproc" and (key, "opt_prefill_ms") not in out:  # no estimate samples
            out[(key, "opt_prefill_ms")] = Samples(chunks, procs, [0] * len(procs))


def _paired_ratios(
    samples: list[dict[str, Any]], keys: dict[tuple[str, str], tuple[Any, ...]], top: str, bottom: str
) -> list[tuple[tuple[Any, ...], float, dict[str, Any]]]:
    """top / bottom per rep, paired by rep (keyed by place, point, process, rep): the two arms ran back to back in
    one process, so the host's level at that moment cancels (a rerun's drift moves both arms alike)."""
    arms: dict[tuple[Any, ...], dict[str, tuple[float, dict[str, Any]]]] = {}
    for smp in samples:
        if smp["arm"] in (top, bottom) and smp["ok"] and present(smp.get("prompt_ms")):
            rep = (_where(smp), smp["point"], present(smp.get("process")) or 0, present(smp.get("rep")))
            arms.setdefault(rep, {})[smp["arm"]] = (float(smp["prompt_ms"]), smp)
    out = []
    for (where, point, _, _), got in arms.items():
        if top in got and bottom in got and (where, point) in keys:
            out.append((keys[(where, point)], got[top][0] / got[bottom][0], got[top][1]))
    return out


def _where(row: dict[str, Any]) -> str:
    return str(row["where"])
