"""The container's liveness check: ``python -P -m bot.healthcheck`` (the image's HEALTHCHECK).

It finds the ``queuebot serve`` process among the container's processes, reads the address
it was told to listen on (``--host``/``--port`` on its command line, serve's defaults
otherwise), and asks its ``/healthz``. Exit 0 when that answers 200, 1 otherwise, with one
line saying why. Only the standard library, so it starts quickly; ``http.client``, not
urllib, so an HTTP(S)_PROXY set for Slack's sake is never used for the probe.
"""

from __future__ import annotations

import http.client
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

# serve's defaults (bot/cli_parser.py takes them from here, so the probe and serve agree)
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080
TIMEOUT_SECONDS = 4.0
# what serve listens on when told every address: probed on the loopback of the same family
_ANY = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}  # noqa: S104


def _option(argv: Sequence[str], name: str) -> str | None:
    """The last value of ``--name VALUE`` or ``--name=VALUE`` (argparse takes the last)."""
    found = None
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            found = argv[i + 1]
        elif arg.startswith(f"{name}="):
            found = arg.partition("=")[2]
    return found


def is_serve(argv: Sequence[str]) -> bool:
    """Whether this command line is ``queuebot serve`` (the entry point, or
    ``python -m bot.cli``)."""
    for i, arg in enumerate(argv):
        launcher = Path(arg).name == "queuebot" or (
            arg == "bot.cli" and i > 0 and argv[i - 1] == "-m"
        )
        if launcher:
            return "serve" in argv[i + 1 :]
    return False


def address(argv: Sequence[str]) -> tuple[str, int]:
    """Where serve with this command line answers: its ``--host`` (any address: the
    loopback) and ``--port``."""
    host = _option(argv, "--host")
    host = DEFAULT_HOST if host is None else _ANY.get(host, host)
    port = _option(argv, "--port")
    return host, DEFAULT_PORT if port is None else int(port)


def command_lines(proc: Path = Path("/proc")) -> Iterable[list[str]]:
    """Every process's command line, the lowest process id first."""
    for entry in sorted((p for p in proc.iterdir() if p.name.isdigit()), key=lambda p: int(p.name)):
        try:
            raw = (entry / "cmdline").read_bytes()
        except OSError:
            continue  # ended meanwhile
        if raw:
            yield raw.rstrip(b"\0").decode(errors="replace").split("\0")


def probe(host: str, port: int, *, timeout: float = TIMEOUT_SECONDS) -> str | None:
    """None when ``GET /healthz`` answers 200, else why not."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("GET", "/healthz")
        status = conn.getresponse().status
    except (OSError, http.client.HTTPException) as exc:
        return f"http://{host}:{port}/healthz: {exc}"
    finally:
        conn.close()
    return None if status == 200 else f"http://{host}:{port}/healthz answered {status}"


def main(proc: Path = Path("/proc")) -> int:
    serving = next((argv for argv in command_lines(proc) if is_serve(argv)), None)
    if serving is None:
        print("unhealthy: no queuebot serve process in this container", file=sys.stderr)
        return 1
    try:
        host, port = address(serving)
    except ValueError:
        print(f"unhealthy: serve's --port is not a number: {serving}", file=sys.stderr)
        return 1
    why = probe(host, port)
    if why is not None:
        print(f"unhealthy: {why}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
