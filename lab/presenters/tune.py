"""`lab trace tune`'s printers, from its stored rows (lab.core.schemas.TuneSetting): the settings it measured,
the predicted front and the recommendation as flags to paste."""

from __future__ import annotations

from rich.table import Table

from lab.core.console import key_columns
from lab.core.releases import server_label
from lab.core.schemas import cell
from lab.core.schemas.trace import EQUIVALENT, TuneSetting
from lab.core.stats import called
from lab.presenters.sweep import ms_interval


def _verdict(r: TuneSetting) -> str:
    if r.role == "defaults":
        return "-"
    return called(r.verdict, r.vs_defaults.value if r.vs_defaults else None)


def measured_table(rows: list[TuneSetting]) -> Table:
    t = key_columns(Table(title="llama-server cache settings measured: today's server replaying the conversation"), 1)
    columns = ("flags", "role", "predicted s", "peak MiB", "today s", "realised", "vs defaults", "verdict", "alike")
    for c in (*columns, "exact"):
        t.add_column(c, justify="left" if c in ("flags", "role", "verdict") else "right")
    for r in rows:
        if r.role == "grid":
            continue
        exact = "-" if r.measured_steps is None else f"{r.predicted_exact}/{r.measured_steps}"
        t.add_row(
            r.flags + (" *" if r.recommended else ""),
            r.role,
            f"{r.predicted_prefill_s:.2f}",
            f"{r.predicted_peak_mib:.1f}",
            cell(r.today_s, 2),
            cell(r.realised, share=True),
            cell(r.vs_defaults, share=True),
            _verdict(r),
            cell(r.vs_defaults_alike, share=True),
            exact,
        )
    t.caption = (
        "predicted: the policy model's prefill seconds (all tasks) and the most memory its caches hold "
        "(checkpoints, RAM cache, --swa-full's window cells); today s: measured prefill [95% interval over reps]; "
        "realised: the share of the optimum's saving (per arm, each step's median over reps, summed); vs defaults: the "
        "defaults' prefill minus its, paired by rep, as a share of the saving (same: within a point; better/worse: "
        "decided; undecided); alike: the part of it from the steps whose reuse is the same as the defaults' (the "
        "checkpoints' bookkeeping, and noise); exact: steps whose cache_n the model predicted; *: recommended"
    )
    return t


def front_table(rows: list[TuneSetting]) -> Table:
    t = Table(title="the predicted front: no other setting is both faster and lighter")
    for c in ("flags", "predicted s", "peak MiB", "reused cells", "fits --ram", "measured"):
        t.add_column(c, justify="left" if c == "flags" else "right")
    for r in sorted((r for r in rows if r.on_front), key=lambda r: r.predicted_prefill_s):
        fits = "yes" if r.within_budget else "no"
        t.add_row(
            r.flags,
            f"{r.predicted_prefill_s:.2f}",
            f"{r.predicted_peak_mib:.1f}",
            str(r.predicted_reused),
            fits,
            r.role if r.role != "grid" else "-",
        )
    return t


def tune_tables(rows: list[TuneSetting], wide: bool = False) -> list[Table]:
    """The front and the settings measured (`wide`: each with its flags and every column); by default the
    settings are numbered, their flags in a table of their own, and the measured ones' answer beside its check."""
    if wide:
        return [front_table(rows), measured_table(rows)]
    numbered = _numbered(rows)
    return [flags_table(numbered, rows), short_front_table(rows, numbered), short_measured_table(rows, numbered)]


def _numbered(rows: list[TuneSetting]) -> dict[str, int]:
    """Setting key -> its number: the front by predicted seconds, then the measured settings off it."""
    front = sorted((r for r in rows if r.on_front), key=lambda r: r.predicted_prefill_s)
    off = [r for r in rows if r.role != "grid" and not r.on_front]
    return {r.key: i for i, r in enumerate([*front, *off], start=1)}


def flags_table(numbered: dict[str, int], rows: list[TuneSetting] | None = None) -> Table:
    t = Table(title="the settings: llama-server cache flags (*: recommended)")
    t.add_column("#", justify="right")
    t.add_column("flags", justify="left")
    by_key = {r.key: r for r in rows or []}
    for key, i in numbered.items():
        r = by_key.get(key)
        t.add_row(str(i), r.flags + (" *" if r.recommended else "") if r else key)
    return t


