"""`lab arms`: the sweep's grid measured inside one process with libllama (lab/inproc), no server in the numbers,
and no rep paying for its prefix.

The driver loads the model once for the whole run. Before any rep, `sweep.fill_passes` cumulative fill passes
decode the grid's token stream once each: every grid L is reached on the way (the segments' prefix sums are
the time to reach L + new from empty: the baseline), the really decoded depth-L state is kept there, and a
chunk of each `new` is timed at depth L after restoring it (the estimate only_new / prefill_tps(L)). Then each
point gets interleaved reps in a rotating order, each costing its new tokens:
    fake       fabricate the depth-L prefix (the lab's patch), time the new tokens
    genuine    restore the kept depth-L state (the cache read, timed on its own), time the new tokens; a
               memcpy of as many bytes is the cache read's yardstick
    plain      decode L in the sequence first (untimed), then time the new tokens: the proof that a restored
               state is a genuine hit (optional: it costs L per rep)
    baseline   decode L + new from empty (optional direct reps, at most sweep.baseline_reps per point)
With `arms.where = both` the server arms (baseline, fake, genuine through HTTP) are measured at the same point
and tokens with as many reps, so server / in-process per arm is the server's own share.

Resumable at point granularity, like the sweep: a point's samples and its row are appended when it is done; the
fill passes are appended whole, and a resumed run fills once more (its states are not kept on disk).
"""

from __future__ import annotations

import contextlib
import shutil
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from lab.engine.contract import ContractClient
from lab.engine.gguf_io import read_gguf_metadata
from lab.engine.memshape import MemoryShape, memory_shape
from lab.errors import UsageError
from lab.experiments.fakeprefix import measure_point, no_estimate
from lab.experiments.planning import plan_line, plan_of_run, plan_results
from lab.experiments.protocol import Experiment, Outcome, Parts, Session, progress_bar, run_experiment
from lab.experiments.sweep_grid import GridPoint, stream_tokens
from lab.experiments.sweep_points import server_arm_stats
from lab.fills import complete_fills, fill_values, run_fills
from lab.inproc import SOURCE, DriverSession, prepare_driver, sweep_driver_command
from lab.instrument import InstrumentInfo
from lab.plan import Plan
from lab.presenters.arms import print_summary
from lab.runs import RunFolder
from lab.schemas import (
    KV_PAD,
    ArmsSummary,
    InprocFill,
    InprocPoint,
    InprocSample,
    Interval,
    SweepSample,
    ggml_pad,
)
from lab.settings import ArmsSettings, ServerSettings, Settings, SweepSettings
from lab.stats import (
    arm_stats,
    linear_fit,
    median_interval,
    paired_ratio,
    paired_values,
    reps_to_decide,
    unpaired_ratio,
    verdict,
)

SAMPLES, POINTS, SERVER_SAMPLES, SUMMARY = "inproc_samples", "inproc_points", "server_samples", "arms_summary"
FILLS = "inproc_fills"
SERVER_ARMS = ("baseline", "fake", "genuine")
TIMED_ARMS = ("baseline", "fake", "genuine", "plain")


def grid(sw: SweepSettings) -> list[GridPoint]:
    """The sweep's text points (screenshot steps are a server matter: the driver decodes token ids)."""
    return [GridPoint(L, new) for L in sw.Ls for new in sw.news]


def samples_of(rows: list[dict[str, Any]], point: str) -> list[InprocSample]:
    out = []
    for r in rows:
        if r.get("kind") != "sample":
            continue
        ok, arm = r["ok"], r["arm"]
        out.append(
            InprocSample(
                point=point, L=r["L"], new=r["new"], arm=arm, rep=r["rep"], ok=ok, reason=r["reason"],
                decode_ms=r["decode_ms"] if ok else None,
                prep_ms=r["prep_ms"] if ok and arm in ("fake", "genuine") else None,
                copy_ms=r["copy_ms"] if ok and arm == "genuine" else None,
                blob_bytes=r["blob_bytes"] if arm == "genuine" and r["blob_bytes"] else None, pos_max=r["pos_max"],
            )
        )  # fmt: skip
    return out


def _ms(samples: list[InprocSample], arm: str, field: str = "decode_ms") -> dict[int, float]:
    return {s.rep: getattr(s, field) for s in samples if s.arm == arm and s.ok and getattr(s, field) is not None}


