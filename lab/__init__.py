"""prefill lab: what an LLM agent step's prefill really costs on a CPU host when the prior context is a
cache hit, and where the time goes."""

__version__ = "0.1.0"
