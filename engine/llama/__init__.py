"""The local engine: llama.cpp through llama-cpp-python, run in its own process (worker), with
speculative drafting, weight repacking and grammar-constrained sampling. The only room that loads
libllama, and only in the engine process.
Imports the base, settings, turns and models.
"""