def per_rep(samples: list[InprocSample]) -> dict[str, list[float]]:
    """One point's per-rep values of every derived figure: ratios paired by rep (a rep's arms run back to
    back), the cache read's bandwidth and its share of the step. A point's figures are their medians; the run's
    pooled figures are the medians of every point's values together."""
    dec = {arm: _ms(samples, arm) for arm in TIMED_ARMS}
    prep, copy = _ms(samples, "genuine", "prep_ms"), _ms(samples, "genuine", "copy_ms")
    blob = max((s.blob_bytes for s in samples if s.arm == "genuine" and s.blob_bytes), default=0)
    step = {r: prep[r] + dec["genuine"][r] for r in prep if r in dec["genuine"]}
    return {
        "fake/genuine": paired_values(dec["fake"], dec["genuine"]),
        "genuine/plain": paired_values(dec["genuine"], dec["plain"]),
        "restore-step/genuine": paired_values(step, dec["genuine"]),
        "fake/baseline": paired_values(dec["fake"], dec["baseline"]),
        "memcpy/restore": paired_values(copy, prep),
        "share": paired_values(prep, step),
        "restore/gbps": [blob / ms / 1e6 for ms in prep.values() if ms > 0] if blob else [],
        "memcpy/gbps": [blob / ms / 1e6 for ms in copy.values() if ms > 0] if blob else [],
    }


def summarize_point(
    p: GridPoint, samples: list[InprocSample], fills: list[InprocFill], tol: float, shape: MemoryShape | None,
    server: list[SweepSample] | None = None,
) -> InprocPoint:  # fmt: skip
    key = f"arms/{p.id}"
    dec = {arm: _ms(samples, arm) for arm in TIMED_ARMS}
    failed = {arm: sum(1 for s in samples if s.arm == arm and not s.ok) for arm in TIMED_ARMS}
    stats = {arm: arm_stats(list(dec[arm].values()), failed[arm], f"{key}/{arm}") for arm in TIMED_ARMS}
    values = per_rep(samples)

    def iv(name: str) -> Interval | None:
        return median_interval(values[name], f"{key}/{name}")

    base_fill, chunks = fill_values(fills, p.L, p.new)
    vs_base = iv("fake/baseline") or unpaired_ratio(list(dec["fake"].values()), base_fill, f"{key}/fake/fill")
    blobs = {s.blob_bytes for s in samples if s.arm == "genuine" and s.blob_bytes}
    vs_gen, vs_plain = iv("fake/genuine"), iv("genuine/plain")
    point = InprocPoint(
        point=p.id, L=p.L, new=p.new, n_kv_padded=ggml_pad(p.L + p.new), measurable=p.L >= KV_PAD,
        reps=len({s.rep for s in samples}),
        baseline=stats["baseline"], fake=stats["fake"], genuine=stats["genuine"], plain=stats["plain"],
        baseline_fill=arm_stats(base_fill, key=f"{key}/baseline/fill"),
        estimate_ci=median_interval(chunks, f"{key}/estimate"),
        fake_vs_estimate_ci=unpaired_ratio(list(dec["fake"].values()), chunks, f"{key}/fake/estimate"),
        fake_prep_ci=median_interval(list(_ms(samples, "fake", "prep_ms").values()), f"{key}/fake/prep"),
        restore_prep_ci=median_interval(list(_ms(samples, "genuine", "prep_ms").values()), f"{key}/restore/prep"),
        memcpy_ci=median_interval(list(_ms(samples, "genuine", "copy_ms").values()), f"{key}/memcpy"),
        blob_bytes=max(blobs) if blobs else None, predicted_blob_bytes=shape.blob_bytes(p.L) if shape else None,
        restore_gbps_ci=iv("restore/gbps"), memcpy_gbps_ci=iv("memcpy/gbps"),
        restore_vs_memcpy_ci=iv("memcpy/restore"), fake_vs_genuine_ci=vs_gen, genuine_vs_plain_ci=vs_plain,
        restore_step_vs_genuine_ci=iv("restore-step/genuine"), fake_vs_baseline_ci=vs_base,
        cache_read_share_ci=iv("share"), genuine_verdict=verdict(vs_gen, tol), plain_verdict=verdict(vs_plain, tol),
    )  # fmt: skip
    undecided = [
        reps_to_decide(iv, tol)
        for iv, v in ((vs_gen, point.genuine_verdict), (vs_plain, point.plain_verdict))
        if iv is not None and v == "undecided"
    ]
    point.reps_to_decide = max((n for n in undecided if n is not None), default=None)
    if server:
        add_server(point, samples, server)
    point.diagnostics = diagnose(point, samples, tol)
    return point


