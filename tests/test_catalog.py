"""Catalog ingest on real run folders (the rebuild labs make them in a second): schemas validated, incomplete
runs listed but not drawn, a run with a malformed row skipped in one line naming its file and line, tables
swapped in whole."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest
from labcli import lab

from lab.catalog.ingest import ingest
from lab.catalog.tables import RUNS, SPECS, columns, load_table
from lab.core.runs import RunFolder
from lab.core.schemas import ArmStats, SweepPoint
from lab.core.schemas.raw import SWEEP_POINTS, SWEEP_SAMPLES

pytestmark = pytest.mark.fast


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    root = tmp_path / "runs"
    for which in ("exact", "cost"):
        assert lab("rebuild", which, "--runs-dir", str(root)).returncode == 0
    broken = RunFolder.create(root, "sweep", "vm", {})
    broken.update(status="incomplete", reason="interrupted by SIGTERM")
    return root


def test_ingest_builds_every_table(runs: Path, tmp_path: Path) -> None:
    cat = tmp_path / "catalog"
    r = ingest(runs, cat)
    assert (r.runs, r.in_figures) == (3, 2)
    assert r.rows["rebuild_exact"] == 2 and r.rows["rebuild_cost"] == 15 and r.rows["rebuild_row_work"] == 3
    runs_table = load_table(cat, RUNS)
    assert sorted(runs_table["status"]) == ["complete", "complete", "incomplete"]
    assert not runs_table.loc[runs_table["status"] == "incomplete", "in_figures"].item()
    for spec in SPECS:  # every table exists with its declared columns, even when empty
        assert list(load_table(cat, spec.name).columns) == columns(spec.schema)
    exact = load_table(cat, "rebuild_exact")
    assert list(exact["last_suffix"]) == ["22", "57/2"]
    assert (cat / "metrics.json").exists()


def test_a_run_with_a_malformed_row_is_skipped_in_one_line_and_the_others_are_ingested(
    runs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bad row in one complete run stops no other: that run is left out, named with its file and line in one
    warning, and the tables are still swapped in whole (no scratch left behind)."""
    cat = tmp_path / "catalog"
    ingest(runs, cat)
    run = next(p for p in runs.iterdir() if "rebuild_cost" in p.name)
    table = run / "raw" / "rebuild_cost.jsonl"
    lines = table.read_text().splitlines()
    lines[2] = lines[2].replace('"rows": ', '"rows": "many", "x": ').replace('"rows":', '"rows": "many", "y":')
    table.write_text("\n".join(lines) + "\n")
    capsys.readouterr()
    r = ingest(runs, cat)
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("warning: ") and f"{table}:3: bad" in line and line.endswith("; skipped"), line
    assert (r.runs, r.in_figures, r.rows["rebuild_exact"], r.rows["rebuild_cost"]) == (2, 1, 2, 0)
    assert run.name not in set(load_table(cat, RUNS)["run_id"])
    assert not [p for p in cat.iterdir() if p.name.startswith(".tables")]  # no scratch left behind
    cli = lab("catalog", "ingest", "--runs-dir", str(runs), "--catalog-dir", str(cat))
    assert cli.returncode == 0 and "Traceback" not in cli.stderr, cli.stderr
    assert len(cli.stderr.strip().splitlines()) == 1 and f"{table}:3" in cli.stderr, cli.stderr


def test_catalog_ls_and_show(runs: Path) -> None:
    r = lab("catalog", "ls", "--runs-dir", str(runs))
    assert r.returncode == 0 and "rebuild_exact" in r.stdout and "incomplete" in r.stdout
    run = next(p for p in runs.iterdir() if "rebuild_exact" in p.name)
    r = lab("catalog", "show", run.name, "--runs-dir", str(runs))
    assert r.returncode == 0, r.stderr
    assert "cpu_model" in r.stdout and "lab_commit" in r.stdout and "rebuild_exact (2 rows)" in r.stdout
    # --json: the records the listing and the details are printed from
    listed = json.loads(lab("catalog", "ls", "--runs-dir", str(runs), "--json").stdout)
    assert sorted(x["status"] for x in listed) == ["complete", "complete", "incomplete"]
    detail = json.loads(lab("catalog", "show", run.name, "--runs-dir", str(runs), "--json").stdout)
    assert detail["record"]["run_id"] == run.name and detail["tables"] == {"rebuild_exact": 2}


