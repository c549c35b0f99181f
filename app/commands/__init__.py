"""The `vibechat` command line. `cli.py` builds the Typer app (with `version`, `click_patches`
and `run_args`); each command's work lives in its own module: `run` (one prompt; its parts
`run_request`, `run_input`, `run_output`, `run_result`), `batch` (`--prompts-file`), `history`
and `cache` (saved conversations, their KV snapshots), `models`, `config`, `presets`, `tools`;
with what only the commands need: `clitools` (plain output, tables, errors in one line), `bounds`
and `interrupt` (a run's limits, Ctrl-C), `tool_options` (`--allow-tool`, `--mcp-config`).
Imports app/'s shared modules and the chat's factory (`vibechat.app.tui.create_app`); nothing
in app/ outside this room imports it.
"""
