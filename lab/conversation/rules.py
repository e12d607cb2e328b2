"""Where llama-server versions differ in how their prompt cache behaves (lab.conversation.policy applies them), one
entry per supported release, found by the llama.cpp commit in the server's `--version`:

    marks        how the server finds a request's user messages: `before_user`, the cells before the last one (the
                 pin: the template's message spans, byte offsets); `delimiters`, every user message's first cell,
                 found by matching the template's delimiter tokens in the prompt
    placement    before_user: a batch is cut at the last user message, a checkpoint is made at its start or near
                 the prompt's end, at least min-step after the last one. delimiters: a batch is also cut at a user
                 message min-step past the last checkpoint, and the last user message's and the near-end
                 checkpoints are made whatever their spacing
    thinning     when the list is full, other requests' checkpoints within min-step of an earlier kept one go
                 first (then the oldest), and a checkpoint at the same cells as an older one replaces it
    fit_next     a checkpoint is restored only when it ends at or before where the reuse resumes
    ram_keep_one the RAM cache keeps its newest prompt past its size limit; without it, a prompt larger than the
                 limit is not cached and older ones make room before one is added
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from lab.core import releases
from lab.core.errors import warn


@dataclass(frozen=True)
class Rules:
    series: str  # the llama.cpp commit whose server these are
    marks: Literal["before_user", "delimiters"]
    thinning: bool
    fit_next: bool
    ram_keep_one: bool


PIN = Rules("465b1f0e7", marks="before_user", thinning=False, fit_next=False, ram_keep_one=True)
LATEST = Rules("0c1e57098", marks="delimiters", thinning=True, fit_next=True, ram_keep_one=False)
RULES = (LATEST, PIN)  # newest first


def rules_for(version: str) -> Rules:
    """The rules of the server whose `--version` line this is: its release's series', else (a build the lab does
    not know) the newest release's, said in a line."""
    named = releases.named_by(version)
    found = next((r for r in RULES if named is not None and r.series == named.series), None)
    if found is None:
        warn(
            f"llama-server {version!r} is not a supported release: its prompt cache is modelled as {RULES[0].series}'s"
        )
        return RULES[0]
    return found
