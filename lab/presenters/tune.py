"""`lab trace tune`'s printers, from its stored rows (lab.core.schemas.TuneSetting): the settings it measured,
the predicted front and the recommendation as flags to paste."""

from __future__ import annotations

from rich.table import Table

from lab.core.console import key_columns
from lab.core.releases import server_label
from lab.core.schemas import cell
from lab.core.schemas.trace import EQUIVALENT, TuneSetting
from lab.core.stats import called


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


def tune_tables(rows: list[TuneSetting]) -> list[Table]:
    return [front_table(rows), measured_table(rows)]


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
