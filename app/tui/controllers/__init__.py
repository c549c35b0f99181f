"""Controllers: each owns one part of the chat's work and its state and answers its own messages:
`Replies` (a reply on screen), `ModelLoads` (the model's load), `QueuedPrompts` (a prompt waiting
for the reply), `Regenerations` (Ctrl+R), `Paths` (another path from a token of a reply),
`ThinkingBlocks` (the thinking's keys), `ToolRounds` (a reply's tool calls), `Attachments`
(`/image`, `/file`, the tray), `Models` (picker, switching, downloads), `Conversations` (saved
conversations: the list, opening one; their `Titles` and `Exports`), `Branches` (a conversation's
branches, forks), `Links`, `Copies`, `PromptEdit` (a message taken back to edit), the slash
commands and presets, `Lens` (the token lens: its switch, opened on a reply). They see the app
only through `host.ChatHost`; `events` are the messages between them and the app.
Imports the TUI's base modules, widgets, the conversation and screens; never the shell.
"""