def add_server(point: InprocPoint, samples: list[InprocSample], server: list[SweepSample]) -> None:
    """The server arms of the same point: their prompt_ms, and server / in-process per arm (unpaired: the two
    sides run one after the other)."""
    key = f"arms/{point.point}/server"
    for arm in SERVER_ARMS:
        st = server_arm_stats(server, arm, key)
        if not st.n_ok and not st.n_failed:
            continue
        point.server[arm] = st
        srv_ms = [s.prompt_ms for s in server if s.arm == arm and s.ok and s.prompt_ms is not None]
        iv = unpaired_ratio(srv_ms, list(_ms(samples, arm).values()), f"{key}/{arm}/inproc")
        if iv is not None:
            point.server_vs_inproc[arm] = iv
    by_rep = {a: {s.rep: s.prompt_ms for s in server if s.arm == a and s.ok and s.prompt_ms} for a in SERVER_ARMS}
    point.server_fake_vs_genuine_ci = paired_ratio(by_rep["fake"], by_rep["genuine"], f"{key}/fake/genuine")


def diagnose(p: InprocPoint, samples: list[InprocSample], tol: float) -> list[str]:
    out: list[str] = []
    if not p.measurable:
        out.append(f"L={p.L} is below the {KV_PAD}-column floor: attention reads {p.n_kv_padded} columns anyway")
    failed = [s for s in samples if not s.ok]
    if failed:
        out.append(f"{len(failed)} failed sample(s), excluded: {failed[0].arm} rep {failed[0].rep}: {failed[0].reason}")
    if p.blob_bytes and p.predicted_blob_bytes and abs(p.blob_bytes / p.predicted_blob_bytes - 1) > 0.01:
        out.append(f"the state blob is {p.blob_bytes:,} B, the GGUF predicts {p.predicted_blob_bytes:,} B: a KV "
                   "type other than f16 (-ctk/-ctv), or a layout lab.engine.memshape does not model")  # fmt: skip
    for name, iv, v in (
        ("fake/genuine", p.fake_vs_genuine_ci, p.genuine_verdict),
        ("genuine/plain", p.genuine_vs_plain_ci, p.plain_verdict),
    ):
        if iv is None:
            continue
        if v == "disagree":
            out.append(f"{name} {iv.fmt(pct=True)}: the new tokens do not cost what they cost after a real hit; "
                       "check that the sequence's max position was L-1 (the samples record it)")  # fmt: skip
        elif v == "undecided":
            more = reps_to_decide(iv, tol)
            hint = "no number of reps decides it" if more is None else f"about {more} reps would likely decide it"
            out.append(f"{name} {iv.fmt(pct=True)} straddles 1 +- {tol:.0%} after {iv.n} reps: {hint}")
    return out


def decided(p: InprocPoint, sw: SweepSettings, arms: list[str]) -> bool:
    """No more reps needed: the measured verdicts are decided and fake/genuine is as narrow as sw.target."""
    if "fake" in arms:
        iv = p.fake_vs_genuine_ci
        if p.genuine_verdict == "undecided" or iv is None or iv.half_width > sw.target:
            return False
    return not ("plain" in arms and p.plain_verdict == "undecided")


def rep_arms(arms: list[str], rep: int, sw: SweepSettings) -> list[str]:
    """The arms of one rep in a rotating order (no arm always goes first); the direct baseline only in the
    first sweep.baseline_reps (else min_reps) reps: it is in no verdict and costs L + new."""
    cap = sw.min_reps if sw.baseline_reps is None else min(sw.baseline_reps, sw.min_reps)
    todo = [a for a in arms if a in TIMED_ARMS and not (a == "baseline" and rep >= cap)]
    k = rep % len(todo)
    return todo[k:] + todo[:k]