def sweep_run(root: Path, fake_ms: float, params: dict[str, Any] | None = None) -> RunFolder:
    run = RunFolder.create(root, "sweep", "vm", params or {})
    stats = ArmStats(median_ms=fake_ms, n_ok=1)
    run.rewrite(SWEEP_POINTS, [
        SweepPoint(point="L512-n64", L=512, new=64, n_kv_padded=768, measurable=True, baseline=stats, fake=stats,
                   genuine=stats, opt_prefill_ms=20.0),
        SweepPoint(point="L512-n64-img", L=512, new=64, n_kv_padded=768, measurable=True, baseline=stats,
                   fake=ArmStats(median_ms=2 * fake_ms, n_ok=1), genuine=stats, opt_prefill_ms=40.0,
                   image="320x200", image_tokens=82, encode_ms=fake_ms),
    ])  # fmt: skip
    run.rewrite(SWEEP_SAMPLES, [])
    run.complete()
    return run


def test_compare_prints_ratios_and_refuses_mixed_runs(runs: Path) -> None:
    a, b = sweep_run(runs, 20.0), sweep_run(runs, 25.0)
    r = lab("compare", a.path.name, b.path.name, "--runs-dir", str(runs))
    assert r.returncode == 0, r.stderr
    row = next(line for line in r.stdout.splitlines() if "fake_median_ms" in line)
    assert "1.250" in row and "512" in row
    out = json.loads(lab("compare", a.path.name, b.path.name, "--runs-dir", str(runs), "--json").stdout)
    fake = [x for x in out["rows"] if x["metric"] == "fake_median_ms"]
    assert len(fake) == 2 and all(x["ratio"] == pytest.approx(1.25) and x["L"] == 512 for x in fake), fake
    # a catalog pulled without its run folders: the same rows from the catalog's tables
    cat = runs.parent / "catalog"
    assert lab("catalog", "ingest", "--runs-dir", str(runs), "--catalog-dir", str(cat)).returncode == 0
    empty = runs.parent / "elsewhere"
    args = ("compare", a.path.name, b.path.name, "--runs-dir", str(empty), "--catalog-dir", str(cat), "--json")
    assert json.loads(lab(*args).stdout)["rows"] == out["rows"]
    rebuild = next(p for p in runs.iterdir() if "rebuild_exact" in p.name)
    r = lab("compare", a.path.name, rebuild.name, "--runs-dir", str(runs))
    assert r.returncode == 1 and "cannot compare a sweep run with a rebuild_exact run" in r.stderr


def test_compare_table_and_report_show_the_same_rows(runs: Path, tmp_path: Path) -> None:
    """One compare core: the CLI table, `--report` and the heatmap take the same rows (image steps keyed apart)."""
    from lab.catalog.compare import compare_runs
    from lab.reports.compare import _sweep

    a, b = sweep_run(runs, 20.0), sweep_run(runs, 25.0)
    c = compare_runs(a.path, b.path)
    keys = {r.key for r in c.rows}
    # keyed by place too (a both-places sweep has a row per place); the image step is its own row, not merged
    assert keys == {("server", 512, 64, None), ("server", 512, 64, "320x200")}, keys
    env = {"LAB_REPORTS_DIR": str(tmp_path / "reports")}
    r = lab("compare", a.path.name, b.path.name, "--runs-dir", str(runs), "--report", env=env)
    assert r.returncode == 0, r.stderr
    printed = [line for line in r.stdout.splitlines() if "fake_median_ms" in line]
    assert len(printed) == 2 and any("320x200" in line for line in printed), r.stdout
    assert all("1.250" in line for line in printed)
    html = next(Path(x) for x in r.stdout.split() if x.endswith(".html"))
    assert html.exists() and a.path.name in html.name and html.parent == tmp_path / "reports"
    drawn = _sweep(c).ratios
    text_rows = [x for x in c.rows if x.key[3] is None and x.a and x.b and x.metric != "encode_ms"]
    assert sorted(drawn["ratio"]) == pytest.approx(sorted(x.ratio for x in text_rows))


