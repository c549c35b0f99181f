"""The conversation on screen: the chat view and its messages, a reply's stream into Markdown
(segmenter, markdown_segment), the foldable thinking, tool and attachment blocks, pacing of
renders while a reply streams.
Imports the TUI's base modules and widgets; never screens, controllers or the shell.
"""
