"""`lab arms`: the sweep's grid measured inside one process with libllama (lab/inproc), no server in the numbers.

Per (L, new) point, interleaved reps in a rotating order, four ways to start the step's new tokens:
    baseline   decode L + new from an empty sequence
    genuine    decode L untimed, time the new tokens (the reference)
    fake       fabricate the depth-L prefix (the lab's patch), time the new tokens
    restore    restore a state blob of the really decoded depth-L prefix (captured once per point), time the
               restore (the cache read) and the new tokens; a memcpy of as many bytes is the yardstick
With `arms.where = both` the server arms (baseline, fake, genuine through HTTP) are measured at the same point
and tokens with as many reps, so server / in-process per arm is the server's own share of the step.

Resumable at point granularity, like the sweep: a point's samples and its row are appended when it is done.
"""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from lab.engine.contract import ContractClient
from lab.engine.gguf_io import read_gguf_metadata
from lab.engine.memshape import MemoryShape, memory_shape
from lab.errors import UsageError
from lab.experiments.fakeprefix import VERDICT_STYLE, GridPoint, measure_point, point_text_step, server_arm_stats
from lab.experiments.profile import linear_fit
from lab.experiments.protocol import Experiment, Outcome, Parts, Session, progress_bar, run_experiment
from lab.inproc import SOURCE, DriverError, build_driver, driver_command, run_driver
from lab.instrument import InstrumentInfo
from lab.runs import RunFolder
from lab.schemas import (
    INPROC_ARMS,
    KV_PAD,
    ArmsSummary,
    ArmStats,
    InprocPoint,
    InprocSample,
    Interval,
    SweepSample,
    ggml_pad,
)
from lab.settings import ArmsSettings, ServerSettings, Settings, SweepSettings
from lab.stats import (
    arm_stats,
    median_interval,
    paired_ratio,
    paired_values,
    reps_to_decide,
    unpaired_ratio,
    verdict,
)

SAMPLES, POINTS, SERVER_SAMPLES, SUMMARY = "inproc_samples", "inproc_points", "server_samples", "arms_summary"
SERVER_ARMS = ("baseline", "fake", "genuine")
REP_STEP = 2  # reps added per driver call once min_reps is in (each call loads the model and captures the blob)


def grid(sw: SweepSettings) -> list[GridPoint]:
    """The sweep's text points (screenshot steps are a server matter: the driver decodes token ids)."""
    return [GridPoint(L, new) for L in sw.Ls for new in sw.news]


def samples_of(rows: list[dict[str, Any]], point: str) -> list[InprocSample]:
    out = []
    for r in rows:
        if r.get("kind") != "sample":
            continue
        restore = r["arm"] == "restore"
        out.append(
            InprocSample(
                point=point, L=r["L"], new=r["new"], arm=r["arm"], rep=r["rep"], ok=r["ok"], reason=r["reason"],
                decode_ms=r["decode_ms"] if r["ok"] else None,
                prep_ms=r["prep_ms"] if r["ok"] and r["arm"] in ("fake", "restore") else None,
                copy_ms=r["copy_ms"] if r["ok"] and restore else None,
                blob_bytes=r["blob_bytes"] if restore and r["blob_bytes"] else None, pos_max=r["pos_max"],
            )
        )  # fmt: skip
    return out


def _ms(samples: list[InprocSample], arm: str, field: str = "decode_ms") -> dict[int, float]:
    return {s.rep: getattr(s, field) for s in samples if s.arm == arm and s.ok and getattr(s, field) is not None}


def per_rep(samples: list[InprocSample]) -> dict[str, list[float]]:
    """One point's per-rep values of every derived figure: ratios paired by rep (a rep's arms run back to
    back), the restore's bandwidth and its share of the step. A point's figures are their medians; the run's
    pooled figures are the medians of every point's values together."""
    dec = {arm: _ms(samples, arm) for arm in INPROC_ARMS}
    prep, copy = _ms(samples, "restore", "prep_ms"), _ms(samples, "restore", "copy_ms")
    blob = max((s.blob_bytes for s in samples if s.arm == "restore" and s.blob_bytes), default=0)
    step = {r: prep[r] + dec["restore"][r] for r in prep if r in dec["restore"]}
    return {
        "fake/genuine": paired_values(dec["fake"], dec["genuine"]),
        "restore/genuine": paired_values(dec["restore"], dec["genuine"]),
        "restore-step/genuine": paired_values(step, dec["genuine"]),
        "fake/baseline": paired_values(dec["fake"], dec["baseline"]),
        "memcpy/restore": paired_values(copy, prep),
        "share": paired_values(prep, step),
        "restore/gbps": [blob / ms / 1e6 for ms in prep.values() if ms > 0] if blob else [],
        "memcpy/gbps": [blob / ms / 1e6 for ms in copy.values() if ms > 0] if blob else [],
    }


