"""Screens and dialogs: help, `/show info`, the model picker and downloader, the history's
search/rename/export dialogs, presets, and every question (`question.QuestionScreen`: the
tool approval, yes/no confirmations). `dialog.py` holds the frame every dialog shares.
Imports the TUI's base modules and widgets; never controllers or the shell.
"""
