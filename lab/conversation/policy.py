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
from typing import Literal

from lab.conversation.cache_setting import CacheSetting, Memory, StateSizes
from lab.conversation.derive import Unit, common_prefix
from lab.conversation.rules import PIN, Rules
from lab.core.errors import UsageError
from lab.core.units import MIB

SIMILARITY = 0.1  # slot_prompt_similarity's default
Source = Literal["slot", "checkpoint", "ram", "none"]


@dataclass(frozen=True)
class Request:
    """One request as the server sees it: its units (a token, or an image's digest and cells) and the cells
    before the last user message (None when the template does not mark them)."""

    units: Sequence[Unit]
    before_user: int | None = None
    cache_prompt: bool = True
    user_starts: tuple[int, ...] = ()  # each user message's first cell (a server that finds them by delimiters)


@dataclass
class Checkpoint:
    n_tokens: int
    pos_min: int
    pos_max: int
    size: int
    task: int = 0  # the request that made it


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


@dataclass
class PolicyModel:
    """Today's server for one setting: `step` each request in order."""

    setting: CacheSetting
    memory: Memory
    sizes: StateSizes
    ctx: int
    rules: Rules = PIN
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
    task: int = 0  # the request being served

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
        self.task += 1
        new = cells_of(req.units)
        self._select(new)
        n_past = common_prefix(self.slot, new) if req.cache_prompt else 0
        source: Source = "slot" if n_past else "none"
        pos_next = self._pos(new, n_past)
        has_new = n_past < len(new)
        thold = max(0, pos_next - self.server_swa - (0 if has_new else 1))
        found = None
        if 0 < n_past <= len(self.slot) and self._pos_min(self._pos(self.slot, len(self.slot))) >= thold:
            found = next((c for c in reversed(self.checkpoints) if self._restorable(c, thold, pos_next)), None)
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
        created = self._prefill(new, n_past, req)
        return Reuse(
            cache_n=n_past,
            source=source if n_past else "none",
            checkpoint_bytes=sum(c.size for c in self.checkpoints),
            ram_bytes=sum(c.size for c in self.ram),
            ram_prompts=len(self.ram),
            created=created,
            window_bytes=self.window_extra,
        )

    def _restorable(self, c: Checkpoint, thold: int, pos_next: int) -> bool:
        """A checkpoint the reuse can resume from: one whose state is from before the window's threshold (or the
        very start); with fit_next, only one that also ends at or before where the reuse resumes."""
        if self.rules.fit_next and c.pos_max > pos_next:
            return False
        return c.pos_min < thold or c.pos_min == 0

    def _select(self, new: list[Cell]) -> None:
        """Slot selection, and the RAM prompt cache when it is consulted."""
        self.loaded = False
        update = True
        if self.slot:
            lcp = common_prefix(self.slot, new)
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
        if any(common_prefix(c.tokens, self.slot) == len(self.slot) for c in self.ram):
            return  # already cached
        end = self._pos(self.slot, len(self.slot))
        lo = self._pos_min(end)
        whole = self.sizes.whole(len(self.slot), self._window_held(lo, end))
        copies = [Checkpoint(**vars(c)) for c in self.checkpoints]
        entry = Cached(list(self.slot), whole, copies, lo)
        limit = self.setting.cache_ram_mib * MIB if self.setting.cache_ram_mib > 0 else 0
        if not self.rules.ram_keep_one and limit and entry.size > limit:
            return  # larger than the whole cache: not cached
        self.ram = [c for c in self.ram if common_prefix(c.tokens, self.slot) != len(c.tokens)]
        while not self.rules.ram_keep_one and limit and self.ram and sum(c.size for c in self.ram) + entry.size > limit:
            self.ram.pop(0)  # room made before it is added
        self.ram.append(entry)

    def _load(self, new: list[Cell]) -> None:
        lcp = common_prefix(self.slot, new)
        f_keep = lcp / len(self.slot) if self.slot else -1.0
        sim = lcp / len(new)
        best = None
        for c in self.ram:
            lcp_c = common_prefix(c.tokens, new)
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
        keep = 1 if self.rules.ram_keep_one else 0
        while limit and len(self.ram) > keep and sum(c.size for c in self.ram) > limit:
            self.ram.pop(0)
        n_tokens = sum(len(c.tokens) for c in self.ram)
        per_token = max(1.0, sum(c.size for c in self.ram) / max(1, n_tokens))
        tokens_limit = max(self.ctx, int(limit / per_token)) if limit else self.ctx
        while len(self.ram) > 1 and sum(len(c.tokens) for c in self.ram) > tokens_limit:
            self.ram.pop(0)

    def _prefill(self, new: list[Cell], n: int, req: Request) -> int:
        """The prompt from n cells on, in batches as the server cuts them; checkpoints made before batches."""
        s = self.setting
        can = s.checkpoints > 0 and (self.memory == "hybrid" or self.server_swa > 0)
        marks = Marks.of(req, self.rules)
        total, created = len(new), 0
        while n < total:
            has_image = False
            while n < total and isinstance(new[n], tuple):
                n += 1
                has_image = True
            start = n
            while n < total and n - start < s.batch and not isinstance(new[n], tuple):
                n += 1
                if marks.cut(n, can, self._spaced(n)):
                    break
                if can and any(total == n + min(s.batch, off) for off in (4 + s.ubatch, 4)):
                    break
            near_end = total < n + s.ubatch
            do = can and start > 0 and not has_image  # an empty memory, or an image decoded in this batch
            if do and marks.keep(start, n == total, near_end, self._spaced(start)):
                self._add_checkpoint(new, start)
                created += 1
        self.slot = list(new)
        return created

    def _spaced(self, n: int) -> bool:
        """Whether a checkpoint at n would be more than min-step after the newest one (or the first)."""
        return not self.checkpoints or n > self.checkpoints[-1].n_tokens + self.setting.checkpoint_min_step

    def _add_checkpoint(self, new: list[Cell], start: int) -> None:
        """The state before cell `start`, made room for: with thinning, other requests' checkpoints within min-step
        of an earlier kept one go first, then the oldest; one at the same cells is replaced."""
        s = self.setting
        if self.rules.thinning:
            kept: list[Checkpoint] = []
            last = -1
            for i, c in enumerate(self.checkpoints):
                if len(kept) + len(self.checkpoints) - i + 1 < s.checkpoints:  # room enough: the rest stay
                    kept += self.checkpoints[i:]
                    break
                if c.task != self.task and last >= 0 and c.n_tokens <= last + s.checkpoint_min_step:
                    continue
                last = c.n_tokens
                kept.append(c)
            self.checkpoints = kept
        while len(self.checkpoints) >= s.checkpoints:
            self.checkpoints.pop(0)
        if self.rules.thinning:
            self.checkpoints = [c for c in self.checkpoints if c.n_tokens != start]
        pos_max = self._pos(new, start) - 1
        pos_min = self._pos_min(pos_max + 1)
        size = self.sizes.checkpoint(self._window_held(pos_min, pos_max + 1))
        self.checkpoints.append(Checkpoint(start, pos_min, pos_max, size, self.task))
        self.made = size


