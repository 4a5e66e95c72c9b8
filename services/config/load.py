"""Loading the configuration: the environment, then the TOML file (``--config``,
``QUEUEBOT_CONFIG`` or ``./queuebot.toml``), each validated with errors that name the key,
the value (never a secret's) and what was expected."""

from __future__ import annotations

import logging
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ValidationError,
)

from services.config.env import (
    BLANK_IS_UNSET,
    DEFAULT_CONFIG_PATH,
    EXPLICIT_ENVIRON,
    EnvSettings,
    secret_names,
    variable_names,
)
from services.config.file import FileConfig
from services.config.hints import did_you_mean
from services.config.secret_files import file_variable, read_secret_files
from services.config.sections import QueueConfig
from services.config.storable import unstorable
from services.errors import ConfigError

log = logging.getLogger("queuebot.config")


@dataclass(frozen=True)
class Config:
    """Validated configuration: the file's settings and the environment's."""

    file: FileConfig
    env: EnvSettings
    source: Path | None

    @property
    def queues(self) -> dict[str, QueueConfig]:
        return self.file.queue_map()


# how a [roles] entry's shape is told apart (FileConfig.RoleEntry): not a key a person wrote
_TAGS = frozenset({"role", "grant"})


def _untagged(loc: tuple[int | str, ...]) -> tuple[int | str, ...]:
    """An error's location as the file spells it: a [roles] entry's tag left out."""
    if len(loc) >= 3 and loc[0] == "roles" and loc[2] in _TAGS:
        return (*loc[:2], *loc[3:])
    return loc


def _format_errors(
    where: str,
    exc: ValidationError,
    model: type[BaseModel] | None = None,
    *,
    from_files: frozenset[str] = frozenset(),
) -> str:
    lines = []
    secrets = secret_names()
    for err in exc.errors(include_url=False):
        loc = _untagged(err["loc"])
        key = ".".join(str(part) for part in loc) or "(top level)"
        if key in from_files:
            key = f"{key} (read from {file_variable(key)})"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
            near = did_you_mean(model, loc) if model is not None else None
            if near is not None:
                msg += f"; did you mean {near}?"
        msg = msg.removeprefix("Value error, ")
        value = err.get("input")
        hidden = isinstance(value, dict) or (err["loc"] and str(err["loc"][0]) in secrets)
        shown = "" if hidden else f" = {value!r}"
        lines.append(f"{where}: {key}{shown}: {msg}")
    return "\n".join(lines)


# Settings an earlier version read and this one no longer does: a file that still has them
# loads, with a warning that says what to do instead.
REMOVED: dict[tuple[str, str], str] = {
    ("slack", "answer_workers"): (
        "answers run in the serving process now; run more `queuebot serve` replicas "
        "behind the load balancer to serve more"
    ),
}


def parse_file_config(data: Mapping[str, Any], *, where: str) -> FileConfig:
    problems = unstorable(data)
    if problems:
        raise ConfigError("\n".join(f"{where}: {problem}" for problem in problems))
    data = dict(data)
    for (section, key), instead in REMOVED.items():
        table = data.get(section)
        if isinstance(table, dict) and key in table:
            log.warning(
                "%s: [%s] %s is no longer read and is ignored: %s", where, section, key, instead
            )
            rest = {k: v for k, v in table.items() if k != key}
            if rest:
                data[section] = rest
            else:
                del data[section]
    try:
        file = FileConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_errors(where, exc, FileConfig)) from exc
    sections = {"queue": file.queue} if file.queue is not None else {}
    sections.update({f"queues.{name}": queue for name, queue in file.queues.items()})
    for section, queue in sections.items():
        queue._file, queue._section = where, section
    return file


def load_env(environ: Mapping[str, str]) -> EnvSettings:
    """The fixed variables of ``environ`` (the process's, or an explicit mapping: tests,
    the demo), each secret read from the file its ``NAME_FILE`` names where that is set;
    nothing else of the process leaks in."""
    values = {name: environ[name] for name in variable_names() if name in environ}
    from_files = read_secret_files(environ, secret_names(), blank_is_unset=BLANK_IS_UNSET)
    values.update(from_files)
    token = EXPLICIT_ENVIRON.set(True)
    try:
        return EnvSettings(**values)  # type: ignore[arg-type]
    except ValidationError as exc:
        raise ConfigError(
            _format_errors("environment", exc, from_files=frozenset(from_files))
        ) from exc
    finally:
        EXPLICIT_ENVIRON.reset(token)


def load_config(
    path: str | Path | None = None, *, environ: Mapping[str, str] | None = None
) -> Config:
    """Load and validate the configuration; raise ConfigError naming what is wrong.

    ``path`` (from ``--config``) wins over ``QUEUEBOT_CONFIG``; with neither, the file
    ``./queuebot.toml`` is read when it exists and defaults are used when it does not.
    """
    env = load_env(os.environ if environ is None else environ)

    explicit = path if path is not None else env.config_path
    source: Path | None = Path(explicit) if explicit else None
    if source is None and DEFAULT_CONFIG_PATH.exists():
        source = DEFAULT_CONFIG_PATH
    if source is None:
        return Config(file=FileConfig(), env=env, source=None)
    try:
        raw = source.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {source}: {exc.strerror}") from exc
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{source}: not valid TOML: {exc}") from exc
    return Config(file=parse_file_config(data, where=str(source)), env=env, source=source)
