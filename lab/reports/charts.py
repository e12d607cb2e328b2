"""The report's charts, by name: each builder takes the catalog, the runs table and the report settings."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd

from lab.core.settings import ReportSettings
from lab.reports.agreement import agreement_chart
from lab.reports.arms import arms_chart
from lab.reports.bands import bands_chart
from lab.reports.conversation import conversation_chart
from lab.reports.rebuild import rebuild_chart
from lab.reports.roofline import roofline_chart
from lab.reports.style import Chart
from lab.reports.tune import tune_chart
from lab.reports.versus import versus_chart

Builder = Callable[[Path, pd.DataFrame, ReportSettings], Chart]

CHARTS: dict[str, tuple[str, Builder]] = {
    "agreement": (
        "Fake-prefix prefill vs the estimate new / prefill_tps(L), with the genuine-hit and baseline controls",
        agreement_chart,
    ),
    "bands": (
        "Per-token prefill time by band vs depth, the attn_core/ffn_moe crossover measured and predicted from FLOPs, "
        "TIMED vs FUSED and llama-bench",
        bands_chart,
    ),
    "roofline": (
        "Each band's achieved GFLOP/s vs its predicted arithmetic intensity, under this host's GEMM and memcpy roofs",
        roofline_chart,
    ),
    "arms": (
        "The sweep in one process (no server): baseline, genuine hit, fake prefix vs L, and the genuine hit's "
        "cache read against memcpy",
        arms_chart,
    ),
    "conversation": (
        "An agent conversation step by step: prefill of no cache, today's server and the optimum, with evictions and "
        "checkpoint restores",
        conversation_chart,
    ),
    "tune": (
        "llama-server cache settings for a recorded conversation: every setting predicted (prefill against memory), "
        "the front, the defaults and the candidates measured, the recommendation",
        tune_chart,
    ),
    "versus": (
        "Two configurations measured interleaved in one run (--vs): B / A per point with its interval paired by "
        "process pair, called faster, slower, the same or undecided",
        versus_chart,
    ),
    "rebuild": (
        "Rebuild labs: exact rebuild, rebuild span, consumer rows / SWA pairs and row-work",
        rebuild_chart,
    ),
}
