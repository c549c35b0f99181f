"""The shell: `app.VibechatApp` composes the screen, declares the bindings (`bindings`) and the
command palette (`palette`), routes messages to the controllers; notices, the outside-text
app base (`outside_app`), the config file's chat settings (`config_ui`).
May import every other room of the TUI.
"""
