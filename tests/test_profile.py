"""`lab profile` end to end on the tiny model, and the derived results on constructed inputs."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lab.core.runs import RunFolder
from lab.core.schemas import BANDS, BandDepth, Interval, PrefillTps, ProfileSummary, ProfileWall
from lab.core.schemas.raw import PREFILL_TPS, PROFILE_BANDS, PROFILE_PREDICTED, PROFILE_WALLS
from lab.core.stats import linear_fit
from lab.experiments.profile.bench import decide_references, undecided_references
from lab.experiments.profile.derive import summarize, too_wide
from lab.experiments.profile.run import NODES_PARQUET
from lab.measure.costmodel import model_cost
from lab.presenters.profile import reference_lines

pytestmark = pytest.mark.engine

LAB = str(Path(sys.executable).parent / "lab")
REPO = Path(__file__).resolve().parent.parent


def rows(per: dict[int, dict[str, float]]) -> list[BandDepth]:
    return [
        BandDepth(depth=d, band=b, timed_ms=v, share=0.0, fused_chunk_ms=0.0, ms_per_token=v)
        for d, bands in per.items()
        for b, v in bands.items()
    ]


def flat(attn: float) -> dict[str, float]:
    return {"ffn_moe": 4.0, "attn_core": attn, "proj": 0.6, "gdn": 3.4, "other": 0.2}


def test_crossover_is_interpolated_and_fit_is_exact_on_a_line() -> None:
    s = summarize(rows({0: flat(1.0), 1000: flat(3.0), 2000: flat(5.0)}))
    assert s.crossover_depth == pytest.approx(1500.0)  # 1 + 2*d/1000 = 4 at d = 1500
    assert s.attn_slope_ms_per_token_per_1k == pytest.approx(2.0) and s.attn_r2 == pytest.approx(1.0)
    assert s.flat_cv["ffn_moe"] == 0.0


def test_no_crossover_is_said_with_the_depth_reached() -> None:
    s = summarize(rows({0: flat(1.0), 512: flat(1.5)}))
    assert s.crossover_depth is None and s.crossover_note == "not reached by depth 512"


def test_linear_fit() -> None:
    a, b, r2 = linear_fit([0, 1, 2, 3], [1, 3, 5, 7])
    assert (a, b, r2) == pytest.approx((2.0, 1.0, 1.0))


def test_lab_profile_end_to_end(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    depths = [0, 128, 256, 384, 512]
    args = ["profile", "--chunk", "128", "--depths", "0,128,256,384,512", "--processes", "2", "--reps", "2"]
    args += ["--runs-dir", str(tmp_path), "--predict-depths", "4096,0"]
    r = subprocess.run([LAB, *args], capture_output=True, text=True, cwd=REPO, timeout=600)
    assert r.returncode == 0, r.stderr + r.stdout
    run = RunFolder.open(Path(r.stdout.strip().splitlines()[-1]))
    assert run.ready and run.manifest().experiment == "profile"
    # `lab show RUN`: the closing tables again, from what the run stored: what the run printed at its end
    shown = subprocess.run([LAB, "show", str(run.path), "--runs-dir", str(tmp_path)], capture_output=True, text=True)
    assert shown.returncode == 0 and "predicted ms per token by band" in shown.stdout, shown.stderr
    assert r.stdout.endswith(shown.stdout + str(run.path) + "\n")
    assert (run.path / "raw" / "profile_prefill.cpp").exists() and (run.path / "raw" / "instrument.json").exists()
    walls = run.read(PROFILE_WALLS)
    # every (mode, process, rep, depth) once, each chunk at its depth by a fake prefix
    assert Counter((w.mode, w.process, w.rep, w.depth) for w in walls) == {
        (m, k, rep, d): 1 for m in ("fused", "timed") for k in (0, 1) for rep in (0, 1) for d in depths
    }
    assert {w.fill for w in walls} == {"fake"} and not any(w.check for w in walls)
    # each rep is a round over every depth in an order of its own: its visits a permutation, the rounds differ
    orders = {
        (k, rep): [
            w.depth for w in sorted(walls, key=lambda w: w.visit) if (w.process, w.rep, w.mode) == (k, rep, "fused")
        ]
        for k in (0, 1)
        for rep in (0, 1)
    }
    assert all(sorted(o) == depths for o in orders.values()) and len({tuple(o) for o in orders.values()}) > 1
    # FUSED and TIMED back to back at each visit, which first alternating
    firsts = [walls[i].mode for i in range(0, len(walls), 2)]
    assert all(
        walls[i].depth == walls[i + 1].depth and walls[i].mode != walls[i + 1].mode for i in range(0, len(walls), 2)
    )
    assert Counter(firsts) == {"fused": len(firsts) // 2, "timed": len(firsts) // 2}
    table = pq.read_table(run.path / "raw" / NODES_PARQUET)
    assert set(table.column("band").to_pylist()) == {"ffn_moe", "attn_core", "proj", "gdn", "other"}
    assert None not in table.column("band").to_pylist()  # 100% coverage
    assert set(zip(table.column("process").to_pylist(), table.column("rep").to_pylist(), strict=True)) == {
        (k, rep) for k in (0, 1) for rep in (0, 1)
    }
    bands = run.read(PROFILE_BANDS)
    assert sorted({b.depth for b in bands}) == depths
    for d in depths:
        assert sum(b.share for b in bands if b.depth == d) == pytest.approx(1.0)
    summary = ProfileSummary.model_validate_json((run.path / "raw" / "profile_summary.json").read_text())
    assert summary.max_depth == 512 and summary.depths == depths and summary.fill == "fake"
    assert set(summary.timed_vs_fused_gap) == {str(d) for d in depths}
    assert summary.dump_json_bytes and summary.dump_parquet_bytes
    assert set(summary.fused_vs_bench) == {str(d) for d in depths}  # the llama-bench cross-check ran
    assert all(v > 0 and math.isfinite(v) for v in summary.fused_vs_bench.values())  # ratios live in benchmarks/
    # every per-depth number and the fit carry their interval over the 2 processes, and say so
    assert summary.reps == 2 and summary.processes == 2
    assert summary.attn_slope_ci is not None and summary.attn_slope_ci.processes == 2
    assert all(summary.timed_vs_fused_gap_ci[str(d)].n == 4 for d in depths)  # 2 pairs in each of 2 processes
    # llama-bench after each instrument process, as many reps; each reference has a verdict at every depth and
    # over all depths
    bench = run.read(PREFILL_TPS)
    assert Counter((b.process, b.depth, len(b.samples_ms)) for b in bench) == {
        (k, d, 2): 1 for k in (0, 1) for d in depths
    }
    assert summary.bench_depths == depths and all(summary.fused_vs_bench_ci[str(d)].processes == 2 for d in depths)
    assert set(summary.fused_vs_bench_verdict) == set(summary.timed_vs_fused_verdict) == {str(d) for d in depths}
    assert summary.timed_vs_fused_all is not None and summary.timed_vs_fused_all_verdict is not None
    assert summary.fused_vs_bench_all is not None and summary.fused_vs_bench_all_verdict is not None
    assert summary.bench_tolerance == 0.05 and summary.timed_tolerance == 0.03
    assert "FUSED / llama-bench at +-5%:" in r.stdout and "TIMED / FUSED at +-3%:" in r.stdout
    for d in depths:
        gap = summary.timed_vs_fused_gap_ci[str(d)]
        assert gap.lo <= gap.value <= gap.hi and gap.value - 1 == pytest.approx(summary.timed_vs_fused_gap[str(d)])
    slope = summary.attn_slope_ci
    assert slope is not None and slope.lo <= summary.attn_slope_ms_per_token_per_1k <= slope.hi
    assert all(b.ms_per_token_lo is not None and b.ms_per_token_lo <= b.ms_per_token <= (b.ms_per_token_hi or 0)
               for b in bands)  # fmt: skip
    assert "+-" in r.stdout and "R^2" in r.stdout
    # every band's slope against depth with its interval and R^2
    assert set(summary.band_slope_ci) == set(summary.band_r2_ci) == set(BANDS)
    assert summary.band_slope_ci["attn_core"].value == pytest.approx(summary.attn_slope_ms_per_token_per_1k)
    assert "ms/token per 1k depth by band: ffn_moe" in " ".join(r.stdout.split())
    # the cost model's predictions beside the measurement (lab.measure.costmodel on the same GGUF, chunk 128)
    model = model_cost(Path(run.manifest().model["path"]), 128)
    assert summary.cost_model.startswith("qwen35moe, F16, chunk 128")
    assert summary.predicted_crossover_depth == pytest.approx(model.crossover())
    assert summary.attn_flops_per_token_per_1k == pytest.approx(model.attn_flops_per_token_per_1k())
    assert summary.predicted_attn_slope_ms_per_token_per_1k and summary.attn_slope_vs_predicted_ci
    assert summary.attn_slope_vs_predicted_ci.value == pytest.approx(
        summary.attn_slope_ms_per_token_per_1k / summary.predicted_attn_slope_ms_per_token_per_1k
    )
    peak = summary.peak_gemm_gflops_ci
    assert peak and summary.peak_copy_gbps_ci and summary.peak_gemm_shape == [128, 256, 512]
    for b in bands:
        cost = model.bands(b.depth)[b.band]  # type: ignore[index]
        assert b.flops_per_token == pytest.approx(cost.flops / 128) and b.intensity == pytest.approx(cost.intensity)
        assert b.gflops == pytest.approx(cost.flops / 128 / b.ms_per_token / 1e6)
        assert b.gflops_lo is not None and b.gflops_lo <= b.gflops <= (b.gflops_hi or 0)
        assert b.peak_share == pytest.approx(b.gflops / peak.value)
    assert "achieved GFLOP/s by band" in r.stdout
    # a profile to 512 does not reach the crossover on the tiny model: said once, with the time prediction beside
    assert summary.crossover_depth is None and summary.crossover_note == "not reached by depth 512"
    assert summary.attn_kinds == [] and "by layer kind" not in r.stdout  # no window layers: one attention kind
    assert "crossover: measured not reached by depth 512; predicted in time" in r.stdout
    assert set(summary.band_gflops_ci) == set(BANDS) and summary.time_crossover_ci is not None
    # `lab model cost --rates RUN`: the same fit (same rows, same resamples) applied to the model at any depth
    c = subprocess.run(
        [
            LAB,
            "model",
            "cost",
            str(run.manifest().model["path"]),
            "--rates",
            run.path.name,
            "--runs-dir",
            str(tmp_path),
            "--depths",
            "0,4096",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert c.returncode == 0, c.stderr
    timed = json.loads(c.stdout)["time"]
    assert timed["fitted_depths"] == depths and timed["crossover"] == (
        summary.time_crossover_ci.model_dump() if summary.time_crossover_ci else None
    )
    at = {(x["depth"], x["band"]): x["ms_per_token"] for x in timed["at"]}
    assert set(at) == {(d, b) for d in (0, 4096) for b in (*BANDS, "total")}
    assert at[(4096, "attn_core")]["value"] > at[(0, "attn_core")]["value"]  # attention grows with depth
    # the FFN's FLOPs do not: the same estimate, its interval reaching to the rate's trend at 4096
    assert at[(4096, "ffn_moe")]["value"] == at[(0, "ffn_moe")]["value"]
    assert at[(4096, "ffn_moe")]["lo"] <= at[(0, "ffn_moe")]["lo"] <= at[(0, "ffn_moe")]["hi"]
    assert at[(0, "ffn_moe")]["hi"] <= at[(4096, "ffn_moe")]["hi"]
    # the profile stored and printed the same predictions from its own rates (profile_predicted), at the asked
    # depths beyond its deepest probe only (within them the measurement says it)
    stored = {(x.depth, x.band): x.ms_per_token.model_dump() for x in run.read(PROFILE_PREDICTED)}
    assert stored == {k: v for k, v in at.items() if k[0] == 4096} and "predicted ms per token by band" in r.stdout
    # `lab sweep --plan --rates RUN` plans from the same time model (measuring nothing)
    before = sorted(tmp_path.iterdir())
    p = subprocess.run(
        [LAB, "sweep", "--plan", "--rates", run.path.name, "--runs-dir", str(tmp_path), "--Ls", "512,4096"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    words = " ".join(p.stdout.split())  # the table's title wraps at the table's width
    assert p.returncode == 0 and f"time model of profile {run.path.name}" in words, p.stderr + p.stdout
    assert sorted(tmp_path.iterdir()) == before  # no run folder
    bad = subprocess.run(
        [LAB, "model", "cost", str(run.manifest().model["path"]), "--rates", "nope", "--runs-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and bad.stderr.strip().startswith("--rates nope: no unique run"), bad.stderr
    print(f"parquet is {summary.dump_json_bytes / summary.dump_parquet_bytes:.1f}x smaller than the JSON dump")
    assert summary.dump_json_bytes >= 5 * summary.dump_parquet_bytes


def test_sliding_window_attention_splits_into_full_and_window_layers(tmp_path: Path) -> None:
    """The tiny gpt-oss alternates window (128 keys) and full-attention layers: attn_core splits into the two,
    each kind's ms/token adds up to the band's, and each kind's slope is fitted where it should be flat or grow
    (a window layer's from the window on)."""
    args = ["profile", "--model", "tiny:gpt-oss", "--chunk", "64", "--depths", "0,64,128,192,256,320,384"]
    args += ["--processes", "2", "--reps", "1", "--no-bench"]
    r = subprocess.run(
        [LAB, *args, "--no-peaks", "--runs-dir", str(tmp_path)], capture_output=True, text=True, cwd=REPO, timeout=600
    )
    assert r.returncode == 0, r.stderr + r.stdout
    run = RunFolder.open(Path(r.stdout.strip().splitlines()[-1]))
    summary = ProfileSummary.model_validate_json((run.path / "raw" / "profile_summary.json").read_text())
    full, window = summary.attn_kinds
    assert (full.kind, full.window, full.fit_from) == ("full", None, 0)
    assert (window.kind, window.window, window.fit_from) == ("window", 128, 128)
    assert full.layers == window.layers >= 2  # alternating
    depths = [str(d) for d in range(0, 385, 64)]
    assert list(full.ms_per_token) == list(window.ms_per_token) == depths
    attn = {str(b.depth): b.ms_per_token for b in run.read(PROFILE_BANDS) if b.band == "attn_core"}
    for d in depths:  # every attn_core node sits in a layer of one kind or the other
        assert full.ms_per_token[d].value + window.ms_per_token[d].value == pytest.approx(attn[d], rel=1e-9)
        assert all(
            iv.lo <= iv.value <= iv.hi and iv.processes == 2 for iv in (full.ms_per_token[d], window.ms_per_token[d])
        )
    for k in (full, window):
        assert k.slope_ci is not None and k.slope_ci.lo <= k.slope_ci.value <= k.slope_ci.hi
    assert "attn_core by layer kind" in r.stdout and "window: " in r.stdout and "from depth 128" in r.stdout


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_interrupted_profile_resumes_keeping_complete_processes(tmp_path: Path, how: str, tiny_model: Path) -> None:
    depths = (0, 128, 256, 384)
    args = ["profile", "--chunk", "128", "--depths", "0,128,256,384", "--processes", "3", "--reps", "1"]
    proc = subprocess.Popen(
        [LAB, *args, "--no-threadpool", "--runs-dir", str(tmp_path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
    )  # fmt: skip
    run_dir = wait_for(lambda: next((p for p in tmp_path.iterdir() if p.is_dir()), None), proc)
    part = run_dir / "raw" / "profile.part.jsonl"
    # kill during process 1, once process 0 is complete
    wait_for(lambda: part.exists() and '"kind":"fused","process":1' in part.read_text(), proc)
    proc.send_signal(getattr(signal, how))
    proc.communicate(timeout=60)
    run = RunFolder.open(run_dir)
    assert not run.ready
    if how == "SIGTERM":
        assert run.manifest().status == "incomplete"
        assert not part.exists()  # merged into the run's dump
    time.sleep(0.5)
    assert not [p for p in Path("/proc").glob("[0-9]*/cmdline") if _is_instrument_of(p, run_dir)]  # no orphan
    # process 0 merged into the run's dump when it ended; a hard kill leaves process 1's rows in its part file
    dump = run_dir / "raw" / "profile.jsonl"
    before = dump.read_text() + (part.read_text() if part.exists() else "")
    process0 = [json.loads(x) for x in before.splitlines() if '"kind":"fused","process":0' in x]
    assert len(process0) == len(depths)

    r = subprocess.run([LAB, "profile", "--resume", run_dir.name, "--runs-dir", str(tmp_path)],
                       capture_output=True, text=True, cwd=REPO, timeout=600)  # fmt: skip
    assert r.returncode == 0, r.stderr + r.stdout
    assert "resuming: processes 0..0 are complete" in r.stdout
    run = RunFolder.open(run_dir)
    assert run.ready and len(run.manifest().resumed_utc) == 1
    walls = run.read(PROFILE_WALLS)
    assert Counter((w.mode, w.process, w.depth) for w in walls) == {
        (m, k, d): 1 for m in ("fused", "timed") for k in range(3) for d in depths
    }
    kept = {(w.depth, round(w.ms, 6)) for w in walls if w.mode == "fused" and w.process == 0}
    assert kept == {(r["depth"], round(r["ms"], 6)) for r in process0}  # process 0 kept, not remeasured
    # llama-bench once after each instrument process, the killed one's call never made twice
    bench = run.read(PREFILL_TPS)
    assert Counter((b.process, b.depth) for b in bench) == {(k, d): 1 for k in range(3) for d in depths}


def wait_for(cond: Callable[[], Any], proc: subprocess.Popen[str], timeout: float = 300) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        got = cond()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError("no progress")


def _is_instrument_of(cmdline: Path, run_dir: Path) -> bool:
    try:
        return str(run_dir).encode() in cmdline.read_bytes() and b"lab-profile-prefill" in cmdline.read_bytes()
    except OSError:
        return False


def test_more_processes_while_a_check_is_undecided(tmp_path: Path) -> None:
    """profile.max_processes: processes are added one at a time while a check is undecided (at a tolerance of
    0.01% nothing is decided on this host)."""
    base = [LAB, "profile", "--chunk", "128", "--depths", "0,256", "--processes", "2", "--max-processes", "3"]
    env = {
        **os.environ,
        "LAB_PROFILE__TIMED_TOLERANCE": "0.0001",
        "LAB_PROFILE__BENCH_CHECK": "false",
        "COLUMNS": "250",
    }
    r = subprocess.run([*base, "--reps", "1", "--runs-dir", str(tmp_path / "a")], capture_output=True, text=True,
                       cwd=REPO, timeout=600, env=env)  # fmt: skip
    assert r.returncode == 0, r.stderr + r.stdout
    run = RunFolder.open(Path(r.stdout.strip().splitlines()[-1]))
    assert {w.process for w in run.read(PROFILE_WALLS)} == {0, 1, 2} and "one more process" in r.stdout
    summary = ProfileSummary.model_validate_json((run.path / "raw" / "profile_summary.json").read_text())
    assert summary.processes == 3


def test_too_wide_names_what_calls_for_another_process() -> None:
    s = ProfileSummary(
        max_depth=0, crossover_depth=None, crossover_note="-", attn_slope_ms_per_token_per_1k=0.0,
        attn_intercept_ms_per_token=0.0, attn_r2=1.0, flat_cv={}, timed_vs_fused_gap={}, timed_vs_fused_gap_mean=0.0,
    )  # fmt: skip
    assert too_wide(s, 0.05) == ""  # no interval, nothing too wide
    s.crossover_ci = Interval(value=2000, lo=1000, hi=3000, n=3)
    assert "crossover" in too_wide(s, 0.05) and too_wide(s, 0.6) == ""


def test_references_are_decided_by_process_pair() -> None:
    """FUSED / llama-bench pairs each instrument process with the llama-bench process after it, its interval
    over those process pairs; a verdict for each reference at its tolerance, and what is still undecided named by
    depth."""
    s = ProfileSummary(
        max_depth=512, crossover_depth=None, crossover_note="-", attn_slope_ms_per_token_per_1k=0.0,
        attn_intercept_ms_per_token=0.0, attn_r2=1.0, flat_cv={}, timed_vs_fused_gap={}, timed_vs_fused_gap_mean=0.0,
    )  # fmt: skip
    noise = [1.0, 1.004, 0.996, 1.002, 0.998, 1.001, 0.999, 1.003, 0.997, 1.0]
    walls = [ProfileWall(mode="fused", fill="fake", process=k, rep=r, visit=0, depth=d, ms=ms * x * (1 + r / 1000))
             for k, x in enumerate(noise) for r in (0, 1) for d, ms in ((0, 100.0), (512, 130.0))]  # fmt: skip
    bench = [PrefillTps(depth=d, chunk=512, tps=1.0, avg_ms=ms, stddev_ms=0.0, reps=2, samples_ms=[ms * x, ms * x],
                        process=k)
             for k, x in enumerate(reversed(noise)) for d, ms in ((0, 100.0), (512, 110.0))]  # fmt: skip
    s.timed_vs_fused_gap_ci = {
        "0": Interval(value=1.01, lo=1.0, hi=1.02, n=10),
        "512": Interval(value=1.0, lo=0.9, hi=1.1, n=10),
    }
    decide_references(s, walls, bench, 0.05, 0.03)
    assert s.fused_vs_bench["0"] == pytest.approx(1.0, abs=0.002) and s.fused_vs_bench_ci["0"].processes == 10
    assert s.fused_vs_bench["512"] == pytest.approx(130 / 110, rel=0.002)
    assert s.fused_vs_bench_verdict == {"0": "agree", "512": "disagree"}
    assert s.timed_vs_fused_verdict == {"0": "agree", "512": "undecided"}
    # over both depths: per process pair the geometric mean of its depths' ratios
    assert s.fused_vs_bench_all is not None
    assert s.fused_vs_bench_all.value == pytest.approx(math.sqrt(130 / 110), rel=0.005)
    assert undecided_references(s) == "TIMED/FUSED is undecided at depth 512"
    assert reference_lines(s) == [
        "TIMED / FUSED at +-3%: 1 agree, 1 undecided of 2 depths",
        "FUSED / llama-bench at +-5%: 1 agree, 1 disagree of 2 depths; over all depths "
        f"{s.fused_vs_bench_all.fmt()} {s.fused_vs_bench_all_verdict}",
    ]


def test_fake_depth_is_checked_against_a_real_fill(tmp_path: Path) -> None:
    """profile.real_check: at each depth a real fill reaches, every rep times the chunk after a fake prefix and
    after the restored real fill, back to back; fake / real is decided per depth for the total and each band
    holding >= 5% of the time, and the check's chunks stay out of the profile's bands."""
    args = ["profile", "--chunk", "128", "--depths", "0,128,256", "--processes", "2", "--reps", "2", "--real-check"]
    args += ["--real-max-depth", "128", "--no-bench", "--no-peaks", "--runs-dir", str(tmp_path)]
    r = subprocess.run([LAB, *args], capture_output=True, text=True, cwd=REPO, timeout=600)
    assert r.returncode == 0, r.stderr + r.stdout
    run = RunFolder.open(Path(r.stdout.strip().splitlines()[-1]))
    walls = run.read(PROFILE_WALLS)
    checked = Counter((w.mode, w.fill, w.process, w.rep, w.depth) for w in walls if w.check)
    assert checked == {
        (m, f, k, rep, d): 1
        for m in ("fused", "timed") for f in ("fake", "real") for k in (0, 1) for rep in (0, 1) for d in (0, 128)
    }  # fmt: skip
    summary = ProfileSummary.model_validate_json((run.path / "raw" / "profile_summary.json").read_text())
    assert set(summary.fake_vs_real) == {"0", "128"} and summary.real_tolerance == 0.03
    for d, ivs in summary.fake_vs_real.items():
        assert set(ivs) == {"total", *BANDS} and all(iv.lo <= iv.value <= iv.hi and iv.n == 4 for iv in ivs.values())
        assert "total" in summary.fake_vs_real_verdict[d] and "ffn_moe" in summary.fake_vs_real_verdict[d]
    # a band with >= 5% of the time gets a verdict; attention at depth 0 holds about 2.5% (at 128 about 5%: either)
    assert "attn_core" not in summary.fake_vs_real_verdict["0"]
    # the profile itself rests on its own probes: 2 processes x 2 reps per depth
    assert all(iv.n == 4 for iv in summary.timed_vs_fused_gap_ci.values())
    assert "fake / real depth at +-3%" in r.stdout and "the chunk after a fake prefix over the same" in r.stdout
    # what the kernels see, compared before any time is spent: the hybrid's attention cache, at the checked depths
    assert summary.layout.startswith("hybrid (tiny-qwen35moe-") and "lays out as a restored hit" in summary.layout
    said = " ".join(r.stdout.split())  # the console wraps long lines
    assert "L in 0,128, chunks 128" in summary.layout and "what the kernels see: hybrid (tiny-qwen35moe-" in said


def test_a_sliding_window_real_check_splits_attn_core_by_kind(tmp_path: Path) -> None:
    """The tiny gpt-oss with --real-check: fake / real of attn_core in the full-attention and in the window layers
    apart, per depth and over all depths, beside the bands; the layout line names the iSWA family."""
    args = ["profile", "--model", "tiny:gpt-oss", "--chunk", "64", "--depths", "0,128,256", "--processes", "2"]
    args += ["--reps", "2", "--real-check", "--no-bench", "--no-peaks", "--runs-dir", str(tmp_path)]
    r = subprocess.run([LAB, *args], capture_output=True, text=True, cwd=REPO, timeout=600)
    assert r.returncode == 0, r.stderr + r.stdout
    run = RunFolder.open(Path(r.stdout.strip().splitlines()[-1]))
    summary = ProfileSummary.model_validate_json((run.path / "raw" / "profile_summary.json").read_text())
    for ivs in summary.fake_vs_real.values():
        assert {"attn_core full", "attn_core window"} <= set(ivs)
        assert all(iv.lo <= iv.value <= iv.hi for iv in ivs.values())
    assert {"total", "attn_core full", "attn_core window"} <= set(summary.fake_vs_real_all)
    assert summary.layout.startswith("iSWA (tiny-gpt-oss-") and "lays out as a restored hit" in summary.layout
    assert "attn_core window" in r.stdout and "attn_core full" in r.stdout


@pytest.mark.parametrize(
    ("depths", "says"),
    [
        ("0,512,512", "invalid settings: profile.depths: Value error, lists depth 512 twice"),
        ("0,-512", "invalid settings: profile.depths: Value error, a depth is >= 0, not -512"),
        ("0,300000", "profile.depths: depth 300000 and a chunk of 512 pass tiny-qwen35moe-"),
    ],
)
def test_bad_depths_are_one_line_and_create_nothing(tmp_path: Path, depths: str, says: str) -> None:
    r = subprocess.run(
        [LAB, "profile", f"--depths={depths}", "--runs-dir", str(tmp_path / "runs")],
        capture_output=True, text=True, cwd=REPO, timeout=120,
    )  # fmt: skip
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert r.stderr.startswith(says) and not (tmp_path / "runs").exists()


def test_a_profile_written_before_the_fake_prefix_still_reads() -> None:
    """A wall row of the cumulative design (a `cycle`, no fill, rep or visit) reads as what it was: a real fill."""
    w = ProfileWall.model_validate({"mode": "fused", "cycle": 2, "depth": 512, "ms": 1.0, "process": 2})
    assert (w.fill, w.check, w.process, w.rep, w.visit) == ("real", False, 2, 0, 0)
