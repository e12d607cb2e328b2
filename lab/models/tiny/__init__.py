"""The tiny synthetic models and projector: the writer, its architectures, emit channel, vision and vocab."""
