"""The interleaved run's design without an engine: the second configuration (`--vs`), the process pairs' order, the
interval paired by process pair, and the refusals a user meets before anything is created."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from labcli import lab

from lab.core.errors import UsageError
from lab.core.settings import Settings
from lab.core.stats import paired_processes, unpaired
from lab.experiments.versus.config import pair_order, paired_design, parse_vs, side_b

pytestmark = pytest.mark.fast


def test_side_b_sets_what_a_user_compares_and_nothing_else(settings: Settings) -> None:
    vs = parse_vs(["engine=latest", "server.extra_args=--no-warmup -fit off", "threads=1", "server.flash_attn=off"])
    assert vs == {
        "engine.sdist_version": "latest",
        "server.extra_args": "--no-warmup -fit off",
        "server.threads": "1",
        "server.flash_attn": "off",
    }
    b = side_b(settings, vs, "sweep")
    assert b.server.extra_args == ["--no-warmup", "-fit", "off"] and b.server.threads == 1
    assert b.server.flash_attn == "off" and b.engine.sdist_version != settings.engine.sdist_version
    assert b.sweep == settings.sweep and settings.server.extra_args == []  # A untouched
    assert side_b(settings, parse_vs(["same"]), "sweep") == settings
    assert side_b(settings, {"model": "/models/x.gguf"}, "decode").model == Path("/models/x.gguf")
    assert side_b(settings, {"profile.threads": "1"}, "profile").profile.threads == 1
    kv = side_b(settings, parse_vs(["server.cache_type_k=q8_0", "server.cache_type_v=q8_0"]), "profile").server
    assert kv.kv_args == ["-ctk", "q8_0", "-ctv", "q8_0"] and settings.server.kv_args == []


@pytest.mark.parametrize(
    ("items", "experiment", "says"),
    [
        (["sweep.Ls=512"], "sweep", "both sides measure the same grid"),
        (["profile.threads=1"], "sweep", "both sides measure the same grid"),
        (["server.thread=1"], "sweep", "did you mean server.threads?"),
        (["server.threads=zero"], "sweep", "--vs server: threads"),
        (["server.extra_args=--port 9"], "sweep", "--port"),
        (["server.extra_args=-ctk q8_0"], "sweep", "use server.cache_type_k"),
        (["server.cache_type_k=q9"], "sweep", "cache_type_k"),
        (["threads"], "sweep", "give KEY=VALUE"),
        (["threads=1", "server.threads=2"], "sweep", "given twice"),
    ],
)
def test_a_bad_second_configuration_is_refused_by_name(
    settings: Settings, items: list[str], experiment: str, says: str
) -> None:
    with pytest.raises(UsageError, match=None) as e:
        side_b(settings, parse_vs(items), experiment)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_both_sides_get_the_same_reps_and_cycles(settings: Settings) -> None:
    s = settings.model_copy(
        update={
            "sweep": settings.sweep.model_copy(update={"min_reps": 4, "max_reps": 60}),
            "profile": settings.profile.model_copy(update={"max_processes": 9}),
        }
    )
    d = paired_design(s)
    assert (d.sweep.reps, d.sweep.min_reps, d.sweep.max_reps, d.profile.max_processes) == (4, 4, 4, None)


def test_process_pairs_alternate_in_balanced_random_twos() -> None:
    orders = [pair_order(k, seed=7) for k in range(40)]
    assert orders == [pair_order(k, seed=7) for k in range(40)]  # a resumed run goes on with the same order
    for k in range(0, 40, 2):
        assert orders[k] == orders[k + 1][::-1] and set(orders[k]) == {"a", "b"}
    firsts = [o[0] for o in orders[::2]]
    assert 5 <= firsts.count("a") <= 15  # random, neither side always first
    assert [pair_order(k, seed=8) for k in range(40)] != orders


def pair_samples(rng: np.random.Generator, drift: np.ndarray, reps: int, noise: float) -> dict[tuple[int, int], float]:
    return {(s, r): 100 * d * math.exp(rng.normal(0, noise)) for s, d in enumerate(drift) for r in range(reps)}


def test_the_paired_interval_holds_on_a_drifting_host_and_is_narrower() -> None:
    # the host's level moves from one process pair to the next by 10% (minutes apart), a rep by 1%: both sides of
    # a pair share its level, so B/A paired by process pair holds at ~95% and is far narrower than the unpaired one
    trials, missed, ratio_width = 200, 0, []
    for t in range(trials):
        rng = np.random.default_rng(t)
        drift = np.exp(rng.normal(0, 0.10, 5))
        a, b = pair_samples(rng, drift, 2, 0.01), pair_samples(rng, drift, 2, 0.01)
        iv, draws = paired_processes(b, a, str(t))
        assert iv is not None and draws is not None and iv.processes == 5 and iv.n == 10
        missed += not (iv.lo <= 1 <= iv.hi)
        keys = sorted(a)
        un, _ = unpaired([b[k] for k in keys], [a[k] for k in keys], str(t), [k[0] for k in keys], [k[0] for k in keys])
        assert un is not None
        ratio_width.append((iv.hi - iv.lo) / (un.hi - un.lo))
    assert missed / trials <= 0.07, missed / trials
    assert float(np.median(ratio_width)) < 0.35
    # and it keeps its power: 5% slower in every process pair is called at (nearly) every trial
    called = 0
    for t in range(30):
        rng = np.random.default_rng(1000 + t)
        drift = np.exp(rng.normal(0, 0.10, 5))
        a, b = pair_samples(rng, drift, 2, 0.01), pair_samples(rng, drift, 2, 0.01)
        iv, _ = paired_processes({k: 1.05 * v for k, v in b.items()}, a, str(t))
        called += iv is not None and iv.lo > 1
    assert called >= 28


def test_paired_processes_use_only_what_both_sides_have() -> None:
    a = {(0, 0): 10.0, (0, 1): 11.0, (1, 0): 10.0, (2, 0): 12.0}
    b = {(0, 0): 20.0, (0, 1): 22.0, (1, 0): 20.0}
    iv, _ = paired_processes(b, a, "k")
    assert iv is not None and iv.value == pytest.approx(2.0) and iv.n == 3 and iv.processes == 2
    assert paired_processes({}, a) == (None, None)
    assert paired_processes({(0, 0): 1.0}, {(0, 0): 0.0}) == (None, None)


def test_a_bad_vs_creates_nothing(tmp_path: Path) -> None:
    r = lab("sweep", "--vs", "sweep.Ls=64", "--runs-dir", str(tmp_path / "runs"))
    assert r.returncode == 2 and "--vs sweep.Ls" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


@pytest.mark.parametrize("command", [["sweep"], ["profile"]])
def test_a_bad_vs_is_refused_by_the_plan_too(tmp_path: Path, command: list[str]) -> None:
    # the example `--help` once gave: a flag the lab sets, refused in one line before any plan or folder
    r = lab(*command, "--plan", "--vs", "server.extra_args=-ctk q8_0", "--runs-dir", str(tmp_path / "runs"))
    assert r.returncode == 2 and "use server.cache_type_k" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert "plan" not in r.stdout and not (tmp_path / "runs").exists()


def test_the_vs_help_example_is_accepted() -> None:
    from lab.core.settings import Settings
    from lab.experiments.versus import parse_vs
    from lab.experiments.versus.config import side_b

    b = side_b(Settings(), parse_vs(["server.cache_type_k=q8_0", "server.extra_args=--no-mmap"]), "sweep")
    assert b.server.cache_type_k == "q8_0" and b.server.extra_args == ["--no-mmap"]


def test_a_ratio_of_two_arms_is_called_lower_or_higher_and_a_time_faster_or_slower() -> None:
    from lab.catalog.compare import CompareRow
    from lab.core.schemas import Interval

    up, down = Interval(value=1.2, lo=1.1, hi=1.3, n=10, processes=5), Interval(value=0.8, lo=0.7, hi=0.9, n=10)
    assert CompareRow((), "fake_median_ms", 1.0, 1.2, up).called(0.03) == "slower"
    assert CompareRow((), "fake_median_ms", 1.0, 0.8, down).called(0.03) == "faster"
    assert CompareRow((), "fake_vs_genuine_ci_value", 1.0, 1.2, up, of_ratio=True).called(0.03) == "higher"
    assert CompareRow((), "fake_vs_genuine_ci_value", 1.0, 0.8, down, of_ratio=True).called(0.03) == "lower"
    same = Interval(value=1.0, lo=0.99, hi=1.01, n=10, processes=5)
    assert CompareRow((), "fake_vs_genuine_ci_value", 1.0, 1.0, same, of_ratio=True).called(0.03) == "same"
