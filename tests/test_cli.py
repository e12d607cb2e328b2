"""The command tree itself: `lab trace replay` is the trace replay and `lab replay-trace` a hidden alias of it,
`lab rebuild` the rebuild labs and `lab replay` their hidden old name,
`lab --help` imports nothing heavy, and the fab tasks still read their options from the commands they run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from lab.cli import app

pytestmark = pytest.mark.fast

REPO = Path(__file__).resolve().parent.parent


def test_trace_replay_is_the_replay_and_replay_trace_a_hidden_alias() -> None:
    root = get_command(app)
    new, old = root.commands["trace"].commands["replay"], root.commands["replay-trace"]  # type: ignore[attr-defined]
    assert old.hidden and not new.hidden and old.help == new.help
    assert [p.opts for p in old.params] == [p.opts for p in new.params]
    runner = CliRunner()
    top = runner.invoke(app, ["--help"], env={"COLUMNS": "200"})
    assert top.exit_code == 0 and "replay-trace" not in top.output and "trace " in top.output, top.output
    for args in (["trace", "replay", "--help"], ["replay-trace", "--help"]):
        r = runner.invoke(app, args, env={"COLUMNS": "200"})
        assert r.exit_code == 0 and "--resume" in r.output and "--reps" in r.output, r.output


def test_the_rebuild_labs_answer_to_their_old_name_hidden() -> None:
    root = get_command(app)
    new, old = root.commands["rebuild"], root.commands["replay"]  # type: ignore[attr-defined]
    assert old.hidden and not new.hidden and sorted(old.commands) == sorted(new.commands) == ["cost", "exact", "span"]
    top = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"})
    assert top.exit_code == 0 and "rebuild " in top.output and "│ replay " not in top.output, top.output


def test_help_imports_only_the_cli() -> None:
    code = (
        "import json, sys; before = set(sys.modules); import lab.cli; "
        "print(json.dumps(sorted(m for m in sys.modules if m not in before)))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    loaded = json.loads(r.stdout)
    heavy = [m for m in loaded if m.split(".")[0] in ("pydantic", "rich", "numpy", "pandas", "pyarrow", "httpx")]
    lab = [m for m in loaded if m.startswith("lab.") and not m.startswith("lab.cli")]
    assert not heavy and not lab, (heavy, lab)


def test_fab_tasks_forward_the_options_of_the_commands_they_run() -> None:
    from lab.remote.forward import lab_args, lab_options

    for command in ("sweep", "arms", "profile"):
        flags = {o.flag for o in lab_options(command)}
        assert {"--threads", "--model"} <= flags and "--resume" not in flags, (command, flags)
    assert {"--threads-batch", "--depths", "--clean-room"} & {o.flag for o in lab_options("profile")} == {
        "--threads-batch",
        "--depths",
    }
    threadpool = next(o for o in lab_options("profile") if o.flag == "--threadpool")
    assert threadpool.negative == "--no-threadpool"
    sweep = lab_options("sweep")  # a fab option is spelled as the lab's: `fab -H nuc16 measure --engine latest`
    assert all(o.flag == "--" + o.param.replace("_", "-") for o in sweep if o.flag != "--Ls"), sweep
    assert lab_args("sweep", sweep, {"engine": "latest", "threads": 4}) == [
        "sweep",
        "--threads",
        "4",
        "--engine",
        "latest",
    ]


def test_a_finished_run_prints_by_its_experiments_name_not_its_class() -> None:
    """A tune is a conversation replay (its class a Replay) and prints its own tables: the printer is the one of
    its name, whatever order the experiments are listed in."""
    from lab.cli.show import PRINTERS
    from lab.experiments.conversation import Replay
    from lab.experiments.decode import DecodeCheck
    from lab.experiments.profile.run import Profile
    from lab.experiments.sweep.run import Sweep
    from lab.experiments.tune import Tune

    assert issubclass(Tune, Replay)
    names = [e.name for e in (Sweep, Profile, DecodeCheck, Tune, Replay)]
    assert sorted(PRINTERS) == sorted(names) and len(set(PRINTERS.values())) == len(names)
    assert PRINTERS[Tune.name].__name__ == "_tune" and PRINTERS[Replay.name].__name__ == "_replay"
