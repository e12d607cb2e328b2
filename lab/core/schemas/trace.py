"""The trace replay's rows: a trace's steps, and per step and task what the replay measured."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from lab.core.errors import validation_line
from lab.core.schemas.base import Interval, Verdict


class TraceStep(BaseModel):
    """One recorded agent step (a line of a trace JSONL). Give the prior depth either as `L` or as
    `depth` + `only_new` (then L = depth - only_new)."""

    task_id: str
    step: int = Field(ge=0)
    L: int | None = Field(default=None, ge=0, description="prior KV cells (tokens) treated as cached")
    depth: int | None = Field(default=None, ge=1, description="context length after this step's new tokens")
    only_new: int | None = Field(default=None, ge=1, description="tokens this step appends")
    new_text: str = Field(min_length=1)
    screenshot: str | None = Field(default=None, description="path of the step's new screenshot (PNG)")
    baseline_prefill_s: float | None = Field(default=None, ge=0)
    baseline_decode_s: float | None = Field(default=None, ge=0)
    baseline_exec_s: float | None = Field(default=None, ge=0)

    def prior_depth(self) -> int:
        if self.L is not None and self.depth is None:
            return self.L
        if self.L is None and self.depth is not None and self.only_new is not None:
            if self.only_new > self.depth:
                raise ValueError(f"only_new ({self.only_new}) > depth ({self.depth})")
            return self.depth - self.only_new
        raise ValueError("give either L, or depth and only_new")


class ChatMessage(BaseModel):
    """One message of a chat-completions request, as far as the lab reads it (other keys are kept as sent)."""

    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None


class ConversationStep(BaseModel):
    """One exchange of a recorded conversation (a line of a conversation trace): the OpenAI chat-completions
    request an agent sent and the reply it got. Its tokens, prior depth and divergence are derived by replay
    through the model's own chat template and tokenizer."""

    task_id: str
    step: int = Field(ge=0)
    request: dict[str, Any] = Field(
        description="the chat-completions body as sent: `messages` (images as data URLs, or file paths relative to "
        "the trace) and any other parameters"
    )
    reply: dict[str, Any] | None = Field(
        default=None, description="the assistant message it got back (role, content, tool_calls)"
    )
    prompt_tokens: int | None = Field(default=None, ge=0, description="the upstream's usage.prompt_tokens")
    completion_tokens: int | None = Field(
        default=None, ge=0, description="the reply's length in tokens (usage.completion_tokens): the decode length"
    )
    started_utc: str | None = Field(default=None, description="when the agent sent the request")
    elapsed_s: float | None = Field(default=None, ge=0, description="request sent to the reply's last byte")
    tool_s: float | None = Field(
        default=None, ge=0, description="the agent's own time after the reply until its next request (tools)"
    )

    @field_validator("request")
    @classmethod
    def _chat_request(cls, v: dict[str, Any]) -> dict[str, Any]:
        messages = v.get("messages")
        if not isinstance(messages, list) or not messages:
            raise ValueError("a chat-completions request needs a non-empty `messages` list")
        for i, m in enumerate(messages):
            try:
                ChatMessage.model_validate(m)
            except ValidationError as e:
                raise ValueError(f"messages[{i}]: {validation_line(e, root='message', limit=1)}") from e
        return v

    def messages(self) -> list[ChatMessage]:
        return [ChatMessage.model_validate(m) for m in self.request["messages"]]


class StepToolTime(BaseModel):
    """A conversation trace's second kind of line: a step's tool time, known only when the task's next request
    arrives, so the recorder appends it then, after the step it belongs to (the step itself is on disk as soon as
    its reply is)."""

    model_config = ConfigDict(extra="forbid")

    task_id: str
    step: int = Field(ge=0)
    tool_s: float = Field(ge=0, description="the agent's own time after the step's reply until its next request")


ConversationArm = Literal["today", "optimum", "no_cache"]


