"""The GGUF side: reading a model file's keys and tensor table (gguf_io), its hyperparameters and state shape
(hparams, memshape), resolving the model to measure (resolve: the user's file, the tiny default, a projector),
writing the tiny synthetic models and projector (tinymodel, tinyarchs, tinyvocab, tinyemit, tinyvision), and a
pretrained quantized model assembled from the package index (pretrained)."""