def short_front_table(rows: list[TuneSetting], numbered: dict[str, int]) -> Table:
    t = Table(title="the predicted front: no other setting is both faster and lighter")
    for c in ("#", "predicted s", "peak MiB", "reused cells", "fits --ram", "measured"):
        t.add_column(c, justify="right")
    for r in sorted((r for r in rows if r.on_front), key=lambda r: r.predicted_prefill_s):
        t.add_row(
            str(numbered[r.key]),
            f"{r.predicted_prefill_s:.2f}",
            f"{r.predicted_peak_mib:.1f}",
            str(r.predicted_reused),
            "yes" if r.within_budget else "no",
            r.role if r.role != "grid" else "-",
        )
    return t


def short_measured_table(rows: list[TuneSetting], numbered: dict[str, int]) -> Table:
    t = key_columns(Table(title="the settings measured: today's server replaying the conversation [95% interval]"), 1)
    for c in ("#", "role", "today s", "realised", "vs defaults", "verdict"):
        t.add_column(c, justify="left" if c in ("role", "verdict") else "right")
    for r in rows:
        if r.role == "grid":
            continue
        t.add_row(
            str(numbered[r.key]) + (" *" if r.recommended else ""),
            r.role,
            ms_interval(r.today_s),
            cell(r.realised, share=True),
            cell(r.vs_defaults, share=True),
            _verdict(r),
        )
    t.caption = (
        "today s: measured prefill; realised: the share of the optimum's saving; vs defaults: the defaults' prefill "
        "minus its, paired by rep, as a share of the saving (same: within a point); *: recommended; --wide: the "
        "predictions, the part from steps whose reuse is alike, the steps predicted exactly"
    )
    return t


def recommendation(rows: list[TuneSetting]) -> str:
    """The recommendation for the server's version, and why the evidence makes it (tune.decide.recommend)."""
    best = next((r for r in rows if r.recommended), None)
    defaults = next((r for r in rows if r.role == "defaults"), None)
    if best is None or defaults is None:
        return "no recommendation: no setting was measured within --ram"
    head = f"for {server_label(best.server_version)}: llama-server ... {best.flags}"
    realised = f"realises {cell(best.realised, share=True)} of the saving"
    if best.recommended_as == "defaults":
        return f"{head}  (the defaults kept: {realised}; {_undecided(rows)})"
    versus = f"{cell(best.vs_defaults, share=True)} on the defaults' {cell(defaults.realised, share=True)}"
    split = (
        f"{cell(best.vs_defaults_differing, share=True)} on the {best.differing_steps} steps whose reuse differs, "
        f"{cell(best.vs_defaults_alike, share=True)} on the rest"
    )
    why = {
        "gain": "decided better",
        "less memory": f"the same within {EQUIVALENT:.0%} of the saving, {_lighter(best, defaults)}",
        "within budget": "the defaults exceed --ram; not decided worse",
    }[best.recommended_as or "gain"]
    return f"{head}  ({why}: {realised}, {versus}; {split}){_reasoning(best)}"


def _undecided(rows: list[TuneSetting]) -> str:
    """Why the defaults stay, and what would decide the candidate closest to a gain."""
    candidates = [r for r in rows if r.role == "candidate" and r.vs_defaults is not None]
    if not candidates:
        return "no candidate measured"
    closest = max(candidates, key=lambda r: r.vs_defaults.value if r.vs_defaults else 0.0)
    said = f"{closest.flags}: {cell(closest.vs_defaults, share=True)}, {_verdict(closest)}"
    if closest.verdict == "undecided" and closest.reps_to_decide:
        return (
            f"no candidate decided better or the same with less memory; the closest, {said}: about "
            f"{closest.reps_to_decide} reps would decide it (--reps)"
        )
    return f"no candidate decided better or the same with less memory; the closest, {said}"


def _lighter(best: TuneSetting, defaults: TuneSetting) -> str:
    """What memory the recommendation gives back, and where from."""
    freed = defaults.predicted_peak_mib - best.predicted_peak_mib
    parts = []
    if best.cache_ram_mib == 0 and defaults.cache_ram_mib != 0:
        size = "unlimited" if defaults.cache_ram_mib < 0 else f"{defaults.cache_ram_mib} MiB"
        parts.append(f"the RAM prompt cache ({size}) off")
    if best.checkpoints < defaults.checkpoints:
        parts.append(f"{best.checkpoints} context checkpoints instead of {defaults.checkpoints}")
    where = f": {', '.join(parts)}" if parts else ""
    return f"holding {freed:.1f} MiB less at most{where}"


def _reasoning(best: TuneSetting) -> str:
    if best.reasoning_preserve is not False:
        return ""
    return (
        "; --no-reasoning-preserve also changes what the model reads (earlier turns' reasoning dropped): the replay "
        "kept the recorded replies, so how the agent would answer then is not measured"
    )