def test_export_speaks_llama_bench_where_the_columns_overlap(tmp_path: Path) -> None:
    from lab.catalog.export import export_table
    from lab.core.errors import UsageError

    runs = tmp_path / "runs"
    sweep_run(runs, 25.0, params={"server": {"threads": 2}})
    catalog = tmp_path / "catalog"
    ingest(runs, catalog)
    rows = list(csv.DictReader(io.StringIO(export_table(catalog, "sweep_points", "csv"))))
    names = {"n_prompt", "n_depth", "avg_ts", "build_commit", "cpu_info", "model_filename", "n_threads"}
    assert rows and names <= set(rows[0])
    r = rows[0]
    assert (r["n_depth"], r["n_prompt"], r["n_threads"]) == ("512", "64", "2")
    assert float(r["avg_ts"]) == pytest.approx(float(r["n_prompt"]) / float(r["fake_median_ms"]) * 1e3)
    jsonl = [json.loads(line) for line in export_table(catalog, "sweep_points", "jsonl").splitlines()]
    assert [x["n_depth"] for x in jsonl] == [int(x["n_depth"]) for x in rows]
    md = export_table(catalog, "runs", "md").splitlines()
    assert md[0].startswith("| run_id | experiment |") and md[1].startswith("| --- |") and len(md) == 2 + 1
    with pytest.raises(UsageError, match="no catalog table 'nope'"):
        export_table(catalog, "nope", "csv")
    with pytest.raises(UsageError, match="--format is one of csv, jsonl, md"):
        export_table(catalog, "runs", "xml")


def test_a_run_folder_without_a_manifest_is_skipped_with_a_warning(
    runs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A crash between a run folder's mkdir and its first write used to block every ingest."""
    (runs / "2026-12-02_vm_sweep_abcdef" / "raw").mkdir(parents=True)
    r = ingest(runs, tmp_path / "catalog")
    assert (r.runs, r.in_figures) == (3, 2)
    err = capsys.readouterr().err
    assert "2026-12-02_vm_sweep_abcdef: skipped, no manifest.json" in err


def test_a_run_folder_of_an_older_format_is_named_and_never_read(
    runs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run of an experiment the lab no longer reads (`lab arms` before it became the sweep): ingest skips it
    with one line naming it, the listing says why, compare refuses it."""
    old = RunFolder.create(runs, "arms", "vm", {})
    (old.path / "raw" / "inproc_points.jsonl").write_text('{"point": "L512_n64"}\n')
    old.complete()
    r = ingest(runs, tmp_path / "catalog")
    assert (r.runs, r.in_figures) == (3, 2) and sum(r.rows.values()) == 2 + 15 + 3
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"warning: {old.path}: a 'arms' run, a format this lab does not read (it reads ")
    assert line.endswith("; skipped")
    listed = json.loads(lab("catalog", "ls", "--runs-dir", str(runs), "--json").stdout)
    assert next(x["error"] for x in listed if x["run_id"] == old.path.name).startswith(f"{old.path}: a 'arms' run")
    a = sweep_run(runs, 20.0)
    r = lab("compare", a.path.name, old.path.name, "--runs-dir", str(runs))
    assert r.returncode == 1 and f"{old.path}: a 'arms' run, a format this lab does not read" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_the_shared_model_hash_memo_survives_a_torn_write(tmp_path: Path) -> None:
    from lab.core.hashing import file_sha256
    from lab.core.modelfile import model_sha256

    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF" + bytes(100))
    (tmp_path / "model-sha256.json").write_text('{"torn": "by another proc')  # a writer killed mid-write
    assert model_sha256(model, tmp_path) == file_sha256(model)
    assert json.loads((tmp_path / "model-sha256.json").read_text())  # rewritten whole
    assert not list(tmp_path.glob(".model-sha256.json.*"))  # no temp left behind
