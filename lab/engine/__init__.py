"""The engine: llama.cpp at the pin, the lab's patch, the CPU build, the tiny model, the server."""
