"""The sweep's grid: its points (L, new, optional screenshot size), the tokens each decodes, and the one token
stream every point is cut from (point (L, new) = stream[:L] + stream[L:L + new]), shared by the server arms and
the in-process driver."""

from __future__ import annotations

from dataclasses import dataclass

from lab.core.settings import SweepSettings
from lab.engine.contract import Step, filler_tokens, text_step
from lab.engine.imagegrid import ImageGeometry


def point_id(L: int, new: int, image: str | None = None) -> str:
    return f"L{L}_n{new}" + (f"_img{image}" if image else "")


@dataclass(frozen=True)
class GridPoint:
    L: int
    new: int
    image: str | None = None  # WxH of the screenshot in the new part

    @property
    def id(self) -> str:
        return point_id(self.L, self.new, self.image)

    @property
    def size(self) -> tuple[int, int]:
        assert self.image is not None
        w, h = self.image.split("x")
        return int(w), int(h)


def grid(params: SweepSettings) -> list[GridPoint]:
    images = [None if i == "none" else i for i in params.images]
    return [GridPoint(L, new, img) for img in images for L in params.Ls for new in params.news]


def image_counts(p: GridPoint, geom: ImageGeometry | None) -> tuple[int | None, int | None]:
    """(image tokens, positions) of a point's screenshot; (None, None) for a text step."""
    if p.image is None:
        return None, None
    assert geom is not None, "an image point needs the projector's geometry"
    return geom.tokens(*p.size)


def point_seed(p: GridPoint, seed: int) -> int:
    return seed * 1_000_003 + p.L


def stream_tokens(sw: SweepSettings, n_vocab: int, longest_new: int | None = None) -> list[int]:
    """The grid's one token stream: point (L, new) is stream[:L] then stream[L:L + new], so one cumulative
    pass reaches every point's prefix, and the server and the in-process driver see the same ids."""
    n = max(sw.Ls) + max(longest_new or 0, *sw.news)
    return filler_tokens(n, seed=sw.seed * 1_000_003 + 1, n_vocab=n_vocab)


def point_text_step(p: GridPoint, tokens: list[int]) -> Step:
    """The filler step of a text point, cut from the grid's token stream: the same ids for every arm."""
    return text_step(tokens[: p.L], tokens[p.L : p.L + p.new])


def only_new(p: GridPoint, geom: ImageGeometry | None) -> int:
    """The tokens a point's step decodes: its text, plus its image's tokens (they cost like text tokens)."""
    return p.new + (image_counts(p, geom)[0] or 0)
