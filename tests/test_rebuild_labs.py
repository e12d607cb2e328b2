"""The rebuild labs: every printed number of the two reference tables is recomputed here and compared with
what the seed printed (results/19_replay.txt and results/20_replay_cost.txt, quoted below)."""

from __future__ import annotations

import json
import sys
from fractions import Fraction
from pathlib import Path

import pytest
from labcli import lab

from lab.core.runs import RunFolder
from lab.core.schemas.raw import REBUILD_COST, REBUILD_EXACT, REBUILD_ROW_WORK, REBUILD_SPAN
from lab.rebuild import cost, span, tables, toy

pytestmark = pytest.mark.fast

LAB = str(Path(sys.executable).parent / "lab")
REPO = Path(__file__).resolve().parent.parent

SEED_19 = """\
KV source    last row (full / suffix)  next row (full / suffix)
shared          22 / 22                   25 / 25
per-layer       28 / 57/2                 32 / 193/6"""

SEED_20_EXAMPLES = """\
window=3, keep=4; entries are consumer rows / SWA pairs
case           off       mask     compact
short         2/ 3    2/ 3    2/ 3
long         12/33   12/ 9    4/ 9
clipped       4/ 9    4/ 0    1/ 0
crossing      4/12    4/ 3    2/ 3
valid-start   2/ 3    2/ 3    2/ 3"""

SEED_20_ROW_WORK = """\
Equal layer costs, 20 producer + 20 consumer layers, keep=140
length    full row-work    compact row-work    ratio
    64             2560                2560   1.0000
  1024            40960               23280   0.5684
 16384           655360              330480   0.5043"""


def seed_lab_19() -> list[toy.Comparison]:
    return [toy.compare(toy.integers(8), 2, 3, 3, Fraction(9), shared) for shared in (True, False)]


def test_exact_lab_prints_the_seed_table() -> None:
    assert tables.exact_table(seed_lab_19()) == SEED_19


def test_exact_lab_values_and_first_difference() -> None:
    shared, per_layer = seed_lab_19()
    assert (shared.last_full, shared.last_suffix, shared.next_full, shared.next_suffix) == (22, 22, 25, 25)
    assert (per_layer.last_full, per_layer.last_suffix) == (28, Fraction(57, 2))
    assert (per_layer.next_full, per_layer.next_suffix) == (32, Fraction(193, 6))
    assert shared.first_diff is None and shared.exact
    assert per_layer.first_diff == (2, 5) and not per_layer.exact


def test_exact_lab_layer_one_walkthrough() -> None:
    # exact: layer 1 full outputs at the positions of 6, 7, 8 are 11, 13, 15; the rebuild from 6 gives 12, 27/2, 15
    full = toy.prefill(toy.integers(8), 1, 3, shared=False)
    rebuild = toy.prefill(toy.integers(8)[-3:], 1, 3, shared=False)
    assert full.hidden[-3:] == [11, 13, 15]
    assert rebuild.hidden == [12, Fraction(27, 2), 15]
    # the shared version's last row: 8 + 7 + 7
    assert toy.prefill(toy.integers(8), 2, 3, shared=True).hidden[-1] == 8 + 7 + 7


def test_rebuilding_the_span_is_exact_for_per_layer_kv() -> None:
    # rebuild span: prefilling inputs 4 through 8 again (R = 5 positions) restores retained KV and the final output
    assert span.span(3, 2) == 5
    c = toy.compare(toy.integers(8), 2, 3, 5, Fraction(9), shared=False)
    assert c.exact and c.first_diff is None


def test_span_formula() -> None:
    assert span.span(128, 20) == 2541  # vs the conservative product 20 x 128 = 2560
    assert [span.span(w, 1) for w in (2, 3, 4)] == [2, 3, 4]


def test_span_exhaustive_check_matches_the_seed() -> None:
    verdicts = span.check_all([2, 3, 4], [1, 2, 3])
    assert sum(v.cases for v in verdicts) == 5456
    for v in verdicts:
        assert v.cases == 2 ** (v.span + 2)
        assert v.shared_window_exact == v.cases and v.per_layer_span_exact == v.cases
        assert v.shorter_fails > 0 and v.ok, v  # R - 1 fails for at least one input at every (W, D)
        bits = [Fraction(b) for b in v.counterexample]  # and the counterexample really fails, in Fractions
        full = toy.prefill(bits, v.depth, v.window, shared=False)
        part = toy.prefill(bits[-(v.span - 1) :], v.depth, v.window, shared=False)
        x = Fraction(2)
        assert (full.hidden[-1], toy.decode(full.caches, x, v.window, False)) != (
            part.hidden[-1],
            toy.decode(part.caches, x, v.window, False),
        )


