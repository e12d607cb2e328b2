"""A model named by its path on a target host, described there by the host's own python3 with nothing of the
lab installed (`python3 -I`: no site packages, no lab on the path): its path, size, mtime, sha256 (memoised as
the lab's runs there read it) and metadata, or one line when it is missing or not a GGUF; the run's model record
through a container's mount; the compare line that names a model by its sha256."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from test_costmodel import SMALL, write_gguf

from lab.catalog.compare import Comparison, ModelRef
from lab.core.errors import UsageError
from lab.core.hashing import file_sha256
from lab.core.modelfile import MEMO, memo_key, model_record, model_sha256
from lab.core.settings import Settings
from lab.remote.modelcheck import HostModel, check_script, model_arg, with_model
from lab.remote.modelpush import local_model

pytestmark = pytest.mark.fast


def on_host(path: Path, cache: Path) -> dict[str, object]:
    """The check as a host runs it: a bare interpreter, the script in the command."""
    r = subprocess.run(
        ["python3", "-I", "-c", check_script(), str(path), str(cache)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",
        env={"PATH": os.environ["PATH"]},
    )
    assert r.returncode == 0, r.stderr
    out: dict[str, object] = json.loads(r.stdout)
    return out


def test_the_host_describes_a_model_with_nothing_of_the_lab_installed(tmp_path: Path) -> None:
    (tmp_path / "models").mkdir()
    model = write_gguf(tmp_path / "models" / "x.gguf", SMALL)
    cache = tmp_path / "cache"
    info = on_host(model, cache)
    assert info["path"] == str(model.resolve()) and info["size"] == model.stat().st_size
    assert info["sha256"] == file_sha256(model)
    meta = info["meta"]
    assert isinstance(meta, dict) and meta["general.architecture"] == "qwen35moe"
    # remembered by path, size and mtime, where a run on the host looks (LAB_CACHE_DIR there): not hashed again
    memo = json.loads((cache / MEMO).read_text())
    assert memo == {memo_key(model): file_sha256(model)}
    memo[memo_key(model)] = "remembered"
    (cache / MEMO).write_text(json.dumps(memo))
    assert on_host(model, cache)["sha256"] == "remembered" == model_sha256(model, cache)


def test_a_missing_path_and_a_file_that_is_not_a_gguf_are_one_line_each(tmp_path: Path) -> None:
    missing = on_host(tmp_path / "nope.gguf", tmp_path / "cache")
    assert missing == {"error": f"{tmp_path / 'nope.gguf'}: no such file"}
    text = tmp_path / "notes.gguf"
    text.write_text("not a model at all\n" * 10)
    bad = on_host(text, tmp_path / "cache")
    assert bad == {"error": f"{text}: not a GGUF file"}
    assert on_host(tmp_path, tmp_path / "cache") == {"error": f"{tmp_path}: not a file"}
    assert not (tmp_path / "cache").exists()  # nothing hashed, nothing written


def test_a_run_in_the_container_records_the_hosts_file(tmp_path: Path) -> None:
    model = tmp_path / "seen.gguf"
    model.write_bytes(b"GGUF" + bytes(64))
    st = model.stat()
    host = HostModel("/srv/models/x.gguf", st.st_size, st.st_mtime_ns, "ab" * 32, "qwen35moe")
    record = model_record(model, tmp_path / "cache", host.origin())
    assert record == {"path": "/srv/models/x.gguf", "sha256": "ab" * 32, "size": st.st_size, "seen_as": str(model)}
    assert not (tmp_path / "cache").exists()  # the host's hash, not hashed again
    other = HostModel("/srv/models/x.gguf", st.st_size + 1, st.st_mtime_ns, "ab" * 32, "qwen35moe")
    assert model_record(model, tmp_path / "cache", other.origin())["sha256"] == file_sha256(model)  # not that file
    assert host.mount == "/models/host/x.gguf"
    assert HostModel("/srv/a b;$(x).gguf", 1, 1, "", "").mount == "/models/host/model.gguf"


def test_the_model_argument_is_found_and_replaced() -> None:
    args = ["sweep", "--ls", "256", "--model", "/srv/m.gguf", "--reps", "1"]
    assert model_arg(args) == "/srv/m.gguf" and model_arg(["sweep", "--model"]) is None
    assert with_model(args, "/models/host/m.gguf") == [
        "sweep",
        "--ls",
        "256",
        "--model",
        "/models/host/m.gguf",
        "--reps",
        "1",
    ]


def test_compare_names_the_model_by_its_sha256_not_its_file_name() -> None:
    same = Comparison("sweep", "a", "b", (), [], models=(ModelRef("f" * 64, "/a/x.gguf"), ModelRef("f" * 64, "/b/y")))
    assert same.same_model and same.model_line() == (
        f"the same model, sha256 {'f' * 12} (A /a/x.gguf, B /b/y); both on llama.cpp of an unrecorded commit"
    )
    other = Comparison("sweep", "a", "b", (), [], models=(ModelRef("f" * 64, "/x"), ModelRef("e" * 64, "/x")))
    assert other.same_model is False and other.model_line().startswith("different models: A sha256 ffffffffffff")
    assert Comparison("sweep", "a", "b", (), []).same_model is None
    # and each side's llama.cpp, named
    engines = (ModelRef("f" * 64, "/x", "465b1f0e7"), ModelRef("f" * 64, "/x", "0c1e57098"))
    line = Comparison("sweep", "a", "b", (), [], models=engines).model_line()
    assert line.endswith("; A on llama.cpp 465b1f0e7 (pin), B on llama.cpp 0c1e57098 (latest)")


def test_a_model_to_push_is_checked_here_first(tmp_path: Path, settings: Settings) -> None:
    (tmp_path / "notes.gguf").write_text("not a model\n")
    with pytest.raises(UsageError, match=r"^--push-model: --model .*/nope.gguf: no such file here$"):
        local_model(str(tmp_path / "nope.gguf"), settings)
    with pytest.raises(UsageError, match=r"^--push-model: .*/notes.gguf: not a GGUF file$"):
        local_model(str(tmp_path / "notes.gguf"), settings)
    model = write_gguf(tmp_path / "m.gguf", SMALL)
    assert local_model(str(model), settings) == model


def test_the_compare_table_prints_a_hosts_file_name_as_text_not_markup() -> None:
    from rich.console import Console

    from lab.presenters.compare import compare_table

    models = (ModelRef("f" * 64, "/srv/[bold]x.gguf"), ModelRef("f" * 64, "/y"))
    c = Comparison("sweep", "a", "b", (), [], models=models)
    console = Console(width=200, record=True)
    console.print(compare_table(c))
    assert "(A /srv/[bold]x.gguf, B /y)" in " ".join(console.export_text().split())  # the title wraps
