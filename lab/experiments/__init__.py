"""Experiments: each is a settings model, a run function and its row schemas (lab.core.schemas).

They may import the catalog, the measurement parts, the conversation and rebuild labs, the in-process driver, the
instrument, the models, the engine and the core; never a presenter, a report or the CLI (the CLI passes the printer
in).
"""
