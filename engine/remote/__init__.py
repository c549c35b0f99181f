"""OpenAI-compatible servers (llama-server, vLLM, Ollama, LM Studio …) as a Backend.
Imports the base, settings and turns.
"""
