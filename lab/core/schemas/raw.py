"""Every table a run folder holds, declared once: its file under raw/ and its row schema. The experiments write
through these (lab.core.runs.RunFolder checks each row against the schema), and the catalog reads them."""

from __future__ import annotations

from typing import Any

from lab.core.rawtable import RawTable
from lab.core.schemas.decode import DecodeDepth
from lab.core.schemas.profile import BandAt, BandDepth, BandProcess, ProfileSummary, ProfileWall
from lab.core.schemas.rebuild import RebuildCostRow, RebuildExactRow, RebuildRowWork, RebuildSpanRow
from lab.core.schemas.sweep import (
    ArmsSummary,
    InprocFill,
    PrefillTps,
    ServerShare,
    SweepPoint,
    SweepRound,
    SweepSample,
)
from lab.core.schemas.trace import (
    ConversationCauseResult,
    ConversationSample,
    ConversationStepResult,
    ConversationTaskResult,
    TuneSetting,
)
from lab.core.schemas.versus import VersusPair, VersusRow

SWEEP_SAMPLES = RawTable("samples", SweepSample)
VERSUS_PAIRS = RawTable("pairs", VersusPair)
VERSUS_ROWS = RawTable("versus", VersusRow)
SWEEP_POINTS = RawTable("points", SweepPoint)
SWEEP_ROUNDS = RawTable("rounds", SweepRound)
SWEEP_FILLS = RawTable("fills", InprocFill)
PREFILL_TPS = RawTable("prefill_tps", PrefillTps)  # a sweep's estimate samples, a profile's llama-bench calls
ARMS_SUMMARY = RawTable("arms_summary", ArmsSummary, single=True)
SERVER_SHARE = RawTable("server_share", ServerShare, single=True)
CONVERSATION_SAMPLES = RawTable("conversation_samples", ConversationSample)
CONVERSATION_STEPS = RawTable("conversation_steps", ConversationStepResult)
CONVERSATION_TASKS = RawTable("conversation_tasks", ConversationTaskResult)
CONVERSATION_CAUSES = RawTable("conversation_causes", ConversationCauseResult)
TUNE_SETTINGS = RawTable("tune_settings", TuneSetting)
DECODE_DEPTHS = RawTable("decode_depths", DecodeDepth)
PROFILE_WALLS = RawTable("profile_walls", ProfileWall)
PROFILE_BANDS = RawTable("profile_bands", BandDepth)
PROFILE_BAND_PROCESSES = RawTable("profile_band_processes", BandProcess)
PROFILE_PREDICTED = RawTable("profile_predicted", BandAt)
PROFILE_SUMMARY = RawTable("profile_summary", ProfileSummary, single=True)
REBUILD_EXACT = RawTable("rebuild_exact", RebuildExactRow)
REBUILD_SPAN = RawTable("rebuild_span", RebuildSpanRow)
REBUILD_COST = RawTable("rebuild_cost", RebuildCostRow)
REBUILD_ROW_WORK = RawTable("rebuild_row_work", RebuildRowWork)

RAW_TABLES: dict[str, RawTable[Any]] = {
    t.name: t
    for t in (
        SWEEP_SAMPLES,
        SWEEP_POINTS,
        SWEEP_ROUNDS,
        SWEEP_FILLS,
        PREFILL_TPS,
        ARMS_SUMMARY,
        SERVER_SHARE,
        CONVERSATION_SAMPLES,
        CONVERSATION_STEPS,
        CONVERSATION_TASKS,
        CONVERSATION_CAUSES,
        TUNE_SETTINGS,
        DECODE_DEPTHS,
        PROFILE_WALLS,
        PROFILE_BANDS,
        PROFILE_BAND_PROCESSES,
        PROFILE_PREDICTED,
        PROFILE_SUMMARY,
        REBUILD_EXACT,
        REBUILD_SPAN,
        REBUILD_COST,
        REBUILD_ROW_WORK,
        VERSUS_PAIRS,
        VERSUS_ROWS,
    )
}
