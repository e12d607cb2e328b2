"""Notes on a sweep point: the checks to make where a verdict is `disagree` (what to look at when the fabricated
prefix does not do a cache hit's work), how many reps would decide an `undecided` one, and facts (the 256-column
floor, failed samples, a window cache holding other cells, a state blob of another size than predicted)."""

from __future__ import annotations

from lab.core.schemas import BATCH_CHUNK, KV_PAD, Interval, SweepPoint, SweepSample, Verdict
from lab.core.stats import reps_to_decide


def diagnose(p: SweepPoint, samples: list[SweepSample], tol: float) -> list[str]:
    return [*facts(p, samples), *disagreements(p, samples), *undecided(p, tol)]


def facts(p: SweepPoint, samples: list[SweepSample]) -> list[str]:
    out: list[str] = []
    if not p.measurable:
        out.append(f"L={p.L} is below the {KV_PAD}-column floor: attention reads {p.n_kv_padded} columns anyway")
    failed = [s for s in samples if not s.ok]
    if failed:
        out.append(f"{len(failed)} failed sample(s), excluded: {failed[0].arm} rep {failed[0].rep}: {failed[0].reason}")
    fake, genuine = (
        {s.pos_min for s in samples if s.arm == a and s.ok and s.pos_min is not None} for a in ("fake", "genuine")
    )
    if fake and genuine and fake != genuine:
        out.append(
            f"the fake prefix's first held position {sorted(fake)} is not the genuine hit's {sorted(genuine)}: "
            "a sliding-window cache holds different cells in the two arms"
        )
    if p.blob_bytes and p.predicted_blob_bytes and abs(p.blob_bytes / p.predicted_blob_bytes - 1) > 0.01:
        out.append(
            f"the state blob is {p.blob_bytes:,} B, the GGUF predicts {p.predicted_blob_bytes:,} B: a KV type other "
            "than f16 (-ctk/-ctv), or a layout lab.models.memshape does not model"
        )
    return out


def disagreements(p: SweepPoint, samples: list[SweepSample]) -> list[str]:
    out: list[str] = []
    only_new = p.new + (p.image_tokens or 0)  # an image step also decodes the image's tokens
    prompt_ns = sorted({s.prompt_n for s in samples if s.arm == "fake" and s.prompt_n is not None})
    est, gen = p.fake_vs_estimate_ci, p.fake_vs_genuine_ci
    if p.estimate_verdict == "disagree" and est is not None and est.value > 1:
        if prompt_ns != [only_new]:
            out.append(
                f"fake {est.fmt(pct=True)} vs the estimate, and prompt_n {prompt_ns} != only_new {only_new}: "
                "the only-new branch did not fire"
            )
        else:
            out.append(split(p, est))
    if p.estimate_verdict == "disagree" and est is not None and est.value < 1:
        out.append(split(p, est))
        out.append(
            f"fake {est.fmt(pct=True)} vs the estimate: check that both memory children report "
            f"seq_pos_max == L-1 (the hybrid takes the min) and that the attended KV is padded to "
            f"{p.n_kv_padded} >= L+new"
        )
    if p.genuine_verdict == "disagree" and gen is not None:
        out.append(
            f"fake {gen.fmt(pct=True)} vs the genuine hit: the fabricated prefix does not do the hit's work; "
            f"check prompt_n {prompt_ns} == {only_new}, both children's seq_pos_max == L-1, and the padded "
            f"n_kv {p.n_kv_padded}"
        )
    if p.plain_verdict == "disagree" and p.genuine_vs_plain_ci is not None:
        out.append(
            f"genuine/plain {p.genuine_vs_plain_ci.fmt(pct=True)}: the restored state does not cost what decoding L "
            "in the same sequence does; check that the sequence's max position was L-1 before the new tokens"
        )
    return out


def split(p: SweepPoint, est: Interval) -> str:
    """A disagreement with the estimate split into what it is made of: fake / estimate = fake / genuine (the
    fabricated prefix) x genuine / estimate (through the server, its per-request share: the same chunk from the
    same restored state through llama-server and in the bare engine); beside it, the batch-size effect (the
    step's chunk against a BATCH_CHUNK-token one at depth L), which the estimate at the step's own size holds
    but a rate quoted at 512 tokens would miss."""
    parts = [
        f"fake / estimate {est.fmt(pct=True)} = the fabricated prefix (fake / genuine) " + _pct(p.fake_vs_genuine_ci)
    ]
    share = "the server's per-request share" if p.where == "server" else "the same chunk twice in one process"
    parts.append(f" x {share} (genuine / estimate) {_pct(p.genuine_vs_estimate_ci)}")
    b = p.batch_effect_ci
    if b is not None:
        parts.append(
            f"; batch size: a {p.new}-token chunk costs {b.fmt(pct=True)} per token of a {BATCH_CHUNK}-token one "
            "at depth L (in the estimate already; a rate quoted at that size would miss it)"
        )
    return "".join(parts)


def _pct(iv: Interval | None) -> str:
    return iv.fmt(pct=True) if iv is not None else "not measured"


def undecided(p: SweepPoint, tol: float) -> list[str]:
    checks: list[tuple[str, Interval | None, Verdict | None]] = [
        ("fake/genuine", p.fake_vs_genuine_ci, p.genuine_verdict),
        ("genuine/plain", p.genuine_vs_plain_ci, p.plain_verdict),
        ("fake/estimate", p.fake_vs_estimate_ci, p.estimate_verdict),  # a verdict in one process only
    ]
    out = []
    for name, iv, v in checks:
        if v == "undecided" and iv is not None:
            more = reps_to_decide(iv, tol)
            if more is None:
                hint = "it sits on the bound: no number of reps decides it at this tolerance"
            elif more > 1000:
                hint = "far too noisy to decide at this tolerance (over 1000 reps); check the host's noise figures"
            else:
                hint = f"about {more} reps would likely decide it"
            out.append(f"{name} {iv.fmt(pct=True)} straddles 1 +- {tol:.0%} after {iv.n} reps: {hint}")
    return out
