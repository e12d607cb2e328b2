"""fab tasks forward the lab's own options: a task's options are read from the `lab` command it runs on the
host (the Typer CLI), so every option is declared once, in lab/cli/, and `fab -H nuc16 measure --help`
lists the same options as `lab sweep --help` (less those that only make sense here)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lab.core.errors import UsageError

# set by the task itself on the host; --host-ok: a run resumed on its host is measured where it was
NOT_FORWARDED = {"runs_dir", "resume", "clean_room", "host_ok"}


@dataclass(frozen=True)
class Forwarded:
    """One lab option as a fab task option: `param` on the fab side, `flag` on the lab's."""

    param: str
    flag: str
    help: str
    negative: str | None = None  # a boolean --x/--no-x option: the --no-x form


def lab_options(command: str) -> list[Forwarded]:
    """The options of `lab <command>` a fab task forwards."""
    from typer.main import get_command

    from lab.cli import app

    cmd = get_command(app).commands[command]  # type: ignore[attr-defined]  # typer vendors its own click
    out = []
    for p in cmd.params:
        if getattr(p, "param_type_name", "") != "option" or p.name in NOT_FORWARDED or p.nargs != 1 or not p.name:
            continue
        flag = max(p.opts, key=len)  # --threads, not -t
        negative = p.secondary_opts[0] if p.is_flag and p.secondary_opts else None
        param = flag.removeprefix("--").replace("-", "_").lower()  # fab's option spelled as lab's: --engine
        out.append(Forwarded(param, flag, p.help or "", negative))
    return out


def lab_args(command: str, options: list[Forwarded], given: dict[str, Any]) -> list[str]:
    """`lab <command>` with the options the fab task was given."""
    args = [command]
    for o in options:
        v = given.get(o.param)
        if v is None:
            continue
        if o.negative is not None:  # fab passes the value as text: --threadpool on|off
            truth = str(v).lower()
            if truth not in ("on", "off", "true", "false", "yes", "no", "1", "0"):
                raise UsageError(f"--{o.param.replace('_', '-')} takes on or off, got {v!r}")
            args.append(o.flag if truth in ("on", "true", "yes", "1") else o.negative)
        else:
            args += [o.flag, str(v)]
    return args


def forwarding_task(
    command: str,
    name: str,
    doc: str,
    own: dict[str, tuple[Any, str]],
    run: Callable[[Any, list[str], dict[str, Any]], str],
) -> Any:
    """A fab task `name` whose options are those of `lab <command>` plus its `own` ({param: (default, help)});
    `run(c, lab_args, own_values)` does the work."""
    from fabric import task

    options = lab_options(command)

    def body(c: Any, **kw: Any) -> str:
        mine = {k: kw.pop(k) for k in own if k in kw}
        return run(c, lab_args(command, options, kw), mine)

    params = [inspect.Parameter("c", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    params += [inspect.Parameter(o.param, inspect.Parameter.KEYWORD_ONLY, default=None) for o in options]
    params += [inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY, default=d) for k, (d, _) in own.items()]
    body.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]  # invoke reads the options here
    body.__name__ = body.__qualname__ = name
    body.__doc__ = doc
    helps = {o.param: o.help + (" (on|off)" if o.negative else "") for o in options}
    helps.update({k: h for k, (_, h) in own.items()})
    return task(help=helps, auto_shortflags=False)(body)
