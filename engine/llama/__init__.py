"""The local engine: llama.cpp through llama-cpp-python, run in its own process (worker), with
speculative drafting, weight repacking and grammar-constrained sampling. The only room that loads
libllama, and only in the engine process.
Imports the base, settings, turns and models.

The backend, llamacpp, and its parts: native (llama.cpp's log, its init, the grammar parser),
loading (the load's steps), memory_checks, prompting (the template, a conversation's tokens, what
fits), kv_cache (what the KV cache holds, the prefix a prompt reuses, snapshots restored and kept),
replying (a reply as it forms), decoding (the plain decode loop, sampling), drafting (speculative
decoding's loop, with draft_model and speculative's policy), repack (CPU weight repacking),
grammar_sampling, paths (a reply that goes on from a prefix: another path from a token),
kv_snapshots (the KV states kept after replies, in memory and on disk) with kv_files (their files)
and kv_state (taking and restoring one), prompt_parts and prompt_eval (a prompt's tokens, evaluated
into the KV cache), vision (images through the projector, libmtmd) with vision_errors. Its process:
worker (the chat's side: the Backend API and the process's life), worker_pipes (starting one and
reading its pipes), worker_watchdog (a hung one ended after a stop), worker_crashes (what a crash
says, and whether a fresh one follows), worker_preload, worker_child (the engine process),
worker_wire (the frames between them), worker_process (ending one), crash_report.
"""
