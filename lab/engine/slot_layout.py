"""Through the server: a slot given `n_fake_cached` holds the cells a genuine hit of the same length holds.

One llama-server with llama.cpp's cell dump on (lab.engine.cells, `-lv 5` so its debug lines reach the log). At
each L the step's prefix is prefilled and saved; the genuine arm restores it and sends the step, the fake arm sends
the step with n_fake_cached = L. Each timed request's log holds a dump of every cache just before the step's first
ubatch is placed (after the server's "new prompt" line; the fake arm's after the patch's "fabricated fake prefix"
line); the dumps must be equal, cell by cell, with head and used. This is the server's side of
lab.instrument.layout, which compares what the kernels see in one process.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from lab.core.settings_server import ServerSettings
from lab.engine.build import EngineInfo
from lab.engine.cells import DEBUG_ENV, CacheCells, parse_cell_dumps
from lab.engine.contract import ContractClient, filler_tokens, text_step
from lab.engine.server import adhoc_server

STARTED = "new prompt, n_ctx_slot"  # the server's log line as a slot takes a request (a trace line: -lv 4 and up)
FABRICATED = "fabricated fake prefix"  # the patch's log line once a slot's fake prefix is in place
TIMINGS = "prompt eval time"  # the server's log line at a request's end
SETTLE_S = 10.0  # the server's log is written by a thread of its own: wait this long for a request's last line


@dataclass
class SlotLayout:
    model: str
    Ls: list[int]
    new: int
    compared: int = 0  # caches compared
    differences: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.differences


def slot_layout(
    engine: EngineInfo, model: Path, settings: ServerSettings, cache_dir: Path, Ls: list[int], new: int
) -> SlotLayout:
    """The comparison at each L (a step of `new` tokens), through one server of `model`."""
    out = SlotLayout(model.name, Ls, new)
    with tempfile.TemporaryDirectory(prefix="lab-slots-") as slots:
        extra = ["-lv", "5", "--slot-save-path", slots]
        with adhoc_server(engine, model, settings, cache_dir, "slot-layout", extra, DEBUG_ENV) as srv:
            client = ContractClient(srv)
            n_vocab = srv.n_vocab()
            for L in Ls:
                step = text_step(filler_tokens(L, seed=1, n_vocab=n_vocab), filler_tokens(new, seed=2, n_vocab=n_vocab))
                client.save_state(step, f"L{L}.bin")
                seen: dict[str, list[CacheCells]] = {}
                for arm in ("genuine", "fake"):
                    r = client.run_arm(arm, step, f"L{L}.bin" if arm == "genuine" else None)
                    if not r.ok:
                        out.differences.append(f"L={L}: the {arm} arm failed: {r.reason}")
                        break
                    # the step's own dumps: a slower log line of the restore before it may land in its window
                    text = _settled(client).split(STARTED)[-1]
                    seen[arm] = parse_cell_dumps(text.split(FABRICATED)[-1] if arm == "fake" else text)
                if len(seen) == 2:
                    out.differences += _compare(seen["fake"], seen["genuine"], L)
                    out.compared += len(seen["genuine"])
    return out


def _settled(client: ContractClient) -> str:
    """The timed request's log, once its last line is written."""
    text, deadline = client.tail.read(), time.monotonic() + SETTLE_S
    while TIMINGS not in text.split(STARTED)[-1] and time.monotonic() < deadline:
        time.sleep(0.05)
        text += client.tail.read()
    return text


def _compare(fake: list[CacheCells], genuine: list[CacheCells], L: int) -> list[str]:
    if not genuine:
        return [f"L={L}: no cell dump in the server's log (was it started with {DEBUG_ENV} and -lv 5?)"]
    if len(fake) != len(genuine):
        return [f"L={L}: {len(fake)} cache dumps after the fake prefix, {len(genuine)} after the genuine hit"]
    out = []
    for f, g in zip(fake, genuine, strict=True):
        for name in ("size", "n_swa", "head", "used", "cells"):
            a, b = getattr(f, name), getattr(g, name)
            if a != b:
                out.append(
                    f"{g.kind} cache, L={L}: {name} {_short(a)} after the fake prefix, {_short(b)} after the "
                    "genuine hit"
                )
    return out


def _short(v: object) -> str:
    text = str(v)
    return text if len(text) <= 60 else text[:57] + "..."
