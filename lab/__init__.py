"""prefill lab: what an LLM agent step's prefill really costs on a CPU host when the prior context is a
cache hit, and where the time goes.

The layers, top to bottom, one folder each; a module imports only from layers below its own (`make lint`
checks it with lint-imports against the contract in pyproject.toml, and each package's docstring says what it
may import):

    remote                      running the lab on a target host (fab tasks, the bundle, the image)
    cli                         thin commands over the library
    reports                     the HTML site and its charts
    presenters                  what is printed, from the records the experiments keep
    experiments                 the experiments under one protocol
    catalog                     run folders into tables, comparisons, the newest run of each kind, the
                                headline, DVC tracking (dvc_hostkeys beside it: its name is in users' .pth files)
    conversation, rebuild,      what an experiment is made of: conversation arms, the rebuild labs, and in
    measure                     measure the clean room, peaks, plan, fills, time model, then the cost model
    inproc, instrument          the lab's two C++ tools on libllama (the in-process driver, the profiler)
    models                      a model's hyperparameters and state, the tiny models, the model to measure
    engine                      the patched llama.cpp (source, build, server, contract)
    core                        settings, runs, stats, schemas, errors, console, the GGUF reader, host records
"""

__version__ = "0.1.0"
