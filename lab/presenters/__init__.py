"""What the CLI prints: each module formats the records it is given and returns a printable (rich) or text, one
module per topic (the catalog's tables and headline, a comparison, the cost model, the engine, and each
experiment's closing tables; lab.presenters.runs picks those of a finished run).

They format the records they are given: they may import the records of the catalog, the conversation, the
measurement parts, the engine and the core; never an experiment, an engine build or server, the run folders
(lab.core.runs), a report or the CLI (pyproject.toml, [tool.importlinter]). What builds, runs or reads the runs
folder is the experiments' (the CLI calls it and passes the result here).
"""
