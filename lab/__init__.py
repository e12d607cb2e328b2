"""prefill lab: what an LLM agent step's prefill really costs on a CPU host when the prior context is a
cache hit, and where the time goes.

The layers, top to bottom; a module imports only from layers below its own (`make lint` checks it with
lint-imports against the contract in pyproject.toml):

    remote                      running the lab on a target host (fab tasks, the bundle, the image)
    cli                         thin commands over the library
    reports, dvc_setup          the HTML site and its charts; the DVC remote
    presenters, headline        what is printed, from the records the experiments keep; the answer
    experiments                 the experiments under one protocol
    catalog                     run folders into tables, comparisons, the newest run of each kind
    conversation, replay, ...   what an experiment is made of (conversation arms, replay labs, clean room,
                                peaks, plan, fills, time model), then inproc and the cost model, the instrument
    engine, models              the patched llama.cpp (source, build, server, contract) and the models
    core                        settings, runs, stats, schemas, errors, console, host snapshots and noise
"""

__version__ = "0.1.0"
