"""The config file: one TOML file, one typed model, every setting documented once.

``Config`` is the model; each of its fields carries its documentation (``help``,
environment variable, flag, example) in its metadata, and the sampling
parameters are documented by ``PARAM_SPECS``. A ``Schema`` (table.py) flattens both
into one list that drives validation, the commented template (``template()``),
``vibechat config show`` and the settings table in docs/USAGE.md (``markdown_table()``).
The app's own settings are fields of a ``Config`` subclass of its own
(app/appconfig.py): it hands its schema to every function here that reads or writes
the file (``schema=``), and the engine's own (``SCHEMA``) is the default.

Precedence: command-line flag > ``VIBECHAT_*`` variable > file > default.
``load_config()`` never raises over a bad file or variable. A mistake is local: a
bad key or value is left out on its own (the rest of the file still applies, so a
typo in ``[params]`` never turns a server set-up into the local model), and every
problem is collected in ``LoadedConfig.problems`` (one line each, naming the file,
line and key, or the variable, with a suggestion for a misspelt name). Only a file
that is not TOML at all (or cannot be read) is left out whole: then the problem says
so, in plain words (``toml_words``). Unknown ``VIBECHAT_*`` variables are named too
(``warnings``: they are ignored, they do not stop a run). Saving is
engine/settings/config_save.py's (``update_config()``: the user's comments and formatting
stay as they were, and a file that does not load cleanly is never touched).

Headless and free of side effects at import time (tomlkit is imported when a
file is read).

Imports inside functions are deliberate: tomlkit loads only when a config file is read
(start-up time).
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic

from ..errors import ConfigError, InvalidParameterError
from ..files import FileTooLarge, NotARegularFile, UnreadableFile, read_file_text
from ..paths import config_dir, data_dir
from .config_check import (
    C,
    apply_changes,
    bare_message,
    check_value,
    read_document,
    value_from_text,
)
from .config_text import duplicate_lines, key_lines, line_of
from .table import SCHEMA, Schema

CONFIG_ENV = "VIBECHAT_CONFIG"
CONFIG_NAME = "config.toml"
FIX = "fix it with 'vibechat config edit'"
WHOLE_FILE_LEFT_OUT = "running on the defaults until it is fixed"


def config_path() -> Path:
    """The config file: ``$VIBECHAT_CONFIG``, else ``config.toml`` in the config dir."""
    override = os.environ.get(CONFIG_ENV)
    return Path(override).expanduser() if override else config_dir() / CONFIG_NAME


# ---------------------------------------------------------------- origins
@dataclass(frozen=True)
class Origin:
    """Where a value came from: ``default``, ``file`` (path, line), ``env`` (variable) or
    ``flag``."""

    kind: str
    name: str = ""
    line: int | None = None

    def __str__(self) -> str:
        if self.kind == "file":
            return f"file, line {self.line}" if self.line else "file"
        return self.kind if self.kind == "default" else f"{self.kind} {self.name}"

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"source": self.kind}
        if self.kind == "file":
            data.update(file=self.name, line=self.line)
        elif self.kind == "env":
            data["variable"] = self.name
        elif self.kind == "flag":
            data["flag"] = self.name
        return data


DEFAULT_ORIGIN = Origin("default")


@dataclass(frozen=True)
class ConfigProblem:
    """One mistake in the config file or the environment, and what it leaves out.

    ``str()`` is the line for a terminal (where, what, the known names, the fix);
    ``short`` is the chat's line (the file's name, what, what runs instead). ``key``: the
    dotted setting left out (None: the whole file, or a variable that is no setting).
    ``blocking``: ``vibechat run`` refuses to run with it (an unknown variable, which
    changes nothing, does not block)."""

    # "config file /x/config.toml, line 2" | "environment variable VIBECHAT_THREADS='many'"
    where: str
    # Plain words, with a suggestion where there is one.
    what: str
    fix: str = FIX
    # "config.toml line 2" | "VIBECHAT_THREADS"
    short_where: str = ""
    # What happens meanwhile, for the chat's line.
    effect: str = "not applied"
    key: str | None = None
    blocking: bool = True
    # For terminals only: "known: a, b, c".
    detail: str = ""

    def __str__(self) -> str:
        detail = f"; {self.detail}" if self.detail else ""
        return f"{self.where}: {self.what}{detail}; {self.fix}"

    @property
    def short(self) -> str:
        return f"{self.short_where or self.where}: {self.what}: {self.effect}"

    @property
    def in_file(self) -> bool:
        """The config file's problem (else a variable's)."""
        return self.where.startswith("config file")


@dataclass(frozen=True)
class LoadedConfig(Generic[C]):
    """The effective config and where each value came from; ``schema``: the settings table
    it was read by (the app's, with its own settings, or the engine's).

    ``problems``: every key of the file and every variable left out, and every unknown
    ``VIBECHAT_*`` variable, in that order. ``file_problem``: the file as a whole could not
    be used (not TOML, unreadable): nothing of it applies. ``problem``: the first problem
    that stops ``vibechat run``, as one line (saying how many more there are)."""

    config: C
    path: Path
    exists: bool = False
    origins: Mapping[str, Origin] = field(default_factory=dict)
    file_problem: str | None = None
    problems: tuple[ConfigProblem, ...] = ()
    schema: Schema = field(default=SCHEMA, repr=False)

    def __post_init__(self) -> None:
        # Given as text alone.
        if self.file_problem and not self.problems:
            whole = ConfigProblem(
                f"config file {self.path}",
                self.file_problem,
                short_where=self.path.name,
                effect=WHOLE_FILE_LEFT_OUT,
            )
            object.__setattr__(self, "problems", (whole,))

    @property
    def blocking(self) -> tuple[ConfigProblem, ...]:
        return tuple(p for p in self.problems if p.blocking)

    @property
    def warnings(self) -> tuple[ConfigProblem, ...]:
        """Problems that change nothing (an unknown variable, ignored): a run says them and
        goes on."""
        return tuple(p for p in self.problems if not p.blocking)

    @property
    def problem(self) -> str | None:
        blocking = self.blocking
        if not blocking:
            return None
        first = str(blocking[0])
        more = len(blocking) - 1
        if more:
            first += (
                f" (and {more} more problem{'s' if more > 1 else ''}: "
                "'vibechat config show' lists them)"
            )
        return first

    @property
    def env_problem(self) -> str | None:
        """The first bad ``VIBECHAT_*`` value (left out), or None."""
        return next((str(p) for p in self.problems if p.blocking and not p.in_file), None)

    @property
    def left_out(self) -> tuple[str, ...]:
        """The settings not applied (dotted keys), in order: what the chat names."""
        return tuple(dict.fromkeys(p.key for p in self.problems if p.key))

    def origin(self, key: str) -> Origin:
        return self.origins.get(key, DEFAULT_ORIGIN)

    def value(self, key: str) -> Any:
        """The effective value of a dotted key (``params.top_k``, a text table's ``TABLE.name``)."""
        head, _, rest = key.partition(".")
        if head in self.schema.tables:
            return getattr(self.config, head).get(rest)
        if head == "params":
            value = getattr(self.config.params, rest)
            return list(value) if rest == "stop" else value
        return getattr(self.config, head)

    def items(self) -> list[tuple[str, Any, Origin]]:
        """Every setting (and each entry of a text table: a key override) with its value and
        origin, in the schema's order."""
        rows = [(s.key, self.value(s.key), self.origin(s.key)) for s in self.schema.settings]
        for head in self.schema.tables:
            entries = sorted(getattr(self.config, head).items())
            rows += [(f"{head}.{k}", v, self.origin(f"{head}.{k}")) for k, v in entries]
        return rows

    def with_flags(self, values: Mapping[str, Any], flags: Mapping[str, str]) -> LoadedConfig[C]:
        """A copy with command-line values on top (``values`` by dotted key, ``flags`` the
        flag each came from); values are checked as a file's would be."""
        changes: dict[str, Any] = {}
        origins = dict(self.origins)
        for key, value in values.items():
            setting = self.schema.by_key[key]
            try:
                changes[key] = check_value(setting, value, Path.cwd())
            except InvalidParameterError as exc:
                raise InvalidParameterError(
                    f"{flags.get(key, key)}: {bare_message(exc)}."
                ) from None
            origins[key] = Origin("flag", flags.get(key, key))
        return dataclasses.replace(
            self, config=apply_changes(self.config, changes), origins=origins
        )


def file_message(path: Path, line: int | None, message: str, column: int | None = None) -> str:
    return f"{_file_where(path, line, column)}: {message}; {FIX}"


def _file_where(path: Path, line: int | None, column: int | None = None) -> str:
    at = f", line {line}" if line else ""
    return f"config file {path}{at}{f', column {column}' if line and column else ''}"


class _Unusable(ConfigError):
    """The file as a whole cannot be used (not TOML, unreadable, too large): ``problem``
    says why."""

    def __init__(self, problem: ConfigProblem) -> None:
        super().__init__(str(problem))
        self.problem = problem


def _whole_file(
    path: Path, message: str, line: int | None = None, column: int | None = None
) -> _Unusable:
    short = f"{path.name} line {line}" if line else path.name
    return _Unusable(
        ConfigProblem(
            _file_where(path, line, column), message, short_where=short, effect=WHOLE_FILE_LEFT_OUT
        )
    )


def _parse_toml(text: str, path: Path) -> Mapping[str, Any]:
    """The file's TOML as plain data; a syntax error raises _Unusable in plain words."""
    import tomlkit

    from .toml_words import plain_syntax_error

    try:
        return tomlkit.parse(text).unwrap()
    except Exception as exc:  # noqa: BLE001 - tomlkit raises ParseError and a few other kinds
        duplicate = re.match(r'Key "(.+)" already exists', str(exc))
        if duplicate:
            name = duplicate.group(1)
            lines = duplicate_lines(text, name)
            line = lines[1] if lines else getattr(exc, "line", None)
            first = f" (first on line {lines[0]})" if lines else ""
            raise _whole_file(path, f"'{name}' is set twice{first}: keep one", line) from None
        problem = plain_syntax_error(text, exc)
        raise _whole_file(path, problem.message, problem.line, problem.column) from None


def read_config_text(
    text: str, path: Path, schema: Schema = SCHEMA
) -> tuple[dict[str, Any], dict[str, Origin], list[ConfigProblem]]:
    """The values a config file's text sets (by dotted key), their origins, and a problem
    for each key left out (the others apply), by ``schema``'s table. A file that is not TOML
    raises ``ConfigError`` (one line, in plain words, with the line and column)."""
    data = _parse_toml(text, path)
    lines = key_lines(text)
    values, bad = read_document(data, path.parent, schema)
    problems = []
    for exc in bad:
        line = line_of(lines, exc.where)
        problems.append(
            ConfigProblem(
                _file_where(path, line),
                str(exc),
                short_where=f"{path.name} line {line}" if line else path.name,
                effect="not applied",
                key=exc.key,
                detail=exc.detail,
            )
        )
    origins = {
        key: Origin("file", str(path), line_of(lines, tuple(key.split(".", 1)))) for key in values
    }
    return values, origins, problems


def parse_config_text(
    text: str, path: Path, schema: Schema = SCHEMA
) -> tuple[dict[str, Any], dict[str, Origin]]:
    """The values a config file's text sets (by dotted key) and their origins; any problem
    raises ``ConfigError`` with one line naming the file, the line and the key (for
    writers, which never touch a file that does not load cleanly)."""
    values, origins, problems = read_config_text(text, path, schema)
    if problems:
        raise ConfigError(str(problems[0]))
    return values, origins


# A config file is a few KB: anything this large is not one.
MAX_CONFIG_BYTES = 1 << 20


def read_config_file(path: Path) -> str | None:
    """The file's text, or None when there is no file; unreadable or absurdly large raises
    ConfigError."""
    # Bounded and by type: a FIFO or /dev/zero as the config is refused at once.
    try:
        return read_file_text(path, MAX_CONFIG_BYTES)
    except FileNotFoundError:
        return None
    except NotARegularFile as exc:
        raise _whole_file(
            path, f"could not be read: it {exc.reason}; the config must be a regular TOML file"
        ) from None
    except FileTooLarge:
        raise _whole_file(
            path, f"is larger than {MAX_CONFIG_BYTES >> 20} MiB: not a vibechat config file"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise _whole_file(path, f"could not be read ({reason})") from None


def config_file_problems(path: Path | None = None, schema: Schema = SCHEMA) -> list[ConfigProblem]:
    """Every problem of the file (none: it loads cleanly, or does not exist)."""
    path = path or config_path()
    try:
        text = read_config_file(path)
        return [] if text is None else read_config_text(text, path, schema)[2]
    except _Unusable as exc:
        return [exc.problem]


def check_config_file(path: Path | None = None, schema: Schema = SCHEMA) -> str | None:
    """The file's first problem as one line, or None when it loads cleanly (or does not exist)."""
    problems = config_file_problems(path, schema)
    return str(problems[0]) if problems else None


# Variables vibechat reads that are not settings (each documented where it is read): an
# unknown VIBECHAT_* variable is named with a suggestion, these are not.
OTHER_VARIABLES = (
    "VIBECHAT_CONFIG",  # the config file (config_path)
    "VIBECHAT_CONFIG_DIR",
    "VIBECHAT_DATA_DIR",
    "VIBECHAT_CACHE_DIR",
    "VIBECHAT_STATE_DIR",  # paths.py
    "VIBECHAT_API_KEY",  # the server's key (openai_backend.KEY_VARIABLES)
    "VIBECHAT_DEBUG",  # logging (app/commands/cli.py)
    "VIBECHAT_TEST_WORKER_CRASH",  # the worker's crash hook, for tests (worker.CRASH_HOOK_ENV)
)
# The environment is outside data: its loop is bounded.
MAX_VARIABLES = 10_000


def known_variables(schema: Schema = SCHEMA) -> tuple[str, ...]:
    """Every ``VIBECHAT_*`` variable vibechat reads: the settings', then the others."""
    return tuple(dict.fromkeys([*(s.env for s in schema.settings if s.env), *OTHER_VARIABLES]))


def _env_values(
    environ: Mapping[str, str], api_key_env: str | None = None, schema: Schema = SCHEMA
) -> tuple[dict[str, Any], dict[str, Origin], list[ConfigProblem]]:
    """The settings the variables set, their origins, and a problem for each bad value (left
    out) and each unknown ``VIBECHAT_*`` variable (ignored: it sets nothing)."""
    values: dict[str, Any] = {}
    origins: dict[str, Origin] = {}
    problems: list[ConfigProblem] = []
    for setting in schema.settings:
        raw = environ.get(setting.env or "")
        if not raw:
            continue
        try:
            values[setting.key] = value_from_text(setting, raw)
        except InvalidParameterError as exc:
            problems.append(
                ConfigProblem(
                    f"environment variable {setting.env}={raw!r}",
                    bare_message(exc),
                    "fix or unset it",
                    short_where=f"{setting.env}",
                    effect="ignored",
                    key=setting.key,
                )
            )
            continue
        origins[setting.key] = Origin("env", setting.env or "")
    known = known_variables(schema)
    for count, name in enumerate(environ):
        if count >= MAX_VARIABLES:
            break
        if name.startswith("VIBECHAT_") and name not in known and name != api_key_env:
            # Compared past the VIBECHAT_ prefix.
            close = difflib.get_close_matches(name[9:], [k[9:] for k in known], n=1, cutoff=0.8)
            hint = f" (did you mean VIBECHAT_{close[0]}?)" if close else ""
            problems.append(
                ConfigProblem(
                    f"environment variable {name}",
                    f"not a vibechat variable{hint}",
                    "it is ignored: rename or unset it",
                    short_where=name,
                    effect="ignored",
                    blocking=False,
                )
            )
    return values, origins, problems


def load_config(
    path: Path | None = None, *, environ: Mapping[str, str] | None = None, schema: Schema = SCHEMA
) -> LoadedConfig[Any]:
    """The effective config: defaults, then the file, then ``VIBECHAT_*`` variables.

    Never raises over a bad file or variable: a bad key or value is left out on its own
    (the rest applies), a file that is not TOML or cannot be read is left out whole
    (``file_problem``), a bad variable is left out; each is in ``problems``.
    ``schema``: what the file may hold (the app's table: its own settings too); the config
    is an instance of its class."""
    path = path or config_path()
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    origins: dict[str, Origin] = {}
    problems: list[ConfigProblem] = []
    file_problem = None
    exists = False
    try:
        text = read_config_file(path)
        exists = text is not None
        if text is not None:
            values, origins, problems = read_config_text(text, path, schema)
    except _Unusable as exc:
        exists = path.exists()
        file_problem = str(exc)
        problems = [exc.problem]
    env, env_origins, env_problems = _env_values(environ, values.get("api_key_env"), schema)
    values.update(env)
    origins.update(env_origins)
    return LoadedConfig(
        apply_changes(schema.config(), values),
        path,
        exists,
        origins,
        file_problem,
        (*problems, *env_problems),
        schema,
    )


def configured_models_dir() -> Path | None:
    """``models_dir`` from the config file, or None (unset, no file, a broken file).
    Cheap to call often: the answer is kept until the file changes."""
    path = config_path()
    try:
        st = path.stat()
    except OSError:
        return None
    signature = (st.st_mtime_ns, st.st_size, st.st_ino)
    cached = _models_dir_cache.get(path)
    if cached is not None and cached[0] == signature:
        return cached[1]
    # A bad key elsewhere in the file does not matter here; a FIFO never blocks (UnreadableFile).
    try:
        values, _, _ = read_config_text(read_file_text(path, MAX_CONFIG_BYTES), path)
        found = values.get("models_dir")
    except (ConfigError, OSError, UnicodeDecodeError, UnreadableFile):
        found = None
    _models_dir_cache[path] = (signature, found)
    return found


_models_dir_cache: dict[Path, tuple[tuple[int, int, int], Path | None]] = {}


def models_dir() -> Path:
    """Models vibechat downloaded or was given: ``VIBECHAT_MODELS_DIR``, else ``models_dir``
    in the config file (a broken file is ignored here), else ``models`` in the data dir.
    Resolved on each call, never at import time."""
    override = os.environ.get("VIBECHAT_MODELS_DIR")
    if override:
        return Path(override).expanduser()
    return configured_models_dir() or data_dir() / "models"
