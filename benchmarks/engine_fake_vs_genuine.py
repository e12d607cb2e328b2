"""Engine benchmark: fake prefix vs genuine cache hit vs baseline, measured side by side in one run.

For L x new on the tiny model (or --model): baseline (L+new, nothing cached), fake (n_fake_cached = L)
and genuine hit (L prefilled for real with cache_prompt, then L+new), interleaved in rotating order,
median of --reps. Prints the ratios fake/baseline and fake/genuine (goal: fake/genuine 1.00 +- 0.05),
and the fabrication cost in ns per fake position (goal <= 50 ns).

    .venv/bin/python benchmarks/engine_fake_vs_genuine.py [--reps 5] [--Ls 512,2048,6000] [--news 64,256]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

from lab.core.schemas import Interval
from lab.core.settings import load_settings
from lab.core.settings_server import ServerSettings
from lab.core.stats import median_interval, paired_ratio
from lab.engine.build import build_engine
from lab.engine.contract import ARMS, ContractClient, filler_tokens, text_step
from lab.engine.server import LlamaServer
from lab.models.resolve import resolve_model


def ints(s: str) -> list[int]:
    return [int(x) for x in s.split(",") if x]


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--Ls", type=ints, default=[512, 2048, 6000])
    ap.add_argument("--news", type=ints, default=[64, 256])
    ap.add_argument("--fab-Ls", type=ints, default=[2048, 16384, 40960])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--model", type=Path, default=None)
    return ap.parse_args()


def main() -> int:
    args = parse_args()
    settings = load_settings(model=args.model)
    engine = build_engine(settings.engine, settings.cache_dir, flavor="release")
    model = resolve_model(settings)
    ctx = max(max(args.Ls) + max(args.news), max(args.fab_Ls) + 16) + 512
    srv_settings = ServerSettings(threads=args.threads, ctx_size=ctx)
    console = Console()
    console.print(f"engine {engine.source.commit} patch {engine.patch_sha256[:12]}  model {model.name}  ctx {ctx}")

    log = Path(tempfile.mkdtemp(prefix="bench-")) / "server.log"
    failures: list[str] = []
    with LlamaServer(engine, model, srv_settings, log) as srv:
        client, n_vocab = ContractClient(srv), srv.n_vocab()
        table = arms_table(client, n_vocab, args, failures)
        fab = fabrication_table(srv, client, n_vocab, args, failures)

    console.print(table)
    console.print(fab)
    for msg in failures:
        console.print(f"[red]failed sample[/red] {msg}")
    return 1 if failures else 0


def arms_table(client: ContractClient, n_vocab: int, args: argparse.Namespace, failures: list[str]) -> Table:
    """Each (L, new): the three arms interleaved in rotating order, their medians and paired ratios."""
    table = Table(title=f"fake vs genuine vs baseline: median prompt_ms of {args.reps}; paired ratios [95% interval]")
    for col in ("L", "new", "baseline ms", "fake ms", "genuine ms", "fake/baseline", "fake/genuine"):
        table.add_column(col, justify="right")
    for L in args.Ls:
        prefix = filler_tokens(L, seed=L, n_vocab=n_vocab)
        for new in args.news:
            step = text_step(prefix, filler_tokens(new, seed=L + new + 1, n_vocab=n_vocab))
            ms: dict[str, dict[int, float]] = {a: {} for a in ARMS}
            for rep in range(args.reps):
                order = ARMS[rep % 3 :] + ARMS[: rep % 3]  # rotate so no arm always runs first
                for arm in order:
                    r = client.run_arm(arm, step)
                    if not r.ok or r.timings is None:
                        failures.append(f"L={L} new={new} {arm}: {r.kind}: {r.reason}")
                        continue
                    ms[arm][rep] = r.timings.prompt_ms
            med = {a: median_interval(list(v.values()), key=f"L{L}n{new}/{a}") for a, v in ms.items()}
            vs_base = paired_ratio(ms["fake"], ms["baseline"], key=f"L{L}n{new}/base")
            vs_gen = paired_ratio(ms["fake"], ms["genuine"], key=f"L{L}n{new}/gen")
            table.add_row(
                str(L), str(new),
                _ms(med["baseline"]), _ms(med["fake"]), _ms(med["genuine"]),
                _ratio(vs_base), _ratio(vs_gen),
            )  # fmt: skip
    return table


def fabrication_table(
    srv: LlamaServer, client: ContractClient, n_vocab: int, args: argparse.Namespace, failures: list[str]
) -> Table:
    """The fake prefix's fabrication cost at each --fab-Ls depth: into a fresh slot, and after a prefill there."""
    fab = Table(title="fabrication cost inside prompt_ms (fake_ms, median [95% interval]; goal <= 50 ns/position)")
    for col in ("L", "fresh slot ms", "ns/pos", "after prefill ms", "ns/pos"):
        fab.add_column(col, justify="right")
    for L in args.fab_Ls:
        tokens = filler_tokens(L + 16, seed=7, n_vocab=n_vocab)
        fresh: list[float] = []
        reshaped: list[float] = []
        for _ in range(args.reps):
            # fresh: the slot holds 8 tokens -> L positions are built from scratch (tree inserts)
            srv.completion({"prompt": tokens[:8], "n_predict": 1, "cache_prompt": False})
            fresh.append(_fake_ms(client, tokens, L, failures))
            # after a prefill at this depth (how a sweep interleaves arms): the cells are reshaped in place
            srv.completion({"prompt": tokens, "n_predict": 1, "cache_prompt": False})
            reshaped.append(_fake_ms(client, tokens, L, failures))
        fm, rm = median_interval(fresh, f"fresh{L}"), median_interval(reshaped, f"reshaped{L}")

        def per_pos(iv: Interval | None, L: int = L) -> str:  # ns per fabricated position
            return "-" if iv is None else f"{iv.value * 1e6 / L:.1f} [{iv.lo * 1e6 / L:.1f}-{iv.hi * 1e6 / L:.1f}]"

        fab.add_row(str(L), _ms3(fm), per_pos(fm), _ms3(rm), per_pos(rm))
    return fab


def _ms3(iv: Interval | None) -> str:
    return "-" if iv is None else f"{iv.value:.3f} [{iv.lo:.3f}-{iv.hi:.3f}]"


def _ms(iv: Interval | None) -> str:
    return "-" if iv is None else f"{iv.value:.1f} [{iv.lo:.1f}-{iv.hi:.1f}]"


def _ratio(r: Interval | None) -> str:
    return "-" if r is None else r.fmt()


def _fake_ms(client: ContractClient, tokens: list[int], L: int, failures: list[str]) -> float:
    r = client.run_arm("fake", text_step(tokens[:L], tokens[L:]))
    if not r.ok or r.timings is None:
        failures.append(f"fabrication L={L}: {r.kind}: {r.reason}")
        return float("nan")
    return r.timings.fake_ms


if __name__ == "__main__":
    sys.exit(main())
