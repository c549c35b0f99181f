"""Which key strings a ``[keys]`` binding may use: those Textual can report for a key press.

The app's, not the engine's: the engine's config reads ``[keys]`` generically (binding id =
key string) and asks the app's binding ids (``appconfig.BINDING_IDS``) whether a key string
is one. Checked here without Textual (``vibechat run`` and ``vibechat config`` read the config
too, and stay light); a test keeps these tables in step with Textual's own. The grammar, spaces
ignored::

    keys     = key ("," key)*                    several keys for one binding: "f12,ctrl+t"
    key      = (modifier "+")* name
    modifier = alt | ctrl | hyper | meta | shift | super
               each at most once, in this order (Textual reports them sorted): "ctrl+shift+up"
    name     = a single printable character         alone: any but "," ("?", "X", "é");
                                                    after a modifier: a lower-case letter or a digit
             | f1 ... f35
             | a named key: escape, enter, tab, space, backspace, delete, insert, home, end,
               pageup, pagedown, up, down, left, right, caps_lock, scroll_lock, num_lock,
               print_screen, pause, menu
             | a punctuation name: comma, full_stop, slash, question_mark, plus, minus ...
               (PUNCTUATION_NAMES; "ctrl+comma", never "ctrl+,")

Everything is lower case but a lone character ("X" is shift+x as Textual reports it).
"""

from __future__ import annotations

import difflib

MODIFIERS = ("alt", "ctrl", "hyper", "meta", "shift", "super")

# Textual's names for the printable ASCII punctuation (textual.keys._character_to_key).
PUNCTUATION_NAMES: dict[str, str] = {
    "!": "exclamation_mark",
    '"': "quotation_mark",
    "#": "number_sign",
    "$": "dollar_sign",
    "%": "percent_sign",
    "&": "ampersand",
    "'": "apostrophe",
    "(": "left_parenthesis",
    ")": "right_parenthesis",
    "*": "asterisk",
    "+": "plus",
    ",": "comma",
    "-": "minus",
    ".": "full_stop",
    "/": "slash",
    ":": "colon",
    ";": "semicolon",
    "<": "less_than_sign",
    "=": "equals_sign",
    ">": "greater_than_sign",
    "?": "question_mark",
    "@": "at",
    "[": "left_square_bracket",
    "\\": "backslash",
    "]": "right_square_bracket",
    "^": "circumflex_accent",
    "_": "underscore",
    "`": "grave_accent",
    "{": "left_curly_bracket",
    "|": "vertical_line",
    "}": "right_curly_bracket",
    "~": "tilde",
}

NAMED_KEYS = (
    "escape",
    "enter",
    "tab",
    "space",
    "backspace",
    "delete",
    "insert",
    "home",
    "end",
    "pageup",
    "pagedown",
    "up",
    "down",
    "left",
    "right",
    "caps_lock",
    "scroll_lock",
    "num_lock",
    "print_screen",
    "pause",
    "menu",
)
FUNCTION_KEYS = tuple(f"f{n}" for n in range(1, 36))
KEY_NAMES = frozenset((*NAMED_KEYS, *FUNCTION_KEYS, *PUNCTUATION_NAMES.values()))
# The named keys that ordinary typing produces (the others type nothing).
TYPED_NAMES = frozenset({"enter", "tab", "space", "backspace"})


def types(key: str) -> bool:
    """Whether ``key`` (a Textual key name) is one that ordinary typing produces: a character
    (``a``, ``slash``), space, Enter, Tab or Backspace, with or without Shift."""
    bare = key.lower().removeprefix("shift+")
    # A modifier other than Shift (ctrl+, alt+, ...).
    if "+" in bare:
        return False
    return bare in TYPED_NAMES or bare not in KEY_NAMES or bare in PUNCTUATION_NAMES.values()


# What people write for a key Textual names otherwise.
_ALIASES = {
    "esc": "escape",
    "return": "enter",
    "ret": "enter",
    "del": "delete",
    "ins": "insert",
    "pgup": "pageup",
    "pgdn": "pagedown",
    "pgdown": "pagedown",
    "page_up": "pageup",
    "page_down": "pagedown",
    "bksp": "backspace",
    "spacebar": "space",
    "period": "full_stop",
    "dot": "full_stop",
    "question": "question_mark",
    "hyphen": "minus",
    "dash": "minus",
    "equal": "equals_sign",
    "equals": "equals_sign",
    "control": "ctrl",
    "option": "alt",
    "opt": "alt",
    "cmd": "super",
    "command": "super",
    "win": "super",
}