def summarize_run(
    points: list[InprocPoint], samples: list[InprocSample], fills: list[InprocFill], shape: MemoryShape | None
) -> ArmsSummary:
    """The restore cost over the grid: blob bytes and restore ms against L (least squares over the points),
    the GGUF's prediction, and bandwidth and ratios pooled over every point's reps."""
    s = ArmsSummary(fill_passes=len({f.fill_pass for f in fills}), fill_s=sum(f.ms for f in fills) / 1e3)
    if shape is not None:
        s.predicted_bytes_per_cell, s.predicted_fixed_bytes = shape.bytes_per_cell, shape.recurrent_bytes
        s.attention_layers, s.recurrent_layers = shape.attention_layers, shape.recurrent_layers
    blobs = {p.L: p.blob_bytes for p in points if p.blob_bytes}
    if len(blobs) >= 2:
        slope, intercept, _ = linear_fit([float(L) for L in blobs], [float(b) for b in blobs.values()])
        s.bytes_per_cell, s.fixed_bytes = slope, intercept
    restore = [(float(p.L), p.restore_prep_ci.value) for p in points if p.restore_prep_ci is not None]
    if len({L for L, _ in restore}) >= 2:
        s.restore_ms_per_1k_cells = linear_fit([L for L, _ in restore], [ms for _, ms in restore])[0] * 1000
    by_point: dict[str, list[InprocSample]] = {}
    for smp in samples:
        by_point.setdefault(smp.point, []).append(smp)
    pooled: dict[str, list[float]] = {}
    for smps in by_point.values():
        for name, values in per_rep(smps).items():
            pooled.setdefault(name, []).extend(values)

    def iv(name: str) -> Interval | None:
        return median_interval(pooled.get(name, []), f"arms/all/{name}")

    s.restore_gbps_ci, s.memcpy_gbps_ci = iv("restore/gbps"), iv("memcpy/gbps")
    s.restore_vs_memcpy_ci, s.fake_vs_genuine_ci = iv("memcpy/restore"), iv("fake/genuine")
    s.restore_step_vs_genuine_ci, s.genuine_vs_plain_ci = iv("restore-step/genuine"), iv("genuine/plain")
    s.rep_s_ci = median_interval([p.rep_s.value for p in points if p.rep_s is not None], "arms/all/rep_s")
    return s


def done_points(run: RunFolder) -> dict[str, InprocPoint]:
    return run.finished_points(POINTS, InprocPoint, [(SAMPLES, InprocSample), (SERVER_SAMPLES, SweepSample)])


