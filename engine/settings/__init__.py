"""What the user asks for, in words: the config file and its checks, every setting's spec (sampling
parameters, engine knobs, presets, output formats, the thinking switch) and how a model is named.
Imports only the base (vibechat.engine's own modules: errors, files, sanitize, paths, system).
"""
