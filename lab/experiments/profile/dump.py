"""The instrument's dump while a profile measures: its JSON lines merged whole into the run, cut back to complete
processes on resume (lab.core.runs.RunFolder.keep_whole), parsed, and stored as compressed Parquet."""

from __future__ import annotations

import subprocess
from collections.abc import Hashable
from pathlib import Path
from typing import Any

from rich.console import Console

from lab.core.console import progress_bar
from lab.core.jsonl import RawLimit, read_jsonl
from lab.core.runs import RunError, RunFolder
from lab.core.schemas import ProfileWall
from lab.engine.server import die_with_parent

DUMP = "profile"  # raw/profile.jsonl: the instrument's lines while the run measures (then Parquet)
# what the dump may hold: a line per node, depth, mode, rep and process (~150 bytes) outgrows the bound of every other
# table after hours of measuring (a deep profile of an 80-layer model at 50 cycles: ~1.2 GB); refused above it
DUMP_LIMIT = RawLimit(max_bytes=8 * 2**30, max_rows=100_000_000)


def node_table_schema() -> Any:
    import pyarrow as pa

    return pa.schema(
        [
            ("process", pa.int16()),
            ("fill", pa.string()),
            ("check", pa.bool_()),
            ("rep", pa.int32()),
            ("depth", pa.int32()),
            ("name", pa.string()),
            ("op", pa.string()),
            ("src0", pa.string()),
            ("layer", pa.int16()),
            ("band", pa.string()),
            ("ne0", pa.int64()),
            ("ne1", pa.int64()),
            ("ne2", pa.int64()),
            ("ne3", pa.int64()),
            ("ms", pa.float64()),
            ("calls", pa.int32()),
        ]
    )


def parse_dump(path: Path) -> tuple[dict[str, Any], list[ProfileWall], list[dict[str, Any]]]:
    meta: dict[str, Any] = {}
    walls: list[ProfileWall] = []
    nodes: list[dict[str, Any]] = []
    for row in read_jsonl(path, None, limit=DUMP_LIMIT):  # a bad line is one error naming the file and line
        kind = row.pop("kind")
        if kind == "meta":
            meta = row
        elif kind in ("fused", "timed"):
            walls.append(ProfileWall(mode=kind, **row))
        else:
            nodes.append(row)
    return meta, walls, nodes


def write_parquet(nodes: list[dict[str, Any]], path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    cols: dict[str, list[Any]] = {f.name: [] for f in node_table_schema()}
    for r in nodes:
        for k in ("process", "fill", "check", "rep", "depth", "name", "op", "src0", "layer", "band", "ms", "calls"):
            cols[k].append(r.get(k))
        for j in range(4):
            cols[f"ne{j}"].append(r["ne"][j])
    table = pa.Table.from_pydict(cols, schema=node_table_schema())
    tmp = path.with_name(f".{path.name}.tmp")  # written whole or not at all, as every raw file
    pq.write_table(table, tmp, compression="zstd", compression_level=9)
    tmp.replace(path)


def merge_part(dump: Path, part: Path) -> None:
    """Append what one instrument run wrote (`part`) to the run's dump, whole lines only (a killed instrument's
    torn last line would otherwise sit in the middle of the dump once the resumed run appends after it and
    block every later resume); the dump keeps a single meta line."""
    if not part.exists():
        return
    new = part.read_text()
    new = new[: new.rfind("\n") + 1]
    if dump.exists() and dump.stat().st_size:
        new = new.split("\n", 1)[1] if "\n" in new else ""
    with dump.open("a") as fh:
        fh.write(new)
    part.unlink()


def keep_complete_processes(run: RunFolder, walls_per_process: int) -> int:
    """Cut an interrupted instrument dump back to its complete processes (every wall row a process owes, with
    their nodes; the meta line stays) and return how many there are. Processes are written in order: 0..k-1."""

    def whole(process: Hashable, rows: list[dict[str, Any]]) -> bool:
        return process is None or sum(r["kind"] in ("fused", "timed") for r in rows) == walls_per_process

    if not run.table_path(DUMP).exists():
        return 0
    return sum(
        k is not None
        for k in run.keep_whole(DUMP, lambda r: r.get("process") if r["kind"] != "meta" else None, whole, DUMP_LIMIT)
    )


def run_instrument(cmd: list[str], log_path: Path, console: Console, n_steps: int, done_steps: int) -> None:
    """Run the instrument with a progress bar fed by its `progress` lines; never leave it running."""
    with log_path.open("a") as log, progress_bar(console) as progress:
        task = progress.add_task("profile", total=n_steps, completed=done_steps)
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.PIPE, text=True, preexec_fn=die_with_parent)
        assert proc.stderr is not None
        try:
            for line in proc.stderr:
                log.write(line)
                if line.startswith("progress "):
                    progress.update(task, advance=1, description=line.split(" ", 1)[1].rsplit(" ms=", 1)[0])
            rc = proc.wait()
        finally:
            if proc.poll() is None:  # interrupted
                proc.kill()
                proc.wait()
    if rc != 0:
        raise RunError(f"the instrument failed ({rc}); see {log_path}")
