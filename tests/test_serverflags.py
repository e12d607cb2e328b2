"""A llama-server's own defaults, read from its --help (lab.engine.serverflags): the parser on the help's layout,
and each supported release's binary against the defaults the lab expects of it (a moved default fails here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.engine.serverflags import ServerFlagsError, parse_defaults, read_defaults

from conftest import EngineOf

HELP = """\
-b,    --batch-size N                   logical maximum batch size (default: 2048)
                                        (env: LLAMA_ARG_BATCH)
-ub,   --ubatch-size N                  physical maximum batch size (default: 512)
-ctxcp, --ctx-checkpoints, --swa-checkpoints N
                                        max number of context checkpoints to create per slot (default:
                                        32)[(more info)](https://github.com/ggml-org/llama.cpp/pull/15293)
-cms,  --checkpoint-min-step N          minimum spacing between context checkpoints in tokens (default: 8192,
                                        0 = no minimum)
-cram, --cache-ram N                    set the maximum cache size in MiB (default: 8192, -1 - no limit, 0 -
                                        disable)
--cache-idle-slots, --no-cache-idle-slots
                                        save idle slots (default: enabled, requires cache-ram)
--cache-reuse N                         min chunk size to attempt reusing from the cache via KV shifting,
                                        requires prompt caching to be enabled (default: 0)
--reasoning-preserve, --no-reasoning-preserve
                                        preserve reasoning trace in the full history, not just the last
                                        assistant message (default: enabled)
"""


@pytest.mark.fast
def test_the_help_layout_is_read_with_its_wrapped_defaults() -> None:
    d = parse_defaults(HELP, "0.5.0-dev")
    assert (d.checkpoints, d.checkpoint_min_step, d.cache_ram_mib, d.cache_reuse) == (32, 8192, 8192, 0)
    assert (d.ubatch, d.batch, d.cache_idle_slots, d.reasoning_preserve) == (512, 2048, True, True)
    older = parse_defaults(HELP.split("--reasoning-preserve")[0], "1 (465b1f0e7)")
    assert older.reasoning_preserve is None  # a flag the version does not have


@pytest.mark.fast
def test_a_binary_that_is_not_a_server_is_one_line() -> None:
    with pytest.raises(ServerFlagsError, match="no default for --ctx-checkpoints"):
        parse_defaults("usage: something else\n", "?")


@pytest.mark.engine
@pytest.mark.parametrize(
    ("release", "commit", "min_step", "preserve"),
    [("pin", "465b1f0e7", 256, None), ("latest", "0c1e57098", 8192, True)],
)
def test_each_release_s_server_has_the_defaults_the_lab_models(
    engine_of: EngineOf, release: str, commit: str, min_step: int, preserve: bool | None
) -> None:
    engine = engine_of(release)
    d = read_defaults(engine.server, engine.lib_dir)
    assert commit in d.version
    assert (d.checkpoints, d.checkpoint_min_step, d.cache_ram_mib, d.cache_reuse) == (32, min_step, 8192, 0)
    assert (d.ubatch, d.batch, d.cache_idle_slots, d.reasoning_preserve) == (512, 2048, True, preserve)


@pytest.mark.fast
def test_a_version_line_names_its_release_and_its_rules() -> None:
    from lab.conversation.rules import LATEST, PIN, rules_for
    from lab.engine.serverflags import release_of

    assert (release_of("1 (465b1f0e7)"), rules_for("1 (465b1f0e7)")) == ("0.3.27", PIN)
    assert rules_for("1 (7c158fbb4)") == PIN  # 0.3.26 takes the pin's series, and its rules
    assert (release_of("0.5.0-dev (build 1, commit 0c1e57098)"), rules_for("commit 0c1e57098")) == ("0.3.36", LATEST)
    assert release_of("9 (deadbeef0)") == "0.3.36"  # a build the lab does not know: the newest


@pytest.mark.fast
def test_a_named_binary_that_is_not_a_server_is_one_line(tmp_path: Path) -> None:
    from lab.engine.serverflags import users_server

    with pytest.raises(ServerFlagsError, match="not an executable file"):
        users_server(tmp_path / "nope")
    with pytest.raises(ServerFlagsError, match="is this a llama-server"):
        users_server(Path("/bin/true"))
