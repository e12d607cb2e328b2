"""One verdict vocabulary and one colour per verdict, for the terminal, the compare heatmap and every chart.

A check against its tolerance (lab.core.stats.verdict): `agree` (its interval inside 1 +- tolerance), `disagree`
(wholly outside), `undecided` (across a bound). B against A at a tolerance (lab.catalog.compare.CompareRow.called):
`same` (inside), `faster` / `slower` (wholly outside, for a time), `lower` / `higher` (for a ratio of two arms,
where neither is better), `undecided`. Each word has one colour wherever it is drawn or printed."""

from __future__ import annotations

VERDICTS = ("agree", "disagree", "undecided")
CALLS = ("faster", "slower", "lower", "higher", "same", "undecided")

COLOR = {
    "agree": "#4d9221",
    "same": "#4d9221",
    "disagree": "#b2182b",
    "slower": "#b2182b",
    "faster": "#2166ac",
    "lower": "#b8860b",
    "higher": "#b8860b",
    "undecided": "#8a94a3",
}


def styled(word: str, text: str | None = None) -> str:
    """`text` (the word itself by default) in its verdict's colour, as rich markup."""
    return f"[{COLOR[word]}]{word if text is None else text}[/]"