def summarize_point(
    p: GridPoint, samples: list[InprocSample], tol: float, shape: MemoryShape | None,
    server: list[SweepSample] | None = None,
) -> InprocPoint:  # fmt: skip
    key = f"arms/{p.id}"
    dec = {arm: _ms(samples, arm) for arm in INPROC_ARMS}
    stats = {
        arm: arm_stats(list(dec[arm].values()), sum(1 for s in samples if s.arm == arm and not s.ok), f"{key}/{arm}")
        for arm in INPROC_ARMS
    }
    values = per_rep(samples)

    def iv(name: str) -> Interval | None:
        return median_interval(values[name], f"{key}/{name}")

    blobs = {s.blob_bytes for s in samples if s.arm == "restore" and s.blob_bytes}
    vs_gen, restore_vs_gen = iv("fake/genuine"), iv("restore/genuine")
    point = InprocPoint(
        point=p.id, L=p.L, new=p.new, n_kv_padded=ggml_pad(p.L + p.new), measurable=p.L >= KV_PAD,
        reps=len({s.rep for s in samples}),
        baseline=stats["baseline"], fake=stats["fake"], genuine=stats["genuine"], restore=stats["restore"],
        fake_prep_ci=median_interval(list(_ms(samples, "fake", "prep_ms").values()), f"{key}/fake/prep"),
        restore_prep_ci=median_interval(list(_ms(samples, "restore", "prep_ms").values()), f"{key}/restore/prep"),
        memcpy_ci=median_interval(list(_ms(samples, "restore", "copy_ms").values()), f"{key}/memcpy"),
        blob_bytes=max(blobs) if blobs else None, predicted_blob_bytes=shape.blob_bytes(p.L) if shape else None,
        restore_gbps_ci=iv("restore/gbps"), memcpy_gbps_ci=iv("memcpy/gbps"),
        restore_vs_memcpy_ci=iv("memcpy/restore"), fake_vs_genuine_ci=vs_gen, restore_vs_genuine_ci=restore_vs_gen,
        restore_step_vs_genuine_ci=iv("restore-step/genuine"), fake_vs_baseline_ci=iv("fake/baseline"),
        cache_read_share_ci=iv("share"), genuine_verdict=verdict(vs_gen, tol),
        restore_verdict=verdict(restore_vs_gen, tol),
    )  # fmt: skip
    undecided = [reps_to_decide(iv, tol) for iv, v in ((vs_gen, point.genuine_verdict),
                 (restore_vs_gen, point.restore_verdict)) if iv is not None and v == "undecided"]  # fmt: skip
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
    for name, iv, v in (("fake/genuine", p.fake_vs_genuine_ci, p.genuine_verdict),
                        ("restore/genuine", p.restore_vs_genuine_ci, p.restore_verdict)):  # fmt: skip
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
    return not ("restore" in arms and p.restore_verdict == "undecided")


def summarize_run(points: list[InprocPoint], samples: list[InprocSample], shape: MemoryShape | None) -> ArmsSummary:
    """The restore cost over the grid: blob bytes and restore ms against L (least squares over the points),
    the GGUF's prediction, and bandwidth and ratios pooled over every point's reps."""
    s = ArmsSummary()
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
    s.restore_step_vs_genuine_ci = iv("restore-step/genuine")
    return s


def done_points(run: RunFolder) -> dict[str, InprocPoint]:
    return run.finished_points(POINTS, InprocPoint, [(SAMPLES, InprocSample), (SERVER_SAMPLES, SweepSample)])