class Arms(Experiment):
    """Baseline, fake prefix and genuine hit in one process over the sweep's grid, each rep costing its new
    tokens (the genuine hit restored from one cumulative fill), optionally proven against a plain genuine hit."""

    name = "arms"

    def __init__(self) -> None:
        self.driver: InstrumentInfo | None = None
        self.n_vocab = 0
        self.shape: MemoryShape | None = None
        self.points: list[InprocPoint] = []
        self.summary: ArmsSummary | None = None
        self.plan: Plan | None = None
        self.took_s = 0.0

    def params(self, settings: Settings) -> dict[str, Any]:
        return {
            "sweep": settings.sweep.model_dump(mode="json"),
            "arms": settings.arms.model_dump(mode="json"),
            "server": settings.server.model_dump(mode="json"),
            "model": str(settings.model) if settings.model else None,
        }

    def restore(self, settings: Settings, run: RunFolder) -> Settings:
        params = run.manifest().params
        return settings.model_copy(
            update={
                "sweep": SweepSettings.model_validate(params["sweep"]),
                "arms": ArmsSettings.model_validate(params["arms"]),
                "server": ServerSettings.model_validate(params["server"]),
                "model": Path(params["model"]) if params.get("model") else None,
            }
        )

    def prepare(self, settings: Settings, parts: Parts) -> None:
        assert parts.engine is not None and parts.model is not None
        if settings.sweep.images != ["none"]:
            raise UsageError("lab arms measures text steps (token ids); set sweep.images to none for it")
        fake = "fake" in settings.arms.arms  # without it an iSWA model is fine (no fake op needed)
        self.driver, self.n_vocab = prepare_driver(
            parts.engine, settings, parts.model, settings.sweep.news, fake, "arms"
        )
        self.shape = memory_shape(read_gguf_metadata(parts.model))

    def measure(self, sess: Session, console: Console) -> Outcome:
        settings, run = sess.settings, sess.run
        sw, arms = settings.sweep, list[str](settings.arms.arms)
        started = time.monotonic()
        done = done_points(run)
        fills = complete_fills(run, FILLS, settings, sw.news)
        todo = [p for p in grid(sw) if p.id not in done]
        if self.driver is not None:  # what measured: the driver's source and build
            shutil.copyfile(SOURCE, run.path / "raw" / SOURCE.name)
            (run.path / "raw" / "inproc_driver.json").write_text(self.driver.model_dump_json(indent=2))
        meta: dict[str, Any] = {}
        if todo:
            tokens = run.path / "logs" / "inproc_tokens.txt"
            tokens.write_text(" ".join(map(str, stream_tokens(sw, self.n_vocab))) + "\n")
            assert self.driver is not None
            cmd = sweep_driver_command(self.driver, settings, sess.model, sw.news, tokens, "fake" in arms)
            logs = run.path / "logs"
            with contextlib.ExitStack() as stack, progress_bar(console) as progress:
                driver = stack.enter_context(DriverSession(cmd, logs / "inproc.log", logs / "inproc.jsonl"))
                meta = driver.meta
                client = None
                if settings.arms.where == "both":  # started once, idle while the driver measures
                    srv = stack.enter_context(sess.server())
                    sess.record_server(srv)
                    client = ContractClient(srv)
                task = progress.add_task("fill passes", total=None)
                run_fills(driver, run, FILLS, fills, sw.fill_passes)
                progress.update(task, total=1, completed=1)
                self.plan = plan_of_run(settings, "inproc", fills, progress.console)
                task = progress.add_task("points", total=len(todo))
                for p in todo:
                    progress.update(task, description=f"L={p.L} new={p.new}")
                    point, samples, server = self.measure_point(sess, driver, p, fills, arms, client)
                    run.append(SAMPLES, samples)
                    run.append(SERVER_SAMPLES, server)
                    run.append(POINTS, [point])
                    done[p.id] = point
                    progress.advance(task)
        self.points = [done[p.id] for p in grid(sw)]
        self.summary = summarize_run(self.points, run.read(SAMPLES, InprocSample), fills, self.shape)
        (run.path / "raw" / f"{SUMMARY}.json").write_text(self.summary.model_dump_json(indent=2))
        self.took_s = time.monotonic() - started
        return Outcome(results={**({"driver_meta": meta} if meta else {}), **plan_results(self.plan, self.took_s)})

    def measure_point(
        self,
        sess: Session,
        driver: DriverSession,
        p: GridPoint,
        fills: list[InprocFill],
        arms: list[str],
        client: ContractClient | None,
    ) -> tuple[InprocPoint, list[InprocSample], list[SweepSample]]:
        """Interleaved reps, one driver command each, until the point is decided (after min_reps) or max_reps;
        then as many server reps at the same point when the server side is measured."""
        sw = sess.settings.sweep
        samples: list[InprocSample] = []
        walls: list[float] = []  # what one more rep costs: its arms but the direct baseline, and the round trip
        for rep in range(sw.max_reps):
            todo = rep_arms(arms, rep, sw)
            if "baseline" in todo:  # a call of its own, so the rest of the rep is timed alone
                samples += samples_of(driver.rep(p.L, p.new, rep, ["baseline"]), p.id)
            started = time.monotonic()
            samples += samples_of(driver.rep(p.L, p.new, rep, [a for a in todo if a != "baseline"]), p.id)
            walls.append(time.monotonic() - started)
            if rep + 1 < sw.min_reps:  # no summary needed before min_reps: its bootstraps cost a cheap rep's time
                continue
            point = summarize_point(p, samples, fills, sw.tolerance, self.shape)
            if decided(point, sw, arms):
                break
        server: list[SweepSample] = []
        if client is not None:
            srv_arms = [a for a in SERVER_ARMS if a in arms]
            srv_sw = sw.model_copy(update={"arms": srv_arms, "min_reps": point.reps, "max_reps": point.reps})

            tokens = stream_tokens(sw, self.n_vocab)
            server, _, _ = measure_point(client, p, srv_sw, tokens, no_estimate, lambda: None, warm_up=True)
            point = summarize_point(p, samples, fills, sw.tolerance, self.shape, server)
        # the wall time of one rep: every arm of it and the driver round trip
        point.rep_s = median_interval(walls, f"arms/{p.id}/rep_s")
        return point, samples, server

    def present(self, sess: Session, outcome: Outcome, console: Console) -> None:
        print_summary(console, self.points, self.summary)
        if self.plan is not None:
            console.print(plan_line(self.plan, self.took_s), highlight=False)


def run_arms(settings: Settings, resume: RunFolder | None = None, console: Console | None = None) -> RunFolder:
    return run_experiment(Arms(), settings, resume, console)
