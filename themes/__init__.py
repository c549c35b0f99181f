"""vibechat's colour themes: Textual ``Theme`` objects, registered next to Textual's own."""

from __future__ import annotations

from textual.theme import Theme

DUSK = Theme(
    name="vibechat-dusk",
    primary="#C792EA",
    secondary="#82AAFF",
    accent="#FFCB6B",
    foreground="#E6E1F0",
    background="#1B1726",
    surface="#231E33",
    panel="#2E2842",
    success="#C3E88D",
    warning="#F78C6C",
    error="#FF5370",
    dark=True,
    variables={"block-cursor-text-style": "none", "footer-key-foreground": "#C792EA"},
)

PAPER = Theme(
    name="vibechat-paper",
    primary="#3B5BA9",
    secondary="#8A4FBF",
    accent="#C2571A",
    foreground="#2B2B2B",
    background="#F7F3EA",
    surface="#EFE9DC",
    panel="#E4DCCB",
    success="#3F7D3A",
    warning="#B7791F",
    error="#B3261E",
    dark=False,
)

TERMINAL = Theme(
    name="vibechat-phosphor",
    primary="#39FF88",
    secondary="#2BC2A0",
    accent="#E8FF5A",
    foreground="#B8F5C9",
    background="#07110B",
    surface="#0C1A11",
    panel="#123020",
    success="#39FF88",
    warning="#E8FF5A",
    error="#FF4D4D",
    dark=True,
)

THEMES: tuple[Theme, ...] = (DUSK, PAPER, TERMINAL)
