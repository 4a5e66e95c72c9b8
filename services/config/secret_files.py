"""Secrets from files, the ``_FILE`` convention of Docker's and Kubernetes' secrets: for
every variable holding a secret (``QUEUEBOT_DATABASE_URL``, ``SLACK_BOT_TOKEN``, ...),
``NAME_FILE`` may name a file holding its value instead, so that the value is in no
process's environment (``docker inspect``, ``/proc/PID/environ``).

The rules: ``NAME`` and ``NAME_FILE`` both set is an error naming both (a variable that
counts as not set when blank, such as ``SLACK_BOT_TOKEN=``, does not count); a file that
cannot be read, is empty, is not UTF-8 text, holds a NUL character or is over 64 KiB is an
error naming the variable and the path, never the content; the file's trailing newline
(``echo token > file`` writes one) is not part of the value."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from services.errors import ConfigError

SUFFIX = "_FILE"
MAX_BYTES = 64 * 1024


def file_variable(name: str) -> str:
    return f"{name}{SUFFIX}"


def _read(variable: str, path: str) -> str:
    where = f"environment: {variable} = {path!r}"
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read the file: {exc.strerror or exc}") from None
    if len(raw) > MAX_BYTES:
        raise ConfigError(f"{where}: the file is over 64 KiB; is it the file holding the secret?")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{where}: the file is not UTF-8 text") from None
    text = text.rstrip("\r\n")
    if not text:
        raise ConfigError(f"{where}: the file is empty; write the secret into it")
    if "\x00" in text:
        raise ConfigError(f"{where}: the file holds a NUL character; write the secret alone")
    return text


def read_secret_files(
    environ: Mapping[str, str], names: Iterable[str], *, blank_is_unset: tuple[str, ...]
) -> dict[str, str]:
    """The value of each secret ``names`` whose ``NAME_FILE`` is set, read from its file;
    ``ConfigError`` naming the variables (and the path, never the value) otherwise."""
    values: dict[str, str] = {}
    for name in sorted(names):
        variable = file_variable(name)
        path = environ.get(variable)
        if path is None:
            continue
        direct = environ.get(name)
        if direct is not None and (direct.strip() or not name.startswith(blank_is_unset)):
            raise ConfigError(
                f"environment: both {name} and {variable} are set; set only one: {variable} "
                "names a file holding the value, which then stays out of the environment"
            )
        if not path.strip():
            raise ConfigError(
                f"environment: {variable} is set but empty; give the path of the file holding "
                f"{name}, or unset {variable}"
            )
        values[name] = _read(variable, path)
    return values
