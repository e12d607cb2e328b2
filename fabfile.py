"""Fabric entry point: `fab -H nuc16 measure|profile|snapshot|push` (tasks in lab/remote/tasks.py)."""

from lab.remote.tasks import measure, profile, push, snapshot

__all__ = ["measure", "profile", "push", "snapshot"]
