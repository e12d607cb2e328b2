"""Host and source snapshots written into a run folder before anything is measured."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from lab.core.redact import diff_excludes, redact_text
from lab.core.shell import LocalShell, Shell

# file name -> shell command; whatever a host cannot answer is recorded as such, never fatal
HOST_COMMANDS: dict[str, str] = {
    "uname.txt": "uname -a",
    "lscpu.txt": "lscpu",
    "free.txt": "free -b",
    "df.txt": "df -h .",
    "nproc.txt": "nproc",
    "os-release.txt": "cat /etc/os-release",
    "governor.txt": "cat /sys/devices/system/cpu/cpu*/cpufreq/scaling_governor | sort | uniq -c",
    "boost.txt": "cat /sys/devices/system/cpu/intel_pstate/no_turbo /sys/devices/system/cpu/cpufreq/boost",
    "loadavg.txt": "cat /proc/loadavg",
}


def snapshot_host(shell: Shell, dest: Path) -> dict[str, str]:
    """Run HOST_COMMANDS through the shell, write one file each; returns a short summary for the manifest."""
    dest.mkdir(parents=True, exist_ok=True)
    summary: dict[str, str] = {"host": shell.name}
    for name, cmd in HOST_COMMANDS.items():
        r = shell.run(cmd, timeout=30)
        text = r.stdout if r.ok and r.stdout.strip() else f"unavailable ({r.exited}): {r.stderr.strip()}\n"
        (dest / name).write_text(text)
    lscpu = (dest / "lscpu.txt").read_text()
    for line in lscpu.splitlines():
        key, _, val = line.partition(":")
        if key.strip() in ("Model name", "Architecture", "CPU(s)"):
            summary[key.strip()] = val.strip()
    summary["uname"] = (dest / "uname.txt").read_text().strip()
    return summary


def snapshot_git(shell: Shell, repo: str | Path, dest: Path, engine_diff: str | None = None) -> dict[str, str | bool]:
    """A lab checkout's commit, status and diff (git_diff.patch) through `shell`, and the engine tree's applied patch.

    `dirty` means the checkout's tracked files differ from its commit (git_diff.patch is not empty); untracked
    files such as run folders and their .dvc files are not dirt, but status.txt lists them."""
    dest.mkdir(parents=True, exist_ok=True)
    git = f"git -C {shlex.quote(str(repo))}"
    head = shell.run(f"{git} rev-parse HEAD", timeout=60)
    # in the container image the lab is installed, not checked out: the image carries its revision instead
    revision = os.environ.get("LAB_REVISION", "").strip() if isinstance(shell, LocalShell) else ""
    if head.ok:
        commit = head.stdout.strip()
    else:
        commit = f"{revision} (image revision)" if revision else "unknown (not a git checkout)"
    status = shell.run(f"{git} status --porcelain", timeout=60)
    # secret files stay out of the recorded diff, and secret values in what is left are masked (lab.core.redact)
    excludes = " ".join(shlex.quote(x) for x in diff_excludes())
    diff = shell.run(f"{git} diff HEAD --no-color --no-ext-diff -- . {excludes}", timeout=60)
    (dest / "commit.txt").write_text(commit + "\n")
    (dest / "status.txt").write_text(status.stdout if status.ok else f"unavailable ({status.exited})\n")
    (dest / "git_diff.patch").write_text(redact_text(diff.stdout) if diff.ok else "")
    if engine_diff is not None:
        (dest / "engine.patch").write_text(engine_diff)
    return {"commit": commit, "dirty": bool(diff.ok and diff.stdout.strip())}
