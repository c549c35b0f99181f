"""The shell: `app.VibechatApp` composes the screen, declares the bindings (`bindings`) and the
command palette (`palette`), routes messages to the controllers; its mixins hold the bindings'
actions (`actions`), the keys as bound (`bound_keys`) and the theme (`theme_choice`), typed
against `app_face`; where a key or a paste goes first (`key_routing`), the side panels
(`side_panels`), the sampling parameters' changes and nudge keys (`param_changes`), notices, the
outside-text app base (`outside_app`), the config file's chat settings (`config_ui`).
May import every other room of the TUI.
"""