def test_scaled_integers_agree_with_fractions() -> None:
    fast = span.check_all([2, 3], [1, 2, 3], exact_type="int")
    slow = span.check_all([2, 3], [1, 2, 3], exact_type="fraction")
    assert fast == slow


def test_inexact_integer_mean_is_refused() -> None:
    with pytest.raises(ArithmeticError):
        toy.prefill([1, 2], 1, 2, shared=True)  # (1 + 2) / 2 is not an integer: not scaled


def test_cost_examples_print_the_seed_table() -> None:
    work = {c: {m: cost.consumer_work(ch, 3, 4, m) for m in cost.MODES} for c, ch in cost.EXAMPLES.items()}
    assert tables.cost_table(3, 4, work) == SEED_20_EXAMPLES
    for c, ch in cost.EXAMPLES.items():
        for m in cost.MODES:
            assert work[c][m] == cost.reference_work(ch, 3, 4, m)
    assert work["long"]["off"].pairs == 1 + 2 + 10 * 3 and work["long"]["mask"].pairs == 1 + 2 + 3 + 3


def test_prefix_sum() -> None:
    for w in range(1, 6):
        for n in range(0, 20):
            assert cost.prefix_pairs(n, w) == sum(min(i + 1, w) for i in range(n))


def test_formulas_agree_with_enumeration_on_the_grid() -> None:
    result = cost.check_formulas()
    assert result.cases >= 8910 and result.mismatches == []


def test_the_reference_catches_a_formula_without_the_placeholder() -> None:
    def no_placeholder(c: cost.Chunk, w: int, k: int, mode: cost.Mode) -> cost.Work:
        got = cost.consumer_work(c, w, k, mode)
        return cost.Work(0, 0) if mode == "compact" and c.end <= c.length - k else got

    bad = [
        (ch, w, k, m)
        for ch, w, k, m in cost.grid_cases()
        if no_placeholder(ch, w, k, m) != cost.reference_work(ch, w, k, m)
    ]
    assert bad  # the check is not vacuous


def test_row_work_table_and_ratios() -> None:
    rows = [cost.row_work(n, 20, 20, 140) for n in (64, 1024, 16384)]
    assert tables.row_work_table(rows, 20, 20, 140) == SEED_20_ROW_WORK
    assert [round(r.ratio, 4) for r in rows] == [1.0, 0.5684, 0.5043]


def test_chunked_prompt_executes_placeholders() -> None:
    per_chunk = cost.chunked_consumer_rows(1024, 256, 140)
    assert per_chunk == [1, 1, 1, 140] and sum(per_chunk) == 143
    assert cost.chunked_consumer_rows(1024, 1024, 140) == [140]


def test_cli_runs_land_in_run_folders(tmp_path: Path) -> None:
    r = lab("rebuild", "exact", "--runs-dir", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert SEED_19 in r.stdout
    run = RunFolder.open(Path(r.stdout.strip().splitlines()[-1]))
    assert run.ready and run.manifest().experiment == "rebuild_exact"
    rows = run.read(REBUILD_EXACT)
    assert [(x.kv_source, x.last_suffix, x.next_suffix, x.first_diff_pos) for x in rows] == [
        ("shared", "22", "25", None),
        ("per-layer", "57/2", "193/6", 5),
    ]
    assert SEED_19 in (run.path / "raw" / "tables.txt").read_text()
    assert (run.path / "git" / "commit.txt").exists() and (run.path / "host").is_dir()

    r = lab("rebuild", "cost", "--json", "--runs-dir", str(tmp_path))
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["ok"] and doc["summary"]["formula_cases"] >= 8910 and doc["summary"]["chunked"]["total"] == 143
    run = RunFolder.open(Path(doc["run"]))
    assert len(run.read(REBUILD_COST)) == 15
    assert [w.compact for w in run.read(REBUILD_ROW_WORK)] == [2560, 23280, 330480]

    r = lab("rebuild", "span", "--windows", "2,3", "--depths", "1,2", "--runs-dir", str(tmp_path))
    assert r.returncode == 0, r.stderr
    run = RunFolder.open(Path(r.stdout.strip().splitlines()[-1]))
    assert [(x.window, x.depth, x.ok) for x in run.read(REBUILD_SPAN)] == [
        (2, 1, True), (2, 2, True), (3, 1, True), (3, 2, True),
    ]  # fmt: skip


def test_cli_bad_options_leave_no_run_folder(tmp_path: Path) -> None:
    r = lab("rebuild", "exact", "--keep", "9", "--runs-dir", str(tmp_path))
    assert r.returncode == 2 and "keep" in r.stderr
    r = lab("rebuild", "span", "--windows", "0", "--runs-dir", str(tmp_path))
    assert r.returncode == 2 and "positive" in r.stderr
    assert not tmp_path.exists() or not any(tmp_path.iterdir())