EXAMPLES = 'keys look like "ctrl+t", "f12", "shift+tab", "question_mark"; several: "f12,ctrl+t"'


def _modifier_problem(word: str) -> str | None:
    if word in MODIFIERS:
        return None
    if not word:
        return "an empty modifier between '+' signs (the + key is 'plus')"
    if word.lower() in MODIFIERS:
        return f"modifiers are lower case: did you mean '{word.lower()}'?"
    alias = _ALIASES.get(word.lower())
    guess = (
        alias
        if alias in MODIFIERS
        else next(iter(difflib.get_close_matches(word, MODIFIERS, 1)), None)
    )
    hint = f" (did you mean '{guess}'?)" if guess else ""
    return f"'{word}' is not a modifier{hint}: use {', '.join(MODIFIERS)}"


def _name_problem(name: str, modifiers: list[str]) -> str | None:
    prefix = "+".join(modifiers) + "+" if modifiers else ""
    if len(name) == 1:
        if not name.isprintable() or name.isspace():
            return f"{name!r} is not a printable key (the space bar is 'space')"
        if not modifiers:
            return None if name != "," else "a lone ',' separates keys (the , key is 'comma')"
        if name in PUNCTUATION_NAMES:
            named = prefix + PUNCTUATION_NAMES[name]
            return f"after a modifier a punctuation key goes by its name: did you mean '{named}'?"
        if not name.isalnum():
            return (
                "after a modifier a punctuation key goes by its name, as Textual reports it "
                f"('{name}' alone works)"
            )
        if name != name.lower():
            return (
                f"Textual reports letters in lower case: did you mean '{prefix}{name.lower()}' "
                f"(or '{prefix}shift+{name.lower()}')?"
            )
        return None
    if name in KEY_NAMES:
        return None
    if not name:
        return "nothing after the last '+' (the + key is 'plus')" if modifiers else "an empty key"
    if name.lower() in KEY_NAMES:
        return f"key names are lower case: did you mean '{prefix}{name.lower()}'?"
    alias = _ALIASES.get(name.lower())
    guess = (
        alias
        if alias in KEY_NAMES
        else next(iter(difflib.get_close_matches(name.lower(), KEY_NAMES, 1)), None)
    )
    hint = f" (did you mean '{prefix}{guess}'?)" if guess else ""
    return f"'{name}' is not a key name{hint}"


def key_problem(key: str) -> str | None:
    """What is wrong with one key (``ctrl+t``; no commas), or None when Textual can report it."""
    if len(key) == 1:  # a lone character, "+" included
        return _name_problem(key, [])
    *modifiers, name = key.split("+")
    for word in modifiers:
        problem = _modifier_problem(word)
        if problem:
            return problem
    problem = _name_problem(name, modifiers)
    if problem:
        return problem
    ordered = sorted(set(modifiers), key=MODIFIERS.index)
    if ordered != modifiers:
        return (
            f"each modifier once, in the order {', '.join(MODIFIERS)}: "
            f"did you mean '{'+'.join([*ordered, name])}'?"
        )
    return None


def keys_problem(keys: str) -> str | None:
    """What is wrong with a binding's key string (``f12,ctrl+t``; spaces ignored), or None.
    The problem is one line that names the bad key and, when it can, the likely one."""
    keys = keys.replace(" ", "")
    if not keys:
        return f"no key given ({EXAMPLES})"
    if keys == ",":
        return "a lone ',' separates keys (the , key is 'comma')"
    for key in keys.split(","):
        if not key:
            return f"an empty key in \"{keys}\" (keys are separated by ','; the , key is 'comma')"
        problem = key_problem(key)
        if problem:
            where = f"'{key}': " if key != keys else ""
            hint = "" if "did you mean" in problem else f" ({EXAMPLES})"
            return f"{where}{problem}{hint}"
    return None
