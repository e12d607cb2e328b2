"""The engine: llama.cpp at the pin (source), the lab's patch and the CPU build (build), the patched server's
lifecycle (server) and the config it resolved (resolved), the one client of its contract (contract, check, slots),
pinning, and image steps (media, imagegrid, png). The model files it runs are lab.models'.

It may import the core only (a model is a path it is given).
"""
