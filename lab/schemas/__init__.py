"""One schema per table, shared by every writer (experiments) and reader (catalog, reports, compare): the
shared pieces in `base`, then one module per experiment family. Import them from here."""

from lab.schemas.base import (
    BANDS,
    KV_PAD,
    ArmName,
    ArmStats,
    Band,
    Components,
    Interval,
    Verdict,
    Where,
    cell,
    ggml_pad,
)
from lab.schemas.decode import BenchDecode, DecodeDepth
from lab.schemas.profile import AttnKind, BandAt, BandCycle, BandDepth, ProfileSummary, ProfileWall
from lab.schemas.replay import ReplayCostRow, ReplayExactRow, ReplayRowWork, ReplaySpanRow
from lab.schemas.sweep import ArmsSummary, InprocFill, PrefillTps, SweepPoint, SweepRound, SweepSample
from lab.schemas.trace import (
    ChatMessage,
    ConversationArm,
    ConversationSample,
    ConversationStep,
    ConversationStepResult,
    ConversationTaskResult,
    TraceStep,
    TraceStepResult,
    TraceTaskResult,
)

__all__ = [
    "BANDS",
    "KV_PAD",
    "ArmName",
    "ArmStats",
    "ArmsSummary",
    "AttnKind",
    "Band",
    "BandAt",
    "BandCycle",
    "BandDepth",
    "BenchDecode",
    "ChatMessage",
    "Components",
    "ConversationArm",
    "ConversationSample",
    "ConversationStep",
    "ConversationStepResult",
    "ConversationTaskResult",
    "DecodeDepth",
    "InprocFill",
    "Interval",
    "PrefillTps",
    "ProfileSummary",
    "ProfileWall",
    "ReplayCostRow",
    "ReplayExactRow",
    "ReplayRowWork",
    "ReplaySpanRow",
    "SweepPoint",
    "SweepRound",
    "SweepSample",
    "TraceStep",
    "TraceStepResult",
    "TraceTaskResult",
    "Verdict",
    "Where",
    "cell",
    "ggml_pad",
]