@dataclass(frozen=True)
class Marks:
    """Where a request's user messages are, as the server's rules use them to cut batches and keep checkpoints."""

    rules: Rules
    before_user: int  # the pin's: cells before the last user message (0: none marked)
    users: frozenset[int]  # the delimiters': each user message's first cell
    last: int  # the last user message's first cell (-1: none)

    @classmethod
    def of(cls, req: Request, rules: Rules) -> Marks:
        users = req.user_starts if rules.marks == "delimiters" else ()
        before = req.before_user or 0 if rules.marks == "before_user" else 0
        return cls(rules, before, frozenset(users), users[-1] if users else -1)

    def cut(self, n: int, can: bool, spaced: bool) -> bool:
        """Whether the batch ends after cell n: at the last user message (the pin, whatever else), or where a
        checkpoint may go before a user message (the last one, or one min-step past the newest)."""
        if self.rules.marks == "before_user":
            return self.before_user > 0 and n == self.before_user
        return can and n in self.users and (n == self.last or spaced)

    def keep(self, start: int, done: bool, near_end: bool, spaced: bool) -> bool:
        """Whether the state before a batch starting at `start` is kept as a checkpoint."""
        if self.rules.marks == "before_user":
            bu = self.before_user
            if bu > 0 and not (start == bu or (start > bu and near_end)):
                return False
            return (done or bu > 0 or near_end) and spaced
        return (done or start in self.users or near_end) and (start == self.last or near_end or spaced)
