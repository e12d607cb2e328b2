"""The profile's plan (lab.measure.profileplan) on constructed rates: each part against its hand-computed cost,
the reps a budget affords, the reference host's log-spaced profile under an hour; and `lab profile --plan`
through the installed script, which measures nothing and creates no run folder."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from labcli import lab, one_line_error

from lab.core.settings_profile import ProfileSettings
from lab.measure.plan import Rates
from lab.measure.profileplan import (
    bench_fills_ms,
    bench_reps_ms,
    budget_reps,
    check_ms,
    probes_ms,
    profile_plan,
)

pytestmark = pytest.mark.fast

LAB = str(Path(sys.executable).parent / "lab")
REPO = Path(__file__).resolve().parent.parent
NUC16_FILE = REPO / "docs" / "examples" / "nuc16-holo3-rates.yaml"
NUC16 = Rates(flat_ms_per_token=9.52, attn_ms_per_token_per_1k=0.318)
# 10 ms/token flat, +1 ms per 1,000 of depth: a 100-token chunk at d costs 100 x (10 + (d + 50) / 1000) ms,
# 1005 at depth 0 and 1105 at 1000; a fill to 1000 costs 10 x 1000 + 1000^2 / 2000 = 10500
TEN = Rates(flat_ms_per_token=10.0, attn_ms_per_token_per_1k=1.0)
SMALL = {"chunk": 100, "depths": [0, 1000], "processes": 2, "reps": 3, "real_max_depth": 1000}


def test_each_part_costs_what_it_decodes() -> None:
    p = ProfileSettings(**SMALL)
    assert probes_ms(p, TEN, 3) == pytest.approx(1005 + 3 * 2 * (1005 + 1105))  # a warm-up, FUSED + TIMED per visit
    assert bench_fills_ms(p, TEN) == pytest.approx(1005 + (1005 + 10500))  # a warm-up per depth, no fill at 0
    assert bench_reps_ms(p, TEN, 3) == pytest.approx(3 * (1005 + 1105))
    assert check_ms(p, TEN, 3) == 0.0  # off
    checked = ProfileSettings(**SMALL, real_check=True)
    assert check_ms(checked, TEN, 3) == pytest.approx(10500 + 3 * 4 * (1005 + 1105))
    real = ProfileSettings(**SMALL, fill="real")  # a pass decodes [0, 1100): 11000 + 1100^2 / 2000
    assert probes_ms(real, TEN, 3) == pytest.approx(1005 + 3 * 2 * 11605)
    plan = profile_plan(p, TEN)
    parts = {a.arm: a.seconds for a in plan.parts}
    assert parts == pytest.approx({"probes": 27.33, "llama-bench fills": 25.02, "llama-bench reps": 12.66})
    assert plan.total_s == pytest.approx(65.01) and plan.bound_s is None


def test_the_deeper_probes_have_no_llama_bench_and_starts_count_only_when_known() -> None:
    p = ProfileSettings(**{**SMALL, "depths": [0, 1000, 4000], "real_max_depth": 2000})
    plan = profile_plan(p, TEN)
    assert p.bench_depths == [0, 1000] and plan.unreferenced == [4000]
    assert "process starts" not in {a.arm for a in plan.parts}
    started = profile_plan(p, TEN.model_copy(update={"process_start_s": 4.0}))
    starts = {a.arm: a.seconds for a in started.parts}["process starts"]
    assert starts == pytest.approx(2 * 4.0)  # a process and its llama-bench: a sweep process's two model loads
    alone = profile_plan(p.model_copy(update={"bench_check": False}), TEN)
    assert {a.arm for a in alone.parts} == {"probes"} and alone.unreferenced == [0, 1000, 4000]
    more = profile_plan(p.model_copy(update={"max_processes": 4}), TEN)
    assert more.bound_s == pytest.approx(2 * more.total_s)


def test_a_budget_affords_the_most_reps_that_fit() -> None:
    """A process costs 13.515 s plus 6.33 s a rep (its warm-up and llama-bench's fills, then per rep two probes and
    a llama-bench chunk at each depth): two processes fit 7 reps in 120 s, four (max_processes) 2."""
    p = ProfileSettings(**SMALL)
    assert budget_reps(p, TEN, 120.0) == 7
    assert profile_plan(p, TEN, 7).total_s <= 120.0 < profile_plan(p, TEN, 8).total_s
    assert budget_reps(p, TEN, 30.0) is None  # one rep takes 39.69 s
    assert budget_reps(p.model_copy(update={"max_processes": 4}), TEN, 120.0) == 2  # the most processes it may take


def test_the_reference_hosts_log_profile_fits_an_hour() -> None:
    """nuc16's rates, depths 0 to 256k: two reps fit an hour with llama-bench's fills to 4096 (the default); with
    fills to 16384 (about half of the hour) one rep does."""
    p = ProfileSettings(depths="log:262144")
    assert budget_reps(p, NUC16, 3600) == 2
    assert profile_plan(p, NUC16, 2).total_s / 60 == pytest.approx(56.3, abs=0.05)
    deep = p.model_copy(update={"real_max_depth": 16384})
    assert budget_reps(deep, NUC16, 3600) == 1
    assert profile_plan(deep, NUC16, 1).total_s / 60 == pytest.approx(58.1, abs=0.05)
    fills = {a.arm: a.seconds for a in profile_plan(deep, NUC16, 1).parts}["llama-bench fills"]
    assert fills / 60 == pytest.approx(32.4, abs=0.05)


def cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The installed `lab` in a bare directory: no params file, no engine on the path, its own cache."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAB_")}
    env.update(PATH="/usr/bin:/bin", COLUMNS="200", XDG_CACHE_HOME=str(tmp_path / "cache"))
    cmd = [LAB, "profile", "--plan", *args, "--runs-dir", str(tmp_path / "runs")]
    return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)


def total_of(out: str) -> str:
    m = re.search(r"total\W+(\d[\d.]* (?:s|min|h))", out)
    assert m, out
    return m.group(1)


def test_plan_through_the_cli_measures_nothing(tmp_path: Path) -> None:
    rates = tmp_path / "rates.yaml"
    rates.write_text("flat_ms_per_token: 10\nattn_ms_per_token_per_1k: 1\n")
    small = ("--chunk", "100", "--depths", "0,1000", "--processes", "2", "--reps", "3", "--real-max-depth", "1000")
    r = cli(tmp_path, "--rates", str(rates), *small)
    assert r.returncode == 0, r.stderr
    assert total_of(r.stdout) == "65 s", r.stdout
    assert "process starts and model loads are not in it" in r.stdout
    assert not (tmp_path / "runs").exists() and not (tmp_path / "cache" / "prefill-lab" / "engine").exists()


def test_the_nuc16_plan_through_the_cli(tmp_path: Path) -> None:
    r = cli(tmp_path, "--rates", str(NUC16_FILE), "--depths", "log:262144", "--budget", "1h")
    assert r.returncode == 0, r.stderr
    words = " ".join(r.stdout.split())
    assert "--budget 1h: --reps 2" in words and total_of(r.stdout) == "56.3 min", r.stdout
    assert "bench_depths 0, 1024, 2048, 4096 " in words
    assert "the probes at 8192, 16384, 32768, 65536, 131072, 262144 have no llama-bench reference" in words
    r = cli(tmp_path, "--rates", str(NUC16_FILE), "--depths", "log:262144", "--budget", "20m")
    assert r.returncode == 0 and "even --reps 1 takes about" in r.stdout, r.stdout + r.stderr
    assert not (tmp_path / "runs").exists()


def test_rates_without_a_plan_is_one_line(tmp_path: Path) -> None:
    r = lab("profile", "--rates", str(NUC16_FILE), "--runs-dir", str(tmp_path / "runs"), cwd=tmp_path)
    one_line_error(r, 2, "--rates is the plan's")
    assert not (tmp_path / "runs").exists()
