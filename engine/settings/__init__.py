"""What the user asks for, in words: the settings table (setting.py's rows; knobs.py's
EngineSettings, the engine's settings, and table.py's Config, the engine's and the chat's: each
setting declared once, with its flag, variable, config key and help), the config file and its
checks (config.py, config_check.py, config_doc.py), every setting's values (choices.py, limits.py,
params.py for sampling, structured.py, think_switch.py, presets.py) and how a model is named.
Imports only the base (vibechat.engine's own modules: errors, files, sanitize, paths, system,
sizes).
"""
