"""vibechat: terminal chat for local LLMs (TUI + CLI)."""
