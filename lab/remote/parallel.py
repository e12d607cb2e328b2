"""`fab -H a,b measure`: the hosts in parallel, one thread and one Connection each, results keyed by host.

Fabric's own Executor calls a task once per host, one after another, and the first failure stops the rest.
fabric.yaml (next to fabfile.py) names this executor (`tasks.executor_class`): consecutive calls of one task
on several hosts run at once; a host that fails does not stop the others, and a summary per host follows.
Each host alias gets its own Connection (Fabric's ThreadingGroup would merge two aliases that resolve to the
same user@host:port). Shared local work is serialised where it must be: the bundle build (a file lock) and
`dvc add` (lab.remote.tasks).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from fabric.executor import Executor
from fabric.tasks import ConnectionCall
from invoke.exceptions import Exit


@dataclass
class HostOutcome:
    host: str
    ok: bool
    detail: str


def _host_of(call: Any) -> str:
    return str(call.init_kwargs.get("host", "?"))


def _outcome(host: str, work: Callable[[], Any]) -> HostOutcome:
    try:
        result = work()
    except Exit as e:
        return HostOutcome(host, e.code == 0, str(e.message or f"exit {e.code}"))
    except Exception as e:  # one host's failure is reported, the others go on
        return HostOutcome(host, False, f"{type(e).__name__}: {e}")
    return HostOutcome(host, True, "" if result is None else str(result))


def _groups(calls: list[Any]) -> list[list[Any]]:
    """Consecutive per-host calls of the same task form one group; anything else is a group of one."""
    out: list[list[Any]] = []
    for call in calls:
        prev: Any = out[-1][-1] if out else None
        same = isinstance(call, ConnectionCall) and isinstance(prev, ConnectionCall) and prev.task is call.task
        if same and call.args == prev.args and call.kwargs == prev.kwargs:
            out[-1].append(call)
        else:
            out.append([call])
    return out


class ParallelExecutor(Executor):  # type: ignore[misc]
    def execute(self, *tasks: Any) -> dict[Any, Any]:
        calls = self.expand_calls(self.normalize(tasks))
        results: dict[Any, Any] = {}
        failed: list[HostOutcome] = []
        for group in _groups(calls):
            if len(group) == 1:
                call = group[0]
                results[call.task] = call.task(self._context(call), *call.args, **call.kwargs)
                continue
            outcomes = self._run_parallel(group)
            results[group[0].task] = {o.host: o for o in outcomes}
            self._summary(group[0].task.name, outcomes)
            failed += [o for o in outcomes if not o.ok]
        if failed:
            raise Exit(f"failed on {len(failed)} host(s): {', '.join(o.host for o in failed)}", code=1)
        return results

    def _context(self, call: Any) -> Any:
        self.config.load_collection(self.collection.configuration(call.called_as))
        self.config.load_shell_env()
        return call.make_context(self.config)

    def _run_parallel(self, group: list[Any]) -> list[HostOutcome]:
        # Connections are made here, in order; only the task bodies run in threads
        contexts = [(call, self._context(call)) for call in group]
        lock = threading.Lock()

        def one(call: Any, c: Any) -> HostOutcome:
            outcome = _outcome(_host_of(call), lambda: call.task(c, *call.args, **call.kwargs))
            with lock:
                print(f"[{outcome.host}] {'done' if outcome.ok else 'FAILED'}", flush=True)
            return outcome

        with ThreadPoolExecutor(max_workers=len(group), thread_name_prefix="host") as pool:
            futures: list[Future[HostOutcome]] = [pool.submit(one, call, c) for call, c in contexts]
            try:
                return [f.result() for f in futures]
            except KeyboardInterrupt:
                # Closing the connections hangs up the remote runs (they end `incomplete`); each thread then
                # fetches what was written on a fresh connection and returns.
                print("interrupted: hanging up every host, then fetching what was written", file=sys.stderr)
                for _, c in contexts:
                    c.close()
                return [f.result() for f in futures]

    @staticmethod
    def _summary(task: str, outcomes: list[HostOutcome]) -> None:
        width = max(len(o.host) for o in outcomes)
        print(f"\n{task} on {len(outcomes)} hosts:")
        for o in outcomes:
            detail = o.detail.strip().splitlines()[-1] if o.detail.strip() else ""
            print(f"  {o.host:<{width}}  {'ok    ' if o.ok else 'FAILED'}  {detail}")
        sys.stdout.flush()
