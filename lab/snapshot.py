"""Host and source snapshots written into a run folder before anything is measured."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from lab.target import Target

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


def snapshot_host(target: Target, dest: Path) -> dict[str, str]:
    """Run HOST_COMMANDS on the target, write one file each; returns a short summary for the manifest."""
    dest.mkdir(parents=True, exist_ok=True)
    summary: dict[str, str] = {"host": target.name}
    for name, cmd in HOST_COMMANDS.items():
        r = target.run(cmd, timeout=30)
        text = r.stdout if r.ok and r.stdout.strip() else f"unavailable ({r.exited}): {r.stderr.strip()}\n"
        (dest / name).write_text(text)
    lscpu = (dest / "lscpu.txt").read_text()
    for line in lscpu.splitlines():
        key, _, val = line.partition(":")
        if key.strip() in ("Model name", "Architecture", "CPU(s)"):
            summary[key.strip()] = val.strip()
    summary["uname"] = (dest / "uname.txt").read_text().strip()
    return summary


def _git(repo: Path, *args: str) -> tuple[int, str]:
    p = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    return p.returncode, p.stdout


def snapshot_git(repo: Path, dest: Path, engine_diff: str | None = None) -> dict[str, str | bool]:
    """The lab checkout's commit, status and diff (git_diff.patch), and the engine tree's applied patch."""
    dest.mkdir(parents=True, exist_ok=True)
    rc, commit = _git(repo, "rev-parse", "HEAD")
    # in the container image the lab is installed, not checked out: the image carries its revision instead
    revision = os.environ.get("LAB_REVISION", "").strip()
    if rc == 0:
        commit = commit.strip()
    else:
        commit = f"{revision} (image revision)" if revision else "unknown (not a git checkout)"
    _, status = _git(repo, "status", "--porcelain")
    _, diff = _git(repo, "diff", "HEAD", "--no-color", "--no-ext-diff")
    (dest / "commit.txt").write_text(commit + "\n")
    (dest / "status.txt").write_text(status)
    (dest / "git_diff.patch").write_text(diff)
    if engine_diff is not None:
        (dest / "engine.patch").write_text(engine_diff)
    return {"commit": commit, "dirty": bool(status.strip())}
