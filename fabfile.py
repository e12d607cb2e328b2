"""Fabric entry point: `fab -H nuc16 measure|arms|profile|snapshot|push` (tasks in lab/remote/tasks.py)."""

from lab.remote.tasks import arms, measure, profile, push, snapshot

__all__ = ["arms", "measure", "profile", "push", "snapshot"]