class Arms(Experiment):
    """Baseline, fake prefix, genuine hit and state restore in one process, over the sweep's grid."""

    name = "arms"

    def __init__(self) -> None:
        self.driver: InstrumentInfo | None = None
        self.n_vocab = 0
        self.shape: MemoryShape | None = None
        self.points: list[InprocPoint] = []
        self.summary: ArmsSummary | None = None

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

    def command(
        self, settings: Settings, model: Path, out: Path | None, p: GridPoint | None = None,
        reps: tuple[int, int] = (0, 1), arms: list[str] | None = None, check: bool = False,
    ) -> list[str]:  # fmt: skip
        """The driver's command for reps[0]..reps[1]-1 of point p (tokens on stdin), or for the check."""
        assert self.driver is not None
        srv, sw = settings.server, settings.sweep
        return driver_command(
            self.driver, model, out, Ls=[p.L] if p else [max(sw.Ls)], news=[p.new] if p else [max(sw.news)],
            first_rep=reps[0], reps=reps[1], threads=srv.threads, threads_batch=srv.threads_batch,
            arms=tuple(arms or settings.arms.arms), n_ctx=srv.ctx_size, ubatch=srv.ubatch_size,
            flash_attn=srv.flash_attn, tokens="-" if p else None, cpu_list=srv.cpu_list, check=check,
        )  # fmt: skip

    def prepare(self, settings: Settings, parts: Parts) -> None:
        assert parts.engine is not None and parts.model is not None
        if settings.sweep.images != ["none"]:
            raise UsageError("lab arms measures text steps (token ids); set sweep.images to none for it")
        self.driver = build_driver(parts.engine, settings.cache_dir)  # a compile error creates no run
        meta = read_gguf_metadata(parts.model)
        self.n_vocab = len(meta.get("tokenizer.ggml.tokens", []))
        self.shape = memory_shape(meta)
        cmd = self.command(settings, parts.model, None, check=True)
        log = settings.cache_dir / "logs" / "arms-check.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        try:  # the model, the context and the arms (e.g. no fake op on an iSWA cache), before any run folder
            run_driver(cmd, settings.cache_dir / "logs" / "arms-check.jsonl", log)
        except DriverError as e:
            raise UsageError(str(e).replace("the in-process driver failed (2): ", "lab arms: ")) from e

    def measure(self, sess: Session, console: Console) -> Outcome:
        settings, run = sess.settings, sess.run
        sw, arms = settings.sweep, settings.arms
        done = done_points(run)
        todo = [p for p in grid(sw) if p.id not in done]
        if self.driver is not None:  # what measured: the driver's source and build
            shutil.copyfile(SOURCE, run.path / "raw" / SOURCE.name)
            (run.path / "raw" / "inproc_driver.json").write_text(self.driver.model_dump_json(indent=2))
        meta: dict[str, Any] = {}
        if todo:
            with contextlib.ExitStack() as stack, progress_bar(console) as progress:
                client = None
                if arms.where == "both":  # started once, idle while the driver measures
                    srv = stack.enter_context(sess.server())
                    sess.record_server(srv)
                    client = ContractClient(srv)
                task = progress.add_task("arms", total=len(todo))
                for p in todo:
                    progress.update(task, description=f"L={p.L} new={p.new}")
                    samples, server, point, meta = self.measure_point(sess, p, client)
                    run.append(SAMPLES, samples)
                    run.append(SERVER_SAMPLES, server)
                    run.append(POINTS, [point])
                    done[p.id] = point
                    progress.advance(task)
        self.points = [done[p.id] for p in grid(sw)]
        all_samples = run.read(SAMPLES, InprocSample)
        self.summary = summarize_run(self.points, all_samples, self.shape)
        (run.path / "raw" / f"{SUMMARY}.json").write_text(self.summary.model_dump_json(indent=2))
        return Outcome(results={"driver_meta": meta} if meta else {})

    def measure_point(
        self, sess: Session, p: GridPoint, client: ContractClient | None
    ) -> tuple[list[InprocSample], list[SweepSample], InprocPoint, dict[str, Any]]:
        """In-process reps (min_reps, then REP_STEP more at a time until decided or max_reps; the baseline in
        the first min_reps or baseline_reps only), then as many server reps at the same point when the server
        side is measured."""
        settings, run = sess.settings, sess.run
        sw, arms = settings.sweep, list[str](settings.arms.arms)
        tokens = point_text_step(p, sw.seed, self.n_vocab).prompt
        out = run.path / "logs" / "inproc.part.jsonl"
        log = run.path / "logs" / "inproc.log"
        samples: list[InprocSample] = []
        meta: dict[str, Any] = {}
        have, want = 0, sw.min_reps
        while True:
            # reps past min_reps serve the verdicts, which the baseline is not part of
            cap = sw.min_reps if sw.baseline_reps is None else min(sw.baseline_reps, sw.min_reps)
            for lo, hi, chunk_arms in rep_chunks(have, want, arms, cap):
                rows = run_driver(self.command(settings, sess.model, out, p, (lo, hi), chunk_arms), out, log, tokens)
                meta = next((r for r in rows if r.get("kind") == "meta"), meta)
                samples += samples_of(rows, p.id)
            have = want
            point = summarize_point(p, samples, sw.tolerance, self.shape)
            if have >= sw.max_reps or decided(point, sw, arms):
                break
            want = min(sw.max_reps, have + REP_STEP)
        server: list[SweepSample] = []
        if client is not None:
            srv_arms = [a for a in SERVER_ARMS if a in arms]
            srv_sw = sw.model_copy(update={"arms": srv_arms, "min_reps": point.reps, "max_reps": point.reps})

            def no_estimate(gp: GridPoint, rep: int) -> Any:
                raise AssertionError("lab arms measures no llama-bench estimate")

            server, _, _ = measure_point(client, p, srv_sw, self.n_vocab, no_estimate, lambda: None)
            point = summarize_point(p, samples, sw.tolerance, self.shape, server)
        return samples, server, point, meta

    def present(self, sess: Session, outcome: Outcome, console: Console) -> None:
        print_summary(console, self.points, self.summary)


