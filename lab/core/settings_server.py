"""The server sections of the lab's settings: how the lab's own llama-server is started for measurements
(`server`), and how today's server of a conversation replay is configured, the way users run it
(`conversation`), and the recorder between an agent and its upstream (`record`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from lab.core.errors import UsageError
from lab.core.units import parse_size


class Section(BaseModel):
    """A settings section: a key it does not have is refused, not ignored (a typo must not change nothing)."""

    model_config = ConfigDict(extra="forbid")


KvType = Literal["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"]  # llama-server's -ctk/-ctv

# llama-server flags the lab sets itself and its measurements rely on (every alias): extra_args may not
# override them
LAB_SERVER_FLAGS = {
    "--host",
    "--port",
    "--reuse-port",
    "--parallel",
    "-np",
    "--ctx-checkpoints",
    "--swa-checkpoints",
    "-ctxcp",
    "--checkpoint-min-step",
    "-cms",
    "--cache-ram",
    "-cram",
    "--cache-reuse",
    "--no-cache-prompt",
    "--cache-prompt",
    "--slot-save-path",
    "--context-shift",
    "--no-context-shift",
    "--kv-unified",
    "--no-kv-unified",
    "-kvu",
    "-no-kvu",
    "--ctx-size",
    "-c",
    "--model",
    "-m",
    "--threads",
    "-t",
    "--threads-batch",
    "-tb",
    "--ubatch-size",
    "-ub",
    "--batch-size",
    "-b",
    "--log-verbosity",
    "--verbosity",
    "-lv",
    "--cache-type-k",
    "-ctk",
    "--cache-type-v",
    "-ctv",
}


# llama-server flags that write to a path the lab does not control (a log, a lookup cache, a model downloaded into
# a cache, the slots saved on request): refused in extra_args wherever they come from (params.yaml, a LAB_*
# variable, --vs, or the manifest of a run resumed here, which a host wrote). The server's log is the run folder's
# logs/, written by the lab; its slot-save directory is the run's (lab.experiments.sweep.run).
WRITES_A_PATH = {
    "--log-file",
    "--slot-save-path",
    "-lcd",
    "--lookup-cache-dynamic",
    "-mu",
    "--model-url",
    "-hf",
    "-hfr",
    "--hf-repo",
    "-hff",
    "--hf-file",
    "-hfd",
    "-hfrd",
    "--hf-repo-draft",
    "-hfv",
    "-hfrv",
    "--hf-repo-v",
    "-hffv",
    "--hf-file-v",
    "-dr",
    "--docker-repo",
    "-mmu",
    "--mmproj-url",
}


SETTING_OF = {  # the setting of a flag a user reaches for in extra_args, where it has one the tools share
    "-ctk": "server.cache_type_k",
    "--cache-type-k": "server.cache_type_k",
    "-ctv": "server.cache_type_v",
    "--cache-type-v": "server.cache_type_v",
}


def refuse_lab_flags(args: list[str]) -> list[str]:
    for arg in args:
        flag = arg.split("=", 1)[0]
        if flag in SETTING_OF:
            raise ValueError(
                f"{flag} is set by the lab for the server and its own tools alike: use {SETTING_OF[flag]}, not "
                "extra_args"
            )
        if flag in WRITES_A_PATH:
            raise ValueError(
                f"{flag} writes to a path the lab does not control (a log, a cache, a download): not in extra_args "
                "(the server's log is the run folder's logs/)"
            )
        if flag in LAB_SERVER_FLAGS:
            raise ValueError(
                f"{flag} is set by the lab (where it listens, one slot, the cache and checkpoints a timing "
                "relies on): use the server.* or conversation.* setting for it, not extra_args"
            )
    return args


class ServerSettings(Section):
    """How the patched llama-server is started for measurements."""

    # all cores but one: on a 2-core VM one thread gave fake/genuine intervals 1.6x narrower per rep than two
    # and decided twice the points per minute (docs/sweep-cost.md, the noise floor): the client, the other
    # process and the kernel need a core
    threads: int = Field(default=max(1, (os.cpu_count() or 1) - 1), ge=1)
    threads_batch: int | None = Field(default=None, ge=1)
    ctx_size: int = Field(default=16384, ge=256)
    batch_size: int = Field(default=2048, ge=1)
    ubatch_size: int = Field(default=512, ge=1)
    checkpoints: int = Field(default=0, ge=0, description="--ctx-checkpoints (0: off, fair timing)")
    checkpoint_min_step: int = Field(default=256, ge=0, description="--checkpoint-min-step (tokens between two)")
    cache_ram_mib: int = Field(default=0, ge=-1, description="--cache-ram (0: RAM prompt cache off, -1: no limit)")
    cache_reuse: int = Field(default=0, ge=0, description="--cache-reuse (0: off; chunks reused by KV shifting)")
    flash_attn: Literal["on", "off", "auto"] = "auto"
    cache_type_k: KvType = Field(
        default="f16",
        description="-ctk: the K cache's type (the server, the in-process driver, the instrument, llama-bench)",
    )
    cache_type_v: KvType = Field(default="f16", description="-ctv: the V cache's type (as cache_type_k)")
    cpu_list: str | None = Field(
        default=None, description="pin the server, llama-bench and the instrument to these CPUs, e.g. 0-7"
    )
    startup_timeout_s: float = Field(default=120.0, gt=0)
    swa_full: bool = Field(
        default=False,
        description="--swa-full: a sliding-window model's window cache as large as the context (also as extra_args)",
    )
    extra_args: list[str] = Field(default_factory=list, description="more llama-server flags (not the lab's own)")

    @field_validator("extra_args")
    @classmethod
    def _not_the_labs_flags(cls, v: list[str]) -> list[str]:
        return refuse_lab_flags(v)

    def with_overrides(self, **overrides: Any) -> ServerSettings:
        """These settings with some replaced; `extra_args` come after the user's server.extra_args, never
        instead (today's server: lab.conversation.today.users_server)."""
        if "extra_args" in overrides:
            overrides["extra_args"] = [*self.extra_args, *overrides["extra_args"]]
        return self.model_copy(update=overrides)

    @property
    def kv_args(self) -> list[str]:
        """-ctk / -ctv as llama-server, llama-bench and the lab's own tools take them (none for the default f16)."""
        k, v = self.cache_type_k, self.cache_type_v
        return [*(["-ctk", k] if k != "f16" else []), *(["-ctv", v] if v != "f16" else [])]

    @property
    def swa_full_on(self) -> bool:
        """--swa-full by the setting or among the user's own flags: the server and the in-process driver alike."""
        return self.swa_full or "--swa-full" in self.extra_args


class ConversationSettings(Section):
    """`lab trace replay CONVERSATION`: today's server, configured the way users run it (unset, a flag keeps that
    llama-server's own default, read from its --help: they differ between versions). The lab's own server (the
    optimum and no-cache arms) keeps `server.*`: checkpoints and the RAM cache off, so each of its requests is
    timed from the state the arm sets."""

    reps: int = Field(
        default=5,
        ge=1,
        description="replays of the whole conversation, each in processes of its own (--reps overrides)",
    )
    arms: list[Literal["today", "optimum", "no_cache"]] | None = Field(
        default=None,
        description="the arms to measure (--arms); none given: every arm the trace allows (a conversation: all "
        "three; a trace of step shapes: the optimum)",
    )
    checkpoints: int | None = Field(default=None, ge=0, description="today's --ctx-checkpoints (unset: the server's)")
    checkpoint_min_step: int | None = Field(
        default=None,
        ge=0,
        description="today's --checkpoint-min-step (unset: the server's: 256 at the pin, 8192 later)",
    )
    cache_ram_mib: int | None = Field(
        default=None, ge=-1, description="today's --cache-ram (MiB; 0: off, -1: no limit; unset: the server's)"
    )
    cache_reuse: int = Field(default=0, ge=0, description="today's --cache-reuse")
    swa_full: bool = Field(
        default=False, description="today's --swa-full (a sliding-window model's window cache as large as the context)"
    )
    reasoning_preserve: bool | None = Field(
        default=None,
        description="today's --reasoning-preserve / --no-reasoning-preserve (a server that has the flag: on unless "
        "set; unset: the server's)",
    )
    extra_args: list[str] = Field(
        default_factory=list, description="more flags for today's server only, after server.extra_args"
    )
    today_server: Path | None = Field(
        default=None,
        description="a llama-server binary of your own (e.g. a stock build) as today's server; its --version is "
        "recorded, and the optimum and no cache run the patched build of the release it names",
    )

    @field_validator("extra_args")
    @classmethod
    def _not_the_labs_flags(cls, v: list[str]) -> list[str]:
        return refuse_lab_flags(v)


class TuneSettings(Section):
    """`lab trace tune CONVERSATION`: the cache flags for a workload. Its defaults are conversation.* (today's
    server as the user runs it); the grid's other settings are predicted, and the front's fastest measured."""

    reps: int = Field(
        default=12,
        ge=1,
        description="replays of the conversation, each in processes of its own (--reps): a point or two of the "
        "saving needs about a dozen on a 2-core VM",
    )
    candidates: int = Field(default=2, ge=1, le=8, description="settings from the predicted front measured")
    ram: str | None = Field(
        default=None, description="memory the prompt caches may hold, checkpoints and RAM cache (--ram, e.g. 4GiB)"
    )

    @field_validator("ram")
    @classmethod
    def _a_size(cls, v: str | None) -> str | None:
        try:
            if v is not None:
                parse_size(v)
        except UsageError as e:
            raise ValueError(str(e)) from e
        return v


class RecordSettings(Section):
    """`lab trace record`: the pass-through between an agent and its upstream, and what it holds in memory."""

    read_timeout_s: float = Field(
        default=900.0,
        gt=0,
        description="the longest the upstream may stay silent during an answer (a CPU prefill of a long prompt "
        "sends nothing until it is done); then the agent gets a 504 or a cut stream",
    )
    max_request_mib: int = Field(
        default=256, ge=1, description="the largest request body accepted (screenshots as data URLs); larger: 413"
    )
    max_reply_mib: int = Field(
        default=64,
        ge=1,
        description="the largest reply held to be recorded; a larger non-stream reply is a 502, a "
        "larger stream passes on unrecorded",
    )
    token: str | None = Field(
        default=None,
        min_length=16,
        description="a secret every request must carry in its X-Lab-Token header (--token; for listening beyond "
        "loopback, where anyone who reaches the port could add steps to the trace)",
    )
