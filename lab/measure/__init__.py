"""What the experiments measure with, below them: the clean room, the host's peaks, the plan of a run, the
in-process fill passes, the cost model from a GGUF and the time model built on it. It imports the engine, the
models, the in-process driver and the core; never an experiment, the catalog or anything that prints a run."""