class ConversationSample(BaseModel):
    """raw/conversation_samples.jsonl: one arm of one conversation step in one rep."""

    task_id: str
    step: int
    rep: int
    arm: ConversationArm
    ok: bool
    reason: str = ""
    prompt_ms: float | None = None
    prompt_n: int | None = Field(default=None, description="tokens the server prefilled")
    cache_n: int | None = Field(default=None, description="tokens it reused (today) or fabricated (optimum)")
    checkpoint_restore: bool = Field(default=False, description="today: the server restored a context checkpoint")
    ram_cache_restore: bool = Field(default=False, description="today: the server loaded a prompt from its RAM cache")
    full_reprocess: bool = Field(
        default=False, description="today: the server re-processed the whole prompt, its cache lacking the data"
    )
    setting: str = Field(default="", description="today: its cache setting's key (lab trace tune); '' the replay's")
    ram_cache_mib: float | None = Field(
        default=None, description="today: the RAM prompt cache's size after the step's request, as its log reports"
    )
    checkpoint_mib: float | None = Field(
        default=None, description="today: the size of a context checkpoint the step made, as its log reports"
    )
    n_out: int | None = Field(default=None, description="optimum: tokens generated after the prompt (the reply's)")
    decode_ms: float | None = Field(default=None, description="optimum: ms per generated token at depth L + new")
    process: int = Field(default=0, description="the rep's server processes (each rep its own; 0 before)")
    t_utc: str


class ConversationStepResult(BaseModel):
    """raw/conversation_steps.jsonl: a step's shape in tokens and each arm's median prompt ms [95% interval]."""

    task_id: str
    step: int
    prompt_cells: int
    common: int = Field(description="cells shared with the previous prompt and reply: the optimum's prior depth")
    new: int
    diverged_at: int | None = Field(default=None, description="the first changed message (an eviction), or None")
    cause: str | None = Field(default=None, description="why it departs (lab.conversation.causes), or None")
    reply_tokens: int
    images: int
    today_ms: Interval | None = None
    optimum_ms: Interval | None = None
    no_cache_ms: Interval | None = None
    today_cache_n: int | None = Field(default=None, description="what today's server reused (the first rep's)")
    predicted_cache_n: int | None = Field(
        default=None, description="what the model of today's cache policy predicts it reuses (lab.conversation.policy)"
    )
    predicted_source: str | None = Field(
        default=None, description="where the prediction reuses from: slot, checkpoint, ram or none"
    )
    predicted_exact: int | None = Field(default=None, description="today's reps whose cache_n the model predicted")
    ram_cache_mib: float | None = Field(default=None, description="today's RAM cache as its log reports (first rep)")
    predicted_ram_cache_mib: float | None = None
    checkpoint_mib: float | None = Field(default=None, description="a checkpoint the step made, as logged")
    predicted_checkpoint_mib: float | None = None
    predicted_held_mib: float | None = Field(
        default=None, description="the model's checkpoint and RAM-cache bytes held after the step (MiB)"
    )
    decode_ms_per_token: Interval | None = Field(
        default=None, description="the reply decoded at depth L + new after the optimum's prefill, per token"
    )
    tool_s: float | None = Field(default=None, description="the agent's own time after the reply (recorded)")
    checkpoint_restores: int = 0
    ram_cache_restores: int = 0
    full_reprocesses: int = Field(default=0, description="today: reps whose server re-processed the whole prompt")
    window_departure: bool | None = Field(
        default=None,
        description="sliding-window models: the step departs beyond what today's window cache keeps (the stock "
        "server then needs a context checkpoint or re-processes the whole prompt); None without a window",
    )
    order: Literal["holds", "violated", "-"] = Field(
        default="-", description="optimum <= today <= no cache within the intervals"
    )
    prompt_n: int | None = Field(default=None, description="the optimum's prefilled tokens (the first rep's)")
    cache_n: int | None = Field(default=None, description="the optimum's fabricated cells (the first rep's)")
    # a trace of step shapes: what it recorded of the step
    trace_only_new: int | None = Field(default=None, description="the trace's own count of the new tokens")
    baseline_prefill_s: float | None = Field(default=None, description="the trace's recorded prefill seconds")
    baseline_decode_s: float | None = Field(default=None, description="the trace's recorded decode seconds")
    baseline_exec_s: float | None = Field(default=None, description="the trace's recorded tool seconds")
    screenshot: str | None = Field(default=None, description="the step's screenshot, as the trace names it")


