"""A model of today's llama-server prompt cache (one slot, `cache_prompt` on), step by step: for a setting of the
flags users tune, which cells each request reuses, from where, and the memory the caches hold.

The rules, as the server at the pin applies them to each request:

    slot        the slot is taken by similarity when its tokens share more than 10% of the new prompt, else as the
                least recently used one; taken by LRU, or keeping less than half of what it holds, it is first
                saved to the RAM prompt cache (unless a cached prompt already starts with it, and dropping the
                cached prompts it starts with), and the cached prompt that keeps more of itself and matches more
                of the new one (keeping at least a quarter of itself) is loaded in its place, checkpoints and all
    reuse       the common prefix of the slot and the prompt (an image counts whole). A hybrid model's recurrent
                state, or a sliding-window cache that lost the cells the next token needs, cannot be cut back:
                a prompt that departs inside what the slot holds restores the newest context checkpoint before the
                departure (its tokens are the reuse) or re-processes everything; checkpoints past the reuse go
    at least 1  a prompt the cache holds whole still evaluates its last token (or falls back to a checkpoint)
    checkpoints made while prefilling, of the state before a batch: before the last user message (when the chat
                template marks messages), and `4 + ubatch` and 4 tokens before the prompt's end, never after an
                image in the same batch, at least `checkpoint_min_step` apart; the oldest goes past the count
    RAM cache   the oldest prompts go while more than one is cached and the size passes `--cache-ram`, then
                while the tokens pass the context (or as many as the size limit buys at the cache's bytes per token)

Memory: a checkpoint holds the part of the state that cannot be cut back (a hybrid's recurrent state; a
sliding-window model's window cells); a cached prompt holds its whole state plus copies of its checkpoints;
`--swa-full` makes the window cache as large as the context (its extra cells count too).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from lab.conversation.cache_setting import CacheSetting, Memory, StateSizes, memory_of
from lab.conversation.derive import StepTokens, Unit
from lab.conversation.window import WindowCache
from lab.core.errors import UsageError
from lab.core.units import MIB
from lab.models.memshape import memory_shape

SIMILARITY = 0.1  # slot_prompt_similarity's default
Source = Literal["slot", "checkpoint", "ram", "none"]


@dataclass(frozen=True)
class Request:
    """One request as the server sees it: its units (a token, or an image's digest and cells) and the cells
    before the last user message (None when the template does not mark them)."""

    units: Sequence[Unit]
    before_user: int | None = None
    cache_prompt: bool = True


@dataclass
class Checkpoint:
    n_tokens: int
    pos_min: int
    pos_max: int
    size: int


@dataclass
class Cached:
    tokens: list[Cell]
    state: int
    checkpoints: list[Checkpoint]
    swa_lo: int = 0

    @property
    def size(self) -> int:
        return self.state + sum(c.size for c in self.checkpoints)


@dataclass(frozen=True)
class Reuse:
    """What a request reused and what the caches hold after it."""

    cache_n: int
    source: Source
    checkpoint_bytes: int  # the slot's checkpoints
    ram_bytes: int  # the RAM prompt cache
    ram_prompts: int
    created: int  # checkpoints made while prefilling it
    window_bytes: int = 0  # --swa-full: the window cache's cells beyond what it holds without

    @property
    def held_bytes(self) -> int:
        return self.checkpoint_bytes + self.ram_bytes + self.window_bytes


Cell = int | tuple[str, int, int]  # a token, or (an image's digest, its cells, which of them)


def cells_of(units: Sequence[Unit]) -> list[Cell]:
    """One entry per cell, as the server's token list holds them."""
    out: list[Cell] = []
    for u in units:
        out += [(u[0], u[1], k) for k in range(u[1])] if isinstance(u, tuple) else [u]
    return out


def common(a: Sequence[Cell], b: Sequence[Cell]) -> int:
    """Cells of the common prefix (an image's cells match all or none: its digest is in each)."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


@dataclass
class PolicyModel:
    """Today's server for one setting: `step` each request in order."""

    setting: CacheSetting
    memory: Memory
    sizes: StateSizes
    ctx: int
    n_swa: int = 0  # the model's window (sliding-window models)
    window_cells: int = 0  # the window cache's cells
    window_extra: int = 0  # bytes --swa-full adds to the window cache (it then spans the context)
    image_pos: dict[str, int] = field(default_factory=dict)  # an image's positions (M-RoPE: fewer than cells)
    slot: list[Cell] = field(default_factory=list)
    checkpoints: list[Checkpoint] = field(default_factory=list)
    ram: list[Cached] = field(default_factory=list)
    loaded: bool = False  # this request's slot came from the RAM cache
    swa_lo: int = 0  # a window cache's lowest position (where a restore or a cut last restarted it)
    ram_updated: int | None = None  # the RAM cache's bytes when it was last updated (the server logs it then)
    made: int | None = None  # bytes of the last checkpoint made

    def __post_init__(self) -> None:
        if self.setting.cache_reuse and self.memory != "hybrid":  # a hybrid's recurrent state cannot shift
            raise UsageError("cache_reuse: shifting reused chunks is not modelled (a model whose cache can shift)")

    @property
    def server_swa(self) -> int:
        return 0 if self.setting.swa_full or self.memory != "window" else self.n_swa

    def _pos(self, cells: Sequence[Cell], n: int) -> int:
        """The position after the first n cells (an image takes its positions at its first cell)."""
        pos = 0
        for c in cells[:n]:
            if not isinstance(c, tuple):
                pos += 1
            elif c[2] == 0:
                pos += self.image_pos.get(c[0], c[1])
        return pos

    def _upto_pos(self, cells: Sequence[Cell], pos: int) -> int:
        """Cells whose positions are below `pos` (an image's cells go with its first one)."""
        at = 0
        for n, c in enumerate(cells):
            if not isinstance(c, tuple):
                at += 1
            elif c[2] == 0:
                at += self.image_pos.get(c[0], c[1])
            if at > pos:
                return n
        return len(cells)

    def _pos_min(self, end: int) -> int:
        """The memory's smallest position when it holds positions up to `end` (excluded): a hybrid's recurrent
        state is at the last one; a window cache keeps its last cells, from where it last restarted on; a plain
        cache everything."""
        if self.memory == "hybrid":
            return end - 1
        if self.memory == "window" and self.server_swa:
            return max(self.swa_lo, end - self.window_cells)
        return 0

    def _window_held(self, lo: int, end: int) -> int:
        """Window cells a saved state keeps: those from `lo` that the last position still reaches."""
        return end - max(lo, end - self.n_swa) if self.memory == "window" else 0

    def _window_after(self, n_past: int, new: list[Cell], restored: Checkpoint | None) -> None:
        """A window cache's lowest position once the cells past the reuse are removed: what it held (the
        restored checkpoint's cells: those its window reached when it was made), or it restarts at the cut."""
        cut = self._pos(new, n_past)
        if n_past == 0:
            lo = 0
        elif restored is not None:
            lo = max(restored.pos_min, restored.pos_max - self.n_swa + 1)
        else:
            lo = self._pos_min(self._pos(self.slot, len(self.slot)))
        self.swa_lo = cut if lo >= cut else lo

    def step(self, req: Request) -> Reuse:
        new = cells_of(req.units)
        self._select(new)
        n_past = common(self.slot, new) if req.cache_prompt else 0
        source: Source = "slot" if n_past else "none"
        pos_next = self._pos(new, n_past)
        has_new = n_past < len(new)
        thold = max(0, pos_next - self.server_swa - (0 if has_new else 1))
        found = None
        if 0 < n_past <= len(self.slot) and self._pos_min(self._pos(self.slot, len(self.slot))) >= thold:
            found = next((c for c in reversed(self.checkpoints) if c.pos_min < thold or c.pos_min == 0), None)
            if found is not None:
                pos_next = min(pos_next, max(found.pos_min + 1, found.pos_max))
                n_past, source = min(self._upto_pos(new, pos_next), found.n_tokens), "checkpoint"
            else:
                n_past, pos_next, source = 0, 0, "none"
        self.checkpoints = [c for c in self.checkpoints if c.pos_max <= pos_next]
        if n_past == len(new) and n_past > 0:
            n_past -= 1
        if self.loaded:
            source = "ram"
        if self.memory == "window":
            self._window_after(n_past, new, found)
        self.slot = self.slot[:n_past]
        created = self._prefill(new, n_past, req.before_user)
        return Reuse(
            cache_n=n_past,
            source=source if n_past else "none",
            checkpoint_bytes=sum(c.size for c in self.checkpoints),
            ram_bytes=sum(c.size for c in self.ram),
            ram_prompts=len(self.ram),
            created=created,
            window_bytes=self.window_extra,
        )

    def _select(self, new: list[Cell]) -> None:
        """Slot selection, and the RAM prompt cache when it is consulted."""
        self.loaded = False
        update = True
        if self.slot:
            lcp = common(self.slot, new)
            if lcp / len(new) > SIMILARITY:
                update = lcp / len(self.slot) < 0.5
        if not update or self.setting.cache_ram_mib == 0:
            return
        if self.slot:
            self._save()
        self._load(new)
        self._limit()
        self.ram_updated = sum(c.size for c in self.ram)

    def _save(self) -> None:
        if any(common(c.tokens, self.slot) == len(self.slot) for c in self.ram):
            return  # already cached
        self.ram = [c for c in self.ram if common(c.tokens, self.slot) != len(c.tokens)]
        end = self._pos(self.slot, len(self.slot))
        lo = self._pos_min(end)
        whole = self.sizes.whole(len(self.slot), self._window_held(lo, end))
        copies = [Checkpoint(**vars(c)) for c in self.checkpoints]
        self.ram.append(Cached(list(self.slot), whole, copies, lo))

    def _load(self, new: list[Cell]) -> None:
        lcp = common(self.slot, new)
        f_keep = lcp / len(self.slot) if self.slot else -1.0
        sim = lcp / len(new)
        best = None
        for c in self.ram:
            lcp_c = common(c.tokens, new)
            f_c, sim_c = lcp_c / len(c.tokens), lcp_c / len(new)
            if f_c < 0.25:
                continue
            if f_keep < f_c and sim < sim_c:
                f_keep, sim, best = f_c, sim_c, c
        if best is not None:
            self.slot, self.checkpoints = best.tokens, best.checkpoints
            # a saved state keeps the window cells its last position still reaches
            self.swa_lo = max(best.swa_lo, self._pos(best.tokens, len(best.tokens)) - self.n_swa)
            self.ram.remove(best)
            self.loaded = True

    def _limit(self) -> None:
        limit = self.setting.cache_ram_mib * MIB if self.setting.cache_ram_mib > 0 else 0
        while limit and len(self.ram) > 1 and sum(c.size for c in self.ram) > limit:
            self.ram.pop(0)
        n_tokens = sum(len(c.tokens) for c in self.ram)
        per_token = max(1.0, sum(c.size for c in self.ram) / max(1, n_tokens))
        tokens_limit = max(self.ctx, int(limit / per_token)) if limit else self.ctx
        while len(self.ram) > 1 and sum(len(c.tokens) for c in self.ram) > tokens_limit:
            self.ram.pop(0)

    def _prefill(self, new: list[Cell], n: int, before_user: int | None) -> int:
        """The prompt from n cells on, in batches as the server cuts them; checkpoints made before batches."""
        s = self.setting
        can = s.checkpoints > 0 and (self.memory == "hybrid" or self.server_swa > 0)
        known = before_user is not None and before_user > 0
        total, created = len(new), 0
        while n < total:
            has_image = False
            while n < total and isinstance(new[n], tuple):
                n += 1
                has_image = True
            start = n
            while n < total and n - start < s.batch and not isinstance(new[n], tuple):
                n += 1
                if known and n == before_user:
                    break
                if can and any(total == n + min(s.batch, off) for off in (4 + s.ubatch, 4)):
                    break
            near_end = total < n + s.ubatch
            do = can and (n == total or known or near_end)
            if known and before_user is not None:
                do = do and (start == before_user or (start > before_user and near_end))
            do = do and start > 0 and not has_image  # an empty memory, or an image decoded in this batch
            do = do and (not self.checkpoints or start > self.checkpoints[-1].n_tokens + s.checkpoint_min_step)
            if do:
                while len(self.checkpoints) >= s.checkpoints:
                    self.checkpoints.pop(0)
                pos_max = self._pos(new, start) - 1
                pos_min = self._pos_min(pos_max + 1)
                size = self.sizes.checkpoint(self._window_held(pos_min, pos_max + 1))
                self.checkpoints.append(Checkpoint(start, pos_min, pos_max, size))
                self.made = self.checkpoints[-1].size
                created += 1
        self.slot = list(new)
        return created


def policy_for(meta: dict[str, Any], setting: CacheSetting, ctx: int, image_pos: dict[str, int]) -> PolicyModel:
    """Today's server for a model (its GGUF metadata), empty, under one setting; state sizes predicted from the
    model's shape (lab.models.memshape)."""
    shape = memory_shape(meta)
    if shape is None:
        raise UsageError(f"{meta.get('general.architecture')}: its memory layout is not modelled")
    memory = memory_of(meta)
    window = WindowCache.of(meta, setting.ubatch, ctx, setting.swa_full)

    window_cell = shape.window_kv_bytes_per_cell + shape.cell_meta_bytes
    stock = WindowCache.of(meta, setting.ubatch, ctx, False)
    extra = (ctx - stock.cells) * shape.window_kv_bytes_per_cell if window and stock and setting.swa_full else 0

    def checkpoint(w: int) -> int:
        return shape.recurrent_bytes + w * window_cell

    def whole(n: int, w: int) -> int:
        return shape.recurrent_bytes + n * shape.bytes_per_cell + w * window_cell

    return PolicyModel(
        setting,
        memory,
        StateSizes(checkpoint, whole),
        ctx,
        n_swa=window.n_swa if window else 0,
        window_cells=window.cells if window else 0,
        window_extra=extra,
        image_pos=dict(image_pos),
    )


@dataclass(frozen=True)
class Predicted:
    """A step of today's replay as the model predicts it: its request's reuse, and what the server logs of
    its memory over the step (the RAM cache when updated, a checkpoint made) and holds after it."""

    reuse: Reuse
    ram_logged: int | None
    checkpoint_made: int | None
    held_bytes: int


def predict(steps: Sequence[StepTokens], model: PolicyModel) -> list[Predicted]:
    """A conversation's steps as today's replay sends them: each step's chat request, then its reply held in the
    slot by a raw completion of the prompt and reply (lab.conversation.today)."""
    out = []
    for st in steps:
        model.ram_updated, model.made = None, None
        reuse = model.step(Request(st.prompt, st.before_user))
        after = model.step(Request(st.held or st.prompt))
        out.append(Predicted(reuse, model.ram_updated, model.made, after.held_bytes))
    return out


def predict_conversation(
    tasks: dict[str, list[StepTokens]], meta: dict[str, Any], setting: CacheSetting, ctx: int, image_pos: dict[str, int]
) -> dict[tuple[str, int], Predicted]:
    """Each task's steps as today's replay sends them, a fresh server per task (`ctx` cells), by (task, step)."""
    return {
        (task, st.step): p
        for task, steps in tasks.items()
        for st, p in zip(steps, predict(steps, policy_for(meta, setting, ctx, image_pos)), strict=True)
    }