def rep_chunks(have: int, want: int, arms: list[str], baseline_reps: int) -> list[tuple[int, int, list[str]]]:
    """Driver calls for reps have..want-1, the baseline only in the first `baseline_reps` reps (slow at large L)."""
    if "baseline" not in arms or want <= baseline_reps:
        return [(have, want, arms)]
    without = [a for a in arms if a != "baseline"]
    if have >= baseline_reps:
        return [(have, want, without)]
    return [(have, baseline_reps, arms), (baseline_reps, want, without)]


def run_arms(settings: Settings, resume: RunFolder | None = None, console: Console | None = None) -> RunFolder:
    return run_experiment(Arms(), settings, resume, console)


def _arm(a: ArmStats) -> str:
    if a.median_ms is None:
        return "-"
    if a.median_lo_ms is None or a.median_hi_ms is None or a.n_ok < 2:
        return f"{a.median_ms:.1f}"
    return f"{a.median_ms:.1f} [{a.median_lo_ms:.1f}-{a.median_hi_ms:.1f}]"


def _ratio(iv: Interval | None, v: str | None = None) -> str:
    if iv is None:
        return "-"
    return iv.fmt(pct=True) + (f" [{VERDICT_STYLE[v]}]{v}[/{VERDICT_STYLE[v]}]" if v else "")


def _iv(iv: Interval | None, digits: int = 2, pct: bool = False) -> str:
    if iv is None:
        return "-"
    if pct:
        return f"{iv.value:.1%} [{iv.lo:.1%}, {iv.hi:.1%}]"
    return iv.fmt(digits=digits) if iv.n > 1 else f"{iv.value:.{digits}f}"


def arms_table(points: list[InprocPoint]) -> Table:
    t = Table(title="in-process arms: median decode ms of the new tokens [95% interval] (baseline: L + new)")
    for c in ("L", "new", "baseline", "genuine", "fake", "restore", "restore (cache read)", "reps"):
        t.add_column(c, justify="right")
    for p in points:
        t.add_row(str(p.L), str(p.new), _arm(p.baseline), _arm(p.genuine), _arm(p.fake), _arm(p.restore),
                  _iv(p.restore_prep_ci), str(p.reps))  # fmt: skip
    return t


