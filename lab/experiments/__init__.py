"""Experiments: each is a settings model, a run function and its row schemas (lab.core.schemas)."""