class ConversationTaskResult(BaseModel):
    """raw/conversation_tasks.jsonl: a task's prefill time in each arm (the sum over its steps, per rep) and the
    share of the optimum's saving that today's server realises ((no cache - today) / (no cache - optimum),
    paired by rep), each with its 95% interval."""

    task_id: str
    n_steps: int
    today_s: Interval | None = None
    optimum_s: Interval | None = None
    no_cache_s: Interval | None = None
    realised: Interval | None = None
    decode_s: Interval | None = Field(default=None, description="the replies decoded at their depths, in all")
    tool_s: float | None = Field(default=None, description="the agent's recorded tool time, in all")
    # a trace of step shapes: its recorded seconds in all, and the task's wall time with a perfect prefix cache
    baseline_prefill_s: float | None = None
    baseline_decode_s: float | None = None
    baseline_exec_s: float | None = None
    opt_wall_s: Interval | None = Field(default=None, description="optimum prefill + recorded decode + exec")


class ConversationCauseResult(BaseModel):
    """raw/conversation_causes.jsonl: the steps that departed for one cause (lab.conversation.causes) and what they
    cost in each arm, summed over those steps per rep, each with its 95% interval."""

    cause: str
    departures: int = Field(description="steps that departed for it")
    today_s: Interval | None = None
    optimum_s: Interval | None = None
    no_cache_s: Interval | None = None
    today_extra_s: Interval | None = Field(
        default=None, description="today's prefill beyond the optimum's on those steps, paired by rep"
    )


EQUIVALENT = 0.01  # `lab trace tune`: realised shares within a point of the defaults' agree (TuneSetting.verdict)
RecommendedAs = Literal["gain", "less memory", "defaults", "within budget"]


class TuneSetting(BaseModel):
    """raw/tune_settings.jsonl: one llama-server cache setting of `lab trace tune`: what the policy model predicts
    for the conversation (every setting on the grid) and, for the defaults and the candidates, what the three-arm
    replay measured."""

    key: str = Field(description="the setting's name in the run (today's samples carry it)")
    flags: str = Field(description="the llama-server flags, as pasted into its command")
    server_version: str = Field(
        default="", description="today's server's --version line: the llama.cpp the flags are for"
    )
    checkpoints: int
    checkpoint_min_step: int
    cache_ram_mib: int
    swa_full: bool = False
    reasoning_preserve: bool | None = Field(
        default=None, description="--reasoning-preserve on or off (None: a server without the flag)"
    )
    role: Literal["defaults", "candidate", "grid"] = Field(description="what the run did with it")
    on_front: bool = Field(description="not beaten by another setting in both predicted prefill and memory")
    predicted_prefill_s: float = Field(description="the conversation's prefill seconds the model predicts (all tasks)")
    predicted_peak_mib: float = Field(
        description="the most memory it predicts the caches hold (checkpoints, RAM cache, --swa-full)"
    )
    predicted_reused: int = Field(description="cells the model predicts reused over the conversation")
    within_budget: bool = Field(description="its predicted peak memory fits --ram")
    predicted_exact: int | None = Field(default=None, description="measured steps whose cache_n it predicted")
    measured_steps: int | None = None
    today_s: Interval | None = Field(default=None, description="today's prefill seconds, all tasks, over reps")
    realised: Interval | None = Field(
        default=None,
        description="the share of the optimum's saving it realises: per arm each step's median over reps, summed",
    )
    vs_defaults: Interval | None = Field(
        default=None,
        description="the defaults' prefill minus its, as a share of the saving: each step's median over reps of "
        "the paired difference, summed",
    )
    differing_steps: int | None = Field(
        default=None, description="steps whose measured reuse differs from the defaults'"
    )
    vs_defaults_differing: Interval | None = Field(
        default=None, description="vs_defaults over the steps whose reuse differs: what the setting changes"
    )
    vs_defaults_alike: Interval | None = Field(
        default=None,
        description="vs_defaults over the steps whose reuse is alike: the checkpoints' bookkeeping (and noise)",
    )
    verdict: Verdict | None = Field(
        default=None, description="vs the defaults: agree (within a point), disagree or undecided"
    )
    reps_to_decide: int | None = Field(
        default=None, description="about how many reps would decide vs_defaults when undecided"
    )
    recommended: bool = False
    recommended_as: RecommendedAs | None = Field(
        default=None,
        description="why it is the recommendation: a decided gain on the defaults; decided the same, holding less "
        "memory; the defaults kept (no candidate decided either); the defaults exceed --ram and it fits",
    )
