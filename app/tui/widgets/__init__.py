"""Widgets: the input, the parameter panel and its sliders, the conversation list, the status
and config bars, the attachment tray, the welcome text, the token lens on a reply. Each owns its
behaviour and CSS, takes attributes down and posts messages up.
Imports the TUI's base modules (tui/*.py); never the conversation, screens, controllers or shell.
"""
