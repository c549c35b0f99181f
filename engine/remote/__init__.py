"""OpenAI-compatible servers (llama-server, vLLM, Ollama, LM Studio …) as a Backend.
Imports the base, settings and turns.

openai_backend: the backend; options: the server's URL and API key (importers take their
names from there); client: the HTTP client, its deadlines and one-line errors; listing: the
server's models; request: the chat request's body; sse: the server-sent events, bounded;
reply: the reply's text, thinking and stats; tool_stream: the tool calls a reply streams.
"""
