"""The GGUF side: a model's hyperparameters and state shape from its keys (hparams, memshape; the file reader is
lab.core.gguf_io), resolving the model to measure (resolve: the user's file, the tiny default, a projector),
writing the tiny synthetic models and projector (the tiny package: model, archs, vocab, emit, vision), and a
pretrained quantized model assembled from the package index (pretrained).

It may import the engine (the llama.cpp source its writers use) and the core.
"""
