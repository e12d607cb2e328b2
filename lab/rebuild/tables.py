"""The labs' printed tables, in the seed's exact layout (results/19_replay.txt and 20_replay_cost.txt)."""

from __future__ import annotations

from collections.abc import Sequence

from lab.rebuild.cost import EXAMPLES, MODES, RowWork, Work
from lab.rebuild.span import SpanVerdict
from lab.rebuild.toy import Comparison


def exact_table(rows: Sequence[Comparison]) -> str:
    lines = [f"{'KV source':<13}{'last row (full / suffix)':<26}next row (full / suffix)"]
    for c in rows:
        last = f"{c.last_full!s:>2} / {c.last_suffix}"
        lines.append(f"{c.kv_source:<16}{last:<25} {c.next_full!s:>2} / {c.next_suffix}")
    return "\n".join(lines)


def first_diff_line(c: Comparison) -> str:
    if c.first_diff is None:
        return f"{c.kv_source}: every retained cache entry matches"
    layer, pos = c.first_diff
    return f"{c.kv_source}: first differing cache entry is in layer {layer}, at zero-based position {pos}"


def span_table(verdicts: Sequence[SpanVerdict]) -> str:
    lines = [f"{'W':>2} {'D':>2} {'R':>3} {'cases':>6}  shared(W)  per-layer(R)  per-layer(R-1) fails  verdict"]
    for v in verdicts:
        lines.append(
            f"{v.window:>2} {v.depth:>2} {v.span:>3} {v.cases:>6}  {v.shared_window_exact:>9}  "
            f"{v.per_layer_span_exact:>12}  {v.shorter_fails:>20}  {'exact at R, not at R-1' if v.ok else 'FAILS'}"
        )
    lines.append(f"{sum(v.cases for v in verdicts):,} cases")
    return "\n".join(lines)


def cost_table(window: int, keep: int, work: dict[str, dict[str, Work]]) -> str:
    lines = [
        f"window={window}, keep={keep}; entries are consumer rows / SWA pairs",
        f"{'case':<15}{'off':<10}{'mask':<9}compact",
    ]
    for case in EXAMPLES:
        cells = [f"{work[case][m].rows}/{work[case][m].pairs:>2}" for m in MODES]
        lines.append(f"{case:<12}{cells[0]:>6}{cells[1]:>8}{cells[2]:>8}")
    return "\n".join(lines)


def row_work_table(rows: Sequence[RowWork], producer: int, consumer: int, keep: int) -> str:
    lines = [
        f"Equal layer costs, {producer} producer + {consumer} consumer layers, keep={keep}",
        "length    full row-work    compact row-work    ratio",
    ]
    lines += [f"{r.length:>6}{r.full:>17}{r.compact:>20}{r.ratio:>9.4f}" for r in rows]
    return "\n".join(lines)


def chunked_line(length: int, chunk: int, keep: int, per_chunk: Sequence[int], one_chunk: int) -> str:
    return (
        f"{length:,} positions in {len(per_chunk)} chunks of {chunk:,}, keep {keep}: compact consumer rows "
        f"{' + '.join(map(str, per_chunk))} = {sum(per_chunk)}; in one chunk: {one_chunk}"
    )