def ratio_table(points: list[InprocPoint]) -> Table:
    server = any(p.server for p in points)
    t = Table(title="against the genuine hit, paired by rep [95% interval] and verdict"
              + ("; server / in-process per arm (unpaired)" if server else ""))  # fmt: skip
    cols = ["L", "new", "fake/genuine - 1", "restore/genuine - 1", "restore step/genuine - 1", "cache-read share"]
    if server:
        cols += ["server/in-proc fake", "server/in-proc genuine", "server fake/genuine - 1"]
    for c in cols:
        t.add_column(c, justify="right")
    for p in points:
        row = [str(p.L), str(p.new), _ratio(p.fake_vs_genuine_ci, p.genuine_verdict),
               _ratio(p.restore_vs_genuine_ci, p.restore_verdict), _ratio(p.restore_step_vs_genuine_ci),
               _iv(p.cache_read_share_ci, pct=True)]  # fmt: skip
        if server:
            row += [_iv(p.server_vs_inproc.get("fake"), 3), _iv(p.server_vs_inproc.get("genuine"), 3),
                    _ratio(p.server_fake_vs_genuine_ci)]  # fmt: skip
        t.add_row(*row)
    return t


def restore_lines(points: list[InprocPoint], s: ArmsSummary) -> list[str]:
    """The restore cost in words: what the blob holds, how fast it is read back, what it costs at the top L."""
    out = []
    if s.bytes_per_cell is not None and s.fixed_bytes is not None:
        line = f"state blob: {s.bytes_per_cell:,.0f} B per cell + {s.fixed_bytes:,.0f} B fixed (measured over L)"
        if s.predicted_bytes_per_cell is not None:
            line += (f"; the GGUF predicts {s.predicted_bytes_per_cell:,} B per cell ({s.attention_layers} attention "
                     f"layers x K+V rows + cell metadata) + {s.predicted_fixed_bytes:,} B ({s.recurrent_layers} "
                     "recurrent layers x conv + recurrent state)")  # fmt: skip
        out.append(line)
    top = max((p for p in points if p.restore_prep_ci is not None), key=lambda p: p.L, default=None)
    if s.restore_vs_memcpy_ci is not None and s.restore_gbps_ci is not None and s.memcpy_gbps_ci is not None:
        line = (f"restore runs at {_iv(s.restore_vs_memcpy_ci, pct=True)} of memcpy bandwidth "
                f"({_iv(s.restore_gbps_ci)} GB/s vs {_iv(s.memcpy_gbps_ci)} GB/s)")  # fmt: skip
        if top is not None and top.restore_prep_ci is not None and top.blob_bytes:
            line += (f" and costs {_iv(top.restore_prep_ci)} ms at L={top.L} ({top.blob_bytes / 1e6:.1f} MB), "
                     f"{_iv(top.cache_read_share_ci, pct=True)} of its step at new={top.new}")  # fmt: skip
        out.append(line)
    if s.fake_vs_genuine_ci is not None:
        out.append(f"fake/genuine over every point's reps: {s.fake_vs_genuine_ci.fmt(pct=True)}")
    if s.restore_step_vs_genuine_ci is not None:
        out.append(f"restore step (cache read + decode)/genuine over every point's reps: "
                   f"{s.restore_step_vs_genuine_ci.fmt(pct=True)}")  # fmt: skip
    return out


def print_summary(console: Console, points: list[InprocPoint], s: ArmsSummary | None) -> None:
    console.print(arms_table(points))
    console.print(ratio_table(points))
    for p in points:
        for d in p.diagnostics:
            console.print(f"L={p.L} new={p.new}: {d}", highlight=False)
    for line in restore_lines(points, s) if s else []:
        console.print(line, highlight=False)
    for name, attr, arm in (("fake vs genuine hit", "genuine_verdict", "fake"),
                            ("restore vs genuine hit", "restore_verdict", "restore")):  # fmt: skip
        if not any(getattr(p, arm).n_ok for p in points):
            continue
        counts = {v: sum(getattr(p, attr) == v for p in points) for v in VERDICT_STYLE}
        console.print(f"{name}: " + ", ".join(f"{n} {v}" for v, n in counts.items() if n), highlight=False)
