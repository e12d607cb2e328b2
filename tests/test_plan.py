"""The plan's arithmetic (lab.measure.plan) on constructed rates: the cost of decoding at depth, the two designs on the
reference host's grid, the reps a budget affords, rates from a file and fitted from chunks; and `--plan` through
the CLI, which measures nothing."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
from labcli import lab

from lab.core.errors import UsageError
from lab.core.units import parse_size
from lab.measure.plan import Plan, Rates, fit_reps, parse_duration, plan, rates_from_chunks, rates_from_file

pytestmark = pytest.mark.fast

LAB = str(Path(sys.executable).parent / "lab")
REPO = Path(__file__).resolve().parent.parent
NUC16 = Rates(flat_ms_per_token=9.52, attn_ms_per_token_per_1k=0.318)
GRID = [(L, n) for L in (4096, 8192, 16384, 32768, 40960) for n in (256, 1024)]


def test_decoding_at_depth_is_flat_plus_attention_growing_with_depth() -> None:
    r = Rates(flat_ms_per_token=2.0, attn_ms_per_token_per_1k=0.5)
    assert r.ms(0, 1000) == pytest.approx(2000 + 0.5 * 1000 * 1000 / 2000)  # the mean depth of [0, 1000) is 500
    assert r.chunk(4000, 100) == pytest.approx(100 * (2.0 + 0.5 * 4.05))
    assert r.ms(0, 3000) == pytest.approx(r.ms(0, 1000) + r.ms(1000, 3000))  # a fill is the sum of its segments


def test_a_time_model_curve_is_integrated_piecewise_linearly() -> None:
    line = Rates(flat_ms_per_token=2.0, attn_ms_per_token_per_1k=0.5)
    curve = Rates(flat_ms_per_token=2.0, attn_ms_per_token_per_1k=0.0, curve=[(0, 2.0), (1000, 2.5), (4000, 4.0)])
    for d0, d1 in [(0, 1000), (0, 3000), (500, 2500), (3000, 6000)]:  # beyond the last point: its last segment
        assert curve.ms(d0, d1) == pytest.approx(line.ms(d0, d1))
    capped = Rates(flat_ms_per_token=2.0, attn_ms_per_token_per_1k=0.0, curve=[(0, 2.0), (1000, 3.0), (5000, 3.0)])
    assert capped.chunk(2000, 100) == pytest.approx(capped.chunk(4000, 100)) == pytest.approx(300.0)  # levelled off
    assert capped.ms(0, 5000) == pytest.approx(1000 * 2.5 + 4000 * 3.0)


def test_the_reference_grid_in_both_designs() -> None:
    """The numbers the docs quote: prefilling per rep costs about 9,500 s a rep (31.8 h at 12 reps: llama-bench
    fills the depth once per call); the lab's design fits 12 reps in under 2 h through the server (one fill
    pass) and about 80 min in process."""
    old = plan("per-rep prefill", "server", GRID, 1, ["baseline", "fake", "genuine", "estimate"], NUC16)
    assert old.total_s == pytest.approx(9_535, rel=0.01)
    assert plan(
        "per-rep prefill", "server", GRID, 12, ["baseline", "fake", "genuine", "estimate"], NUC16
    ).total_s / 3600 == pytest.approx(31.8, rel=0.01)
    new = plan("cumulative", "server", GRID, 12, ["fake", "genuine", "estimate"], NUC16, fill_passes=1)
    assert new.total_s < 2 * 3600
    arms = {a.arm: a.seconds for a in new.arms}
    assert set(arms) == {"fake", "genuine", "fill passes", "estimate", "llama-bench check"}
    deepest = NUC16.ms(0, 40960)
    assert arms["genuine"] == pytest.approx((deepest + 12 * sum(NUC16.chunk(L, n) for L, n in GRID)) / 1e3)
    inproc = plan("cumulative", "inproc", GRID, 12, ["fake", "genuine"], NUC16, fill_passes=3)
    assert inproc.total_s / 60 == pytest.approx(79.4, rel=0.01)
    # a rep of the lab's design costs its new tokens: twelve more reps add what those tokens cost, nothing of L
    more = plan("cumulative", "inproc", GRID, 24, ["fake", "genuine"], NUC16, fill_passes=3)
    assert more.total_s - inproc.total_s == pytest.approx(12 * 2 * sum(NUC16.chunk(L, n) for L, n in GRID) / 1e3)


def test_a_budget_affords_the_most_reps_that_fit() -> None:
    def of(n: int) -> Plan:
        return plan("cumulative", "inproc", GRID, n, ["fake", "genuine"], NUC16, fill_passes=1)

    reps = fit_reps(3600, of)
    assert of(reps).total_s <= 3600 < of(reps + 1).total_s
    with pytest.raises(UsageError, match="one rep of this grid already takes about"):
        fit_reps(60, of)


@pytest.mark.parametrize(("text", "seconds"), [("30m", 1800), ("1h30m", 5400), ("90s", 90), ("2h", 7200)])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "30", "m", "1.5h", "30 min"])
def test_a_bad_duration_is_one_line(text: str) -> None:
    with pytest.raises(UsageError, match="expected a duration like 30m"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("text", "n"), [("4GiB", 4 << 30), ("512 MiB", 512 << 20), ("3GB", 3 * 10**9), ("2g", 2 << 30)]
)
def test_sizes(text: str, n: int) -> None:
    assert parse_size(text) == n


@pytest.mark.parametrize("text", ["", "4 potatoes", "GiB", "-1GiB"])
def test_a_bad_size_is_one_line(text: str) -> None:
    with pytest.raises(UsageError, match="not a size"):
        parse_size(text)


def test_the_decode_of_n_out_is_planned_at_its_depth() -> None:
    """sweep.n_out: the fake arm also generates n_out tokens at depth L + new, each a step of its own (a line in
    the depth like a prefill's, with its own rates); a rate that is not known is refused, not taken as free."""
    r = NUC16.model_copy(update={"decode_ms_per_token": 40.0, "decode_ms_per_token_per_1k": 0.5})
    assert r.decode_ms(1000, 1010) == pytest.approx(10 * (40.0 + 0.5 * 1.005))
    arms = {a.arm: a.seconds for a in plan("cumulative", "server", GRID, 12, ["fake"], r, n_out=32).arms}
    want = 12 * sum(r.decode_ms(L + n, L + n + 32) for L, n in GRID) / 1e3
    assert arms["fake: decode"] == pytest.approx(want) and arms["fake"] == pytest.approx(
        12 * sum(r.chunk(L, n) for L, n in GRID) / 1e3
    )
    assert "decode 40.00 ms/token" in r.describe()
    with pytest.raises(UsageError, match="no decode rate"):
        plan("cumulative", "server", GRID, 1, ["fake"], NUC16, n_out=32)


def test_rates_files(tmp_path: Path) -> None:
    f = tmp_path / "rates.yaml"
    f.write_text("flat_ms_per_token: 9.52\nattn_ms_per_token_per_1k: 0.318\n")
    assert rates_from_file(f).model_dump(exclude={"source"}) == NUC16.model_dump(exclude={"source"})
    f.write_text("flat_ms_per_token: 9.52\nattn_ms_per_token_per_1K: 0.318\n")
    with pytest.raises(UsageError, match="unknown key 'attn_ms_per_token_per_1K'"):
        rates_from_file(f)
    f.write_text("flat_ms_per_token: -1\nattn_ms_per_token_per_1k: 0.3\n")
    with pytest.raises(UsageError, match="flat_ms_per_token"):
        rates_from_file(f)


def test_rates_fitted_to_chunks_recover_the_rates() -> None:
    chunks = [(L, n, NUC16.chunk(L, n)) for L, n in ((512, 64), (2048, 64), (4096, 256))]
    r = rates_from_chunks(chunks, "test")
    assert r.flat_ms_per_token == pytest.approx(9.52) and r.attn_ms_per_token_per_1k == pytest.approx(0.318)


def test_plan_through_the_cli_measures_nothing(tmp_path: Path) -> None:
    rates = REPO / "docs" / "examples" / "nuc16-holo3-rates.yaml"
    runs = tmp_path / "runs"
    grid = ("--rates", str(rates), "--Ls", "4096,8192,16384,32768,40960", "--news", "256,1024", "--ctx-size", "45000")
    bare = {"PATH": "/usr/bin:/bin"}  # no engine, no tool on the path: a plan measures nothing
    sweep = ("--max-reps", "12", "--fill-passes", "1", "--runs-dir", str(runs))
    r = lab("sweep", "--plan", *grid, *sweep, cwd=tmp_path, env=bare)
    assert r.returncode == 0, r.stderr
    assert "31.8 h" in r.stdout and "1.8 h" in r.stdout and "llama-bench check" in r.stdout, r.stdout
    assert not runs.exists()
    r = lab("arms", "--plan", "--budget", "1h", *grid, "--runs-dir", str(runs), cwd=tmp_path, env=bare)
    assert r.returncode == 0 and "--budget 1h: up to 3 reps per point" in r.stdout, r.stdout + r.stderr
    assert not runs.exists()
    r = lab("arms", "--plan", "--rates", str(tmp_path / "none.yaml"), "--runs-dir", str(runs), cwd=tmp_path)
    assert r.returncode == 2 and "--rates" in r.stderr and "neither a rates file nor a run" in r.stderr, r.stderr


def test_a_sweep_in_both_places_plans_each_arm_per_place_and_fills_once() -> None:
    from lab.core.settings import Settings
    from lab.experiments.sweep.planning import plans

    s = Settings(sweep={"Ls": [4096, 8192], "news": [256], "where": "both", "fill_passes": 1}, server={})
    server, inproc = plans(s, NUC16, "server")[1], plans(s, NUC16, "inproc")[1]
    old, both = plans(s, NUC16, "both")
    arms = {a.arm: a.seconds for a in both.arms}
    assert both.where == old.where == "both"
    assert arms["fake (server)"] == pytest.approx(next(a.seconds for a in server.arms if a.arm == "fake"))
    assert arms["fake (in-process)"] == pytest.approx(next(a.seconds for a in inproc.arms if a.arm == "fake"))
    assert [a for a in arms if a.startswith("fill passes")] == ["fill passes (server)"]  # one driver, one fill
    fill = next(a.seconds for a in inproc.arms if a.arm == "fill passes")
    assert both.total_s == pytest.approx(server.total_s + inproc.total_s - fill)


def test_the_reps_a_point_needs_are_predicted_from_its_spread() -> None:
    """A ratio's half-width after P processes of r reps is about e(P) 1.96 sqrt((between^2 + 2 within^2 / r) / P),
    e(P) the widening for few processes (lab.core.stats.expansion: 2.69 at 3, 1.87 at 4, 1.58 at 5): a quiet point
    stops after a few processes, a noisy one takes more, one that sat on the bound takes them all."""
    from lab.core.schemas import Components
    from lab.measure.prediction import predicted_reps

    bounds = {"fake/genuine": (0.03, 0.05)}
    quiet = {"fake/genuine": (Components(between=0.0, within=0.02, processes=3, reps=6), 0.0)}
    # 1.96 x 0.01 / sqrt(P) x e(P) <= 0.03 from P = 5 (3: 0.061, 4: 0.037, 5: 0.028): 5 processes of 2 reps
    assert predicted_reps(quiet, bounds, min_reps=5, max_reps=100, processes=3) == 10
    noisy = {"fake/genuine": (Components(between=0.02, within=0.05, processes=3, reps=6), 0.0)}
    # (0.02^2 + 2 x 0.05^2 / 2) x 1.96^2 / 0.03^2 = 12.8, widened by e(P)^2: 16 processes of 2 reps
    assert predicted_reps(noisy, bounds, min_reps=5, max_reps=100, processes=3) == 32
    assert predicted_reps(noisy, bounds, min_reps=5, max_reps=12, processes=3) == 12  # capped
    near = {"fake/genuine": (Components(between=0.0, within=0.02, processes=3, reps=6), 0.05)}
    assert predicted_reps(near, bounds, min_reps=5, max_reps=40, processes=3) == 40  # on the bound: every rep
    # the estimate's verdict needs only the tolerance, less how far the ratio sat from 1:
    # (0.01^2 + 2 x 0.03^2 / 2) x 1.96^2 / (0.05 - 0.02)^2 = 4.3, widened: 8 processes of 2 reps
    est = {"fake/estimate": (Components(between=0.01, within=0.03, processes=3, reps=6), 0.02)}
    assert predicted_reps(est, {"fake/estimate": (float("inf"), 0.05)}, 5, 100, 3) == 16
    # nothing measured here yet: each place's default spread, widened: in one process (0.07, 0.045) 42 processes
    # of one rep, through the server (0.06, 0.04; fake / genuine alone) 33
    from lab.measure.prediction import DEFAULT_SPREADS

    both = {"fake/genuine": (0.03, 0.05), "fake/estimate": (float("inf"), 0.05)}
    assert predicted_reps({}, both, 5, 100, 5, DEFAULT_SPREADS["inproc"]) == 42
    assert predicted_reps({}, {"fake/genuine": (0.03, 0.05)}, 5, 100, 5, DEFAULT_SPREADS["server"]) == 33


def test_a_run_of_one_rep_per_process_still_says_its_spread() -> None:
    """Without components (one rep per process), a ratio's interval over P processes implies the spread between
    them: the half-width is about e(P) 1.96 of them over sqrt(P); a within-run interval implies nothing."""
    from lab.core.schemas import Interval
    from lab.core.stats import expansion
    from lab.measure.prediction import predicted_reps, spread_of

    half = 0.0196 * expansion(4)
    iv = Interval(value=1.0, lo=math.exp(-half), hi=math.exp(half), n=5, processes=4)
    c = spread_of(iv)
    assert c is not None and c.between == pytest.approx(0.02) and c.within == 0 and c.processes == 4
    assert spread_of(iv.model_copy(update={"processes": 1})) is None
    # (0.02^2) x 1.96^2 / 0.03^2 = 1.6: the run's five processes of one rep decide it
    assert predicted_reps({"fake/genuine": (c, 0.0)}, {"fake/genuine": (0.03, 0.05)}, 5, 100, 5) == 5


def test_the_plan_is_said_as_a_range_and_the_line_after_the_run_says_how_it_did() -> None:
    from lab.measure.plan import ArmCost, Plan, Rates, plan_line
    from lab.measure.prediction import DEFAULT_TOOK, took_range

    rates = Rates(source="t", flat_ms_per_token=0.1, attn_ms_per_token_per_1k=0.01)
    first = Plan(design="cumulative", where="server", reps=100, points=8, rates=rates,
                 arms=[ArmCost(arm="fake", what="-", seconds=60.0)], reps_each=[10] * 8,
                 spread_source="the lab's default spread", bound_s=600.0)  # fmt: skip
    assert plan_line(first, 90.0).endswith("; took 1.5 min (1.50x the prediction)")
    # the range: the default until three runs here made a plan, then the newest six runs' narrowest and widest
    assert took_range([1.1, 0.9])[0] == DEFAULT_TOOK
    (lo, hi), source = took_range([1.2, 0.8, 1.0, 1.1, 0.9, 1.0, 3.0])  # the seventh is past the newest six
    assert (lo, hi) == (0.8, 1.2) and source == "the 6 newest runs here took 0.80-1.20x their plan"
    said = first.model_copy(update={"took": (lo, hi), "took_source": source})
    assert plan_line(said).startswith(f"predicted 60 s (48 s to 72 s: {source}) for 8 points")
    wide = first.model_copy(update={"took": (0.5, 20.0), "took_source": "wide"})  # never above the bound
    assert plan_line(wide).startswith("predicted 60 s (30 s to 10.0 min: wide) for 8 points")
    # nothing here predicts the reps yet: the bound alone, then the prediction after the first processes
    unsaid = first.model_copy(update={"said": False})
    assert plan_line(unsaid) == (
        "at most 10.0 min for 8 points at 100 reps; predicted after the run's first processes (no sweep of this "
        "model measured here yet)"
    )
    after = first.model_copy(update={"arms": [ArmCost(arm="all", what="", seconds=80.0)]})
    assert plan_line(unsaid, 90.0, after).endswith(
        "; took 1.5 min (1.12x the prediction after its first processes, 80 s)"
    )
    assert plan_line(first, 90.0, after).endswith(
        "; took 1.5 min (1.50x the prediction, 1.12x the one after its first processes, 80 s)"
    )


def test_the_plan_counts_every_process_a_point_may_need() -> None:
    """A point takes its share in each of the first sweep.processes processes, then further processes of as many
    reps as its spread calls for: the bound assumes one rep in each (processes differing more than reps within
    one), so a point allowed 20 reps may need 20 processes; a prediction from a quiet point's spread fewer."""
    from lab.core.schemas import Components, Interval, SweepPoint
    from lab.core.settings import Settings
    from lab.experiments.sweep.planning import plans
    from lab.measure.prediction import processes_needed

    assert processes_needed(5, 1, 5, 1) == 5 and processes_needed(3, 1, 5, 1) == 3  # stops at max_reps
    assert processes_needed(20, 1, 5, 1) == 20 and processes_needed(20, 1, 5, 5) == 8
    assert processes_needed(21, 2, 3, 4) == 3 + 4  # 6 reps in the first 3, then 15 in fours
    rates = NUC16.model_copy(update={"process_start_s": 2.0})
    sw = {"Ls": [4096], "news": [256], "min_reps": 5, "max_reps": 20, "processes": 5, "arms": ["fake", "genuine"]}
    s = Settings(sweep=sw, server={})
    starts = {a.arm: a.seconds for a in plans(s, rates, "server")[1].arms}["process starts"]
    assert starts == pytest.approx(20 * 2.0)
    quiet = Components(between=0.001, within=0.01, processes=5, reps=20)
    iv = Interval(value=1.0, lo=0.99, hi=1.01, n=20)
    before = SweepPoint.model_construct(
        where="server", point="L4096_n256", components={"fake/genuine": quiet}, fake_vs_genuine_ci=iv,
        fake_vs_estimate_ci=None,
    )  # fmt: skip
    predicted = {a.arm: a.seconds for a in plans(s, rates, "server", previous=[before])[1].arms}
    assert predicted["process starts"] == pytest.approx(5 * 2.0)  # decided within its first five processes


def test_the_previous_runs_spread_is_pooled_over_the_grid() -> None:
    """A point's own spread, from its few processes, is noisy: the plan takes the medians over the grid's points
    in the place (a point with one rep per process, from its interval), each point's own distance from 1."""
    from lab.core.schemas import ArmStats, Components, Interval, SweepPoint
    from lab.core.stats import expansion
    from lab.experiments.sweep.planning import pooled_spread

    def point(L: int, where: str, between: float | None, within: float = 0.01) -> SweepPoint:
        comps = {"fake/genuine": Components(between=between, within=within, processes=5, reps=5)} if between else {}
        half = 0.0392 / 5**0.5 * expansion(5)  # a spread of 0.02 between processes, widened for five
        iv = Interval(value=1.0, lo=math.exp(-half), hi=math.exp(half), n=5, processes=5)
        return SweepPoint.model_validate(
            {"where": where, "point": f"L{L}", "L": L, "new": 64, "n_kv_padded": 512, "measurable": True,
             "baseline": ArmStats(), "fake": ArmStats(), "genuine": ArmStats(), "components": comps,
             "fake_vs_genuine_ci": iv}
        )  # fmt: skip

    previous = [point(512, "server", 0.01), point(1024, "server", 0.09), point(2048, "server", 0.03, 0.05),
                point(4096, "server", None), point(512, "inproc", 0.5)]  # fmt: skip
    c = pooled_spread(previous, "server", "fake/genuine")
    # between: 0.01, 0.09, 0.03 and 0.02 (the interval of the point without components): median 0.025
    assert c is not None and c.between == pytest.approx(0.025) and c.within == pytest.approx(0.01)
    assert pooled_spread(previous, "server", "fake/estimate") is None  # nothing measured: the default


def test_the_plan_takes_the_spread_of_the_newest_sweep_that_measured_its_place(tmp_path: Path) -> None:
    """A sweep through the server gives an in-process plan nothing: the plan takes the spread of the newest
    complete sweep of the model on the host that measured every place it will measure, and names it."""
    from lab.core.runs import RunFolder
    from lab.core.schemas import ArmStats, Components, Interval
    from lab.core.schemas.raw import SWEEP_POINTS
    from lab.core.schemas.sweep import SweepPoint
    from lab.experiments.sweep.planning import measured_before

    def run(started: str, places: tuple[str, ...], sha: str = "m1", host: str = "vm", engine: str = "c1") -> str:
        r = RunFolder.create(tmp_path, "sweep", host, {})
        r.update(started_utc=started, model={"sha256": sha}, engine={"source": {"commit": engine}})
        iv = Interval(value=1.0, lo=0.98, hi=1.02, n=5, processes=5)
        comps = {"fake/genuine": Components(between=0.02, within=0.01, processes=5, reps=5)}
        r.append(SWEEP_POINTS, [
            SweepPoint.model_validate(
                {"where": w, "point": "L512", "L": 512, "new": 64, "n_kv_padded": 512, "measurable": True,
                 "baseline": ArmStats(), "fake": ArmStats(), "genuine": ArmStats(), "components": comps,
                 "fake_vs_genuine_ci": iv}
            ) for w in places
        ])  # fmt: skip
        r.complete()
        return r.path.name

    both = run("2026-12-01T00:00:00Z", ("server", "inproc"))
    run("2026-12-02T00:00:00Z", ("server",))  # older than `newer`
    run("2026-12-03T00:00:00Z", ("inproc",), sha="m2")  # another model
    run("2026-12-04T00:00:00Z", ("inproc",), host="nuc16")  # another host
    newer = run("2026-12-05T00:00:00Z", ("server",), engine="c2")  # another engine: the host's noise all the same
    RunFolder.create(tmp_path, "sweep", "vm", {}).update(model={"sha256": "m1"})  # running: not complete
    for where, name in (("server", newer), ("inproc", both), ("both", both)):
        before = measured_before(tmp_path, "m1", "vm", where)  # type: ignore[arg-type]
        assert before.source == f"the spread of {name}", where
        assert {p.where for p in before.points} == ({"server", "inproc"} if where == "both" else {where})
    before = measured_before(tmp_path, "m3", "vm", "server")
    assert before.points == [] and before.source.startswith("the lab's default spread") and before.took == []


def test_a_point_measured_here_before_is_predicted_at_the_reps_it_took() -> None:
    """The newest sweep here is the better guess for the points it decided (the spread's arithmetic assumes an
    interval that narrows evenly); a point it did not measure takes the place's default spread."""
    from lab.core.schemas import ArmStats, Interval, SweepPoint
    from lab.core.settings import Settings
    from lab.experiments.sweep.planning import predicted_counts

    iv = Interval(value=1.0, lo=0.98, hi=1.02, n=37, processes=30)
    arms = {"baseline": ArmStats(), "fake": ArmStats(), "genuine": ArmStats()}
    before = SweepPoint(
        where="server",
        point="L512_n64",
        L=512,
        new=64,
        n_kv_padded=768,
        measurable=True,
        fake_vs_genuine_ci=iv,
        genuine_verdict="agree",
        reps=37,
        **arms,
    )
    s = Settings.model_validate({"sweep": {"Ls": [512, 1024], "news": [64]}})
    assert predicted_counts(s, "server", [before]) == [37, 33]
    assert predicted_counts(s, "server", [before.model_copy(update={"reps": 500})]) == [100, 33]  # max_reps
    # a point still open (the plan's revision reads the run's own points) has not taken what it needs yet
    still_open = before.model_copy(update={"genuine_verdict": "undecided", "reps": 5})
    assert predicted_counts(s, "server", [still_open])[0] > 5


def test_the_plan_after_the_first_processes_reads_their_paired_spread() -> None:
    """fake / genuine's rep-to-rep spread pooled over the grid, robust to the tail, says how many reps a point
    will take (REPS_PER_SPREAD); a place without pairs has no such plan."""
    import random

    from rich.console import Console

    from lab.core.schemas import SweepSample
    from lab.core.settings import Settings
    from lab.experiments.sweep.planning import (
        AFTER_TOOK,
        REPS_PER_SPREAD,
        paired_spread,
        plan_after,
        plans,
        reps_from_spread,
    )

    rng = random.Random(5)

    def sample(point: str, rep: int, arm: str, ms: float) -> SweepSample:
        return SweepSample(point=point, L=512, new=64, arm=arm, rep=rep, ok=True, prompt_ms=ms, t_utc="x")

    rows = []
    for i in range(400):
        ratio = math.exp(rng.gauss(0, 0.04)) * (8 if i % 25 == 0 else 1)  # one pair in 25 on the long tail
        rows += [sample(f"p{i % 8}", i, "genuine", 20.0), sample(f"p{i % 8}", i, "fake", 20.0 * ratio)]
    spread = paired_spread(rows)
    assert spread is not None and 0.035 < spread < 0.045  # the tail does not move it
    assert paired_spread(rows[:14]) is None  # fewer than 8 pairs
    settings = Settings()
    sw = settings.sweep
    assert reps_from_spread(settings, {"server": 0.04}) == {"server": round(REPS_PER_SPREAD["server"] * 0.04)}
    assert reps_from_spread(settings, {"server": 1e-6, "inproc": 9.0}) == {"server": sw.min_reps, "inproc": sw.max_reps}
    first = plans(settings, Rates(source="t", flat_ms_per_token=0.1, attn_ms_per_token_per_1k=0.01), "server")[1]
    after = plan_after(settings, first, {"server": rows}, [], Console(quiet=True))
    assert after is not None and set(after.reps_each) == {round(REPS_PER_SPREAD["server"] * spread)}
    assert after.took == AFTER_TOOK["server"]
    assert after.spread_source.startswith(f"the paired spread of its first {sw.processes} processes")
    assert after.total_s < first.total_s  # about 20 reps a point, not max_reps
    no_pairs = [r for r in rows if r.arm == "fake"]
    assert plan_after(settings, first, {"server": no_pairs}, [], Console(quiet=True)) is None


def test_a_run_is_held_to_the_first_prediction_it_said() -> None:
    from lab.experiments.sweep.planning import took_against_plan

    assert took_against_plan({"predicted_s": 10.0, "actual_s": 20.0}) == 2.0  # its plan as it started
    assert took_against_plan({"predicted_s": 10.0, "actual_s": 20.0, "said": False, "after_s": 40.0}) == 0.5
    assert took_against_plan({"predicted_s": 10.0, "actual_s": 20.0, "said": False, "after_s": None}) is None
    assert took_against_plan(["not", "a", "plan"]) is None
