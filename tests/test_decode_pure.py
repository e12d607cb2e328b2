"""Decoding at depth without a server: the request a decoding sample sends, how its answer is judged and timed,
llama-bench's generation rows, a depth's row and verdict, the sweep's decode fields and their refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError
from rich.console import Console

from lab.core.errors import UsageError
from lab.core.settings import Settings, SweepSettings
from lab.engine.build import EngineInfo
from lab.engine.contract import ArmResult, Timings, arm_reason, arm_requests, decode_samples, text_step
from lab.experiments.decode import check_depths, decode_steps, summarize_depth
from lab.experiments.prefill_tps import LlamaBench, bench_command, parse_bench_jsonl, parse_decode_jsonl
from lab.experiments.sweep.grid import GridPoint
from lab.experiments.sweep.points import sample_row
from lab.experiments.sweep.server import summarize_server
from lab.presenters.decode import decode_table
from lab.presenters.sweep import summary_table

pytestmark = pytest.mark.fast

STEP = text_step([11, 12, 13, 14], [21, 22])


def timings(predicted_n: int, predicted_ms: float, cache_n: int = 4, prompt_n: int = 2) -> Timings:
    return Timings(
        cache_n=cache_n,
        prompt_n=prompt_n,
        prompt_ms=3.0,
        predicted_n=predicted_n,
        predicted_ms=predicted_ms,
        fake_n=4,
    )


def fake_result(predicted_n: int, predicted_ms: float, ok: bool = True) -> ArmResult:
    t = timings(predicted_n, predicted_ms)
    return ArmResult(
        arm="fake", L=4, new=2, ok=ok, timings=t, kind=None if ok else "contract", reason="" if ok else "x"
    )


def test_a_decoding_request_generates_exactly_n_out_greedily() -> None:
    ((_, body),) = arm_requests("fake", STEP, n_out=32)
    assert body["n_predict"] == 32 and body["ignore_eos"] is True and body["temperature"] == 0.0
    assert body["n_fake_cached"] == 4 and body["prompt"] == [11, 12, 13, 14, 21, 22]
    plain = arm_requests("fake", STEP)[0][1]  # without n_out: the one sampled token, as before
    assert plain["n_predict"] == 1 and "ignore_eos" not in plain
    restore, (_, timed) = arm_requests("genuine", STEP, "L4.bin", n_out=8)
    assert "n_predict" not in restore[1] and timed["n_predict"] == 8  # only the timed request generates


def test_the_decode_contract_checks_the_generated_count_and_the_cache() -> None:
    assert arm_reason("fake", timings(8, 70.0), 4, 2, n_out=8) == ""
    assert "predicted_n=5 != n_out=8" in arm_reason("fake", timings(5, 70.0), 4, 2, n_out=8)
    assert "cache_n=0 != L=4" in arm_reason("fake", timings(8, 70.0, cache_n=0), 4, 2, n_out=8)
    assert arm_reason("fake", timings(1, 0.0), 4, 2) == ""  # no n_out: the generated count is not checked


def test_decode_ms_spans_the_decodes_between_the_first_and_last_token() -> None:
    assert timings(8, 70.0).decode_ms == pytest.approx(10.0)  # 8 tokens: 7 decodes
    assert timings(1, 0.5).decode_ms is None and timings(0, 0.0).decode_ms is None
    results = [fake_result(8, 70.0), fake_result(8, 77.0), fake_result(8, 1.0, ok=False)]
    assert decode_samples(results) == pytest.approx([10.0, 11.0])  # the failed sample is left out


BENCH_ROWS = [
    {"n_prompt": 0, "n_gen": 16, "n_depth": 512, "avg_ns": 160e6, "stddev_ns": 0, "samples_ns": [150e6, 170e6]},
    {"n_prompt": 64, "n_gen": 0, "n_depth": 512, "avg_ns": 5e6, "stddev_ns": 0, "avg_ts": 1e4, "samples_ns": [5e6]},
]


def test_llama_bench_generation_rows_give_ms_per_token_per_rep() -> None:
    text = "noise line\n" + "\n".join(json.dumps(r) for r in BENCH_ROWS)
    (row,) = parse_decode_jsonl(text)
    assert (row.depth, row.n_gen) == (512, 16) and row.samples_ms == pytest.approx([150 / 16, 170 / 16])
    assert [r.chunk for r in parse_bench_jsonl(text)] == [64]  # the prefill parser keeps only the prefill row


def test_the_bench_command_generates_at_depth_without_a_prompt(tmp_path: Path) -> None:
    engine = EngineInfo.model_construct(bench=tmp_path / "llama-bench", lib_dir=tmp_path)
    b = LlamaBench(engine, tmp_path / "m.gguf", [0], [1024, 512], 3, 2, "auto", n_gen=32)
    cmd = bench_command(b)
    assert "-p 0 -n 32 -d 512,1024 -r 3 -t 2" in cmd
    assert "-n 0" in bench_command(LlamaBench(engine, tmp_path / "m.gguf", [64], [512], 1, 1, "on"))


def test_a_depth_row_carries_both_intervals_the_ratio_and_a_verdict() -> None:
    results = [fake_result(8, 70.0), fake_result(8, 71.4), fake_result(8, 69.3), fake_result(3, 1.0, ok=False)]
    server = [(r, k) for k, r in enumerate(results)]  # each sample from a server process of its own
    row = summarize_depth(STEP, 8, server, [(10.0, 0), (10.1, 1), (9.9, 2)], 0.1)
    assert (row.depth, row.L, row.new, row.n_out) == (6, 4, 2, 8)
    assert row.server_ms is not None and row.bench_ms is not None and row.ratio is not None
    assert row.ratio.lo <= row.ratio.value <= row.ratio.hi and row.verdict == "agree"
    assert len(row.server_samples_ms) == 3 and row.failed == ["contract: x"]
    # the intervals resample both sides' processes, and say how many each rests on
    assert row.server_processes == [0, 1, 2] and row.bench_processes == [0, 1, 2] and row.ratio.processes == 3
    assert row.server_ms.processes == 3 and row.bench_ms.processes == 3
    far = summarize_depth(STEP, 8, server, [(5.0, 0), (5.1, 1), (4.9, 2)], 0.1)
    assert far.verdict == "disagree"
    none = summarize_depth(STEP, 8, [], [(5.0, 0)], 0.1)
    assert none.ratio is None and none.verdict == "undecided"
    text = render(decode_table([row, far], "m.gguf", 1))
    assert "agree" in text and "disagree" in text and "1 +- 10%" in text


def render(table: object) -> str:
    console = Console(width=250, record=True)
    console.print(table)
    return console.export_text()


def test_depths_are_cut_from_one_stream_and_checked() -> None:
    steps = decode_steps([512, 1024], 64, list(range(1024)))
    assert (steps[512].L, steps[512].new, steps[1024].L) == (448, 64, 960)
    assert steps[1024].prompt == list(range(1024)) and steps[512].prompt == list(range(512))
    check_depths([512, 1024], 64, 32, 16384)
    for depths, new, n_out, why in (
        ([], 64, 32, "at least one depth"),
        ([512], 64, 1, "at least 2"),
        ([32, 512], 64, 32, "at least new"),
        ([16000], 64, 500, "ctx_size"),
    ):
        with pytest.raises(UsageError, match=why):
            check_depths(depths, new, n_out, 16384)


def test_the_sweep_stores_the_fake_arms_decode_on_samples_and_points() -> None:
    p = GridPoint(4, 2)
    sw = SweepSettings(Ls=[4], news=[2], arms=["fake", "genuine"], n_out=8)
    samples = [
        sample_row(p, rep, r)
        for rep, ms in enumerate((70.0, 72.1, 69.3))
        for r in (fake_result(8, ms), ArmResult(arm="genuine", L=4, new=2, ok=True, timings=timings(1, 0.0)))
    ]
    fake = [s for s in samples if s.arm == "fake"]
    assert all(s.predicted_n == 8 and s.decode_ms is not None for s in fake)
    assert all(s.decode_ms is None and s.predicted_n is None for s in samples if s.arm == "genuine")
    point = summarize_server(p, samples, [], sw.tolerance)
    assert point.n_out == 8 and point.decode_ci is not None and point.decode_ci.n == 3
    assert point.decode_ci.value == pytest.approx(10.0)
    assert "decode ms/token at L+new" in render(summary_table([point], {}))
    off = summarize_server(p, [sample_row(p, 0, fake_result(1, 0.0))], [], sw.tolerance)
    assert off.n_out == 0 and off.decode_ci is None  # without n_out: no decode, no column
    assert "decode ms/token" not in render(summary_table([off], {}))


def test_older_rows_without_decode_fields_still_read() -> None:
    p = summarize_server(GridPoint(4, 2), [sample_row(GridPoint(4, 2), 0, fake_result(1, 0.0))], [], 0.05)
    old = p.model_dump(mode="json", exclude={"n_out", "decode_ci"})
    assert type(p).model_validate(old).decode_ci is None


@pytest.mark.parametrize(
    ("sweep", "why"),
    [
        ({"n_out": 1}, "at least 2"),
        ({"n_out": 8, "where": "inproc"}, "through the server"),
        ({"n_out": -1}, "greater than or equal"),
    ],
)
def test_bad_n_out_is_refused(sweep: dict[str, object], why: str) -> None:
    with pytest.raises(ValidationError, match=why):
        SweepSettings.model_validate(sweep)


def test_the_generation_must_fit_the_context() -> None:
    with pytest.raises(ValidationError, match=r"sweep\.n_out need"):
        Settings(sweep={"Ls": [8000], "news": [64], "n_out": 200}, server={"ctx_size": 8192})
    assert Settings(sweep={"Ls": [8000], "news": [64], "n_out": 64}, server={"ctx_size": 8192}).sweep.n_out == 64


def test_decode_inputs_are_settings_like_every_experiment(tmp_path: Path) -> None:
    """params.yaml, LAB_* and flags set `lab engine decode` as they set a sweep; a bad value is refused by name
    before anything is built or created; a run of an older format (its inputs beside the settings) is refused."""
    from labcli import lab, one_line_error

    from lab.core.runs import RunError, RunFolder
    from lab.core.settings import load_settings
    from lab.experiments.decode import DecodeCheck

    params = tmp_path / "params.yaml"
    params.write_text("decode:\n  n_out: 1\n")
    r = lab("engine", "decode", "--runs-dir", str(tmp_path / "runs"), env={"LAB_PARAMS_FILE": str(params)})
    one_line_error(r, 2, "decode.n_out")
    r = lab("engine", "decode", "--runs-dir", str(tmp_path / "runs"), env={"LAB_DECODE__DEPTH": "[512]"})
    one_line_error(r, 2, "unknown setting decode.depth")
    assert not (tmp_path / "runs").exists()
    old = RunFolder.create(tmp_path / "runs", "decode", "h", {"depths": [32, 96], "new": 16, "n_out": 4, "reps": 2})
    with pytest.raises(RunError, match=rf"{old.path.name}: a decode check of an older format"):
        DecodeCheck().restore_own(load_settings(), old.manifest().params, old)
