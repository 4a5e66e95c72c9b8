"""A bench's arguments: its description (the first paragraph of its docstring), ``--url``
(an admin URL on the PostgreSQL server it makes its databases beside), ``--smoke`` and
the sizes ``--smoke`` shrinks.

A size given on the command line is taken as given, with ``--smoke`` too; one not given
is the bench's full size, or its smoke size under ``--smoke``: a size that runs in
seconds and takes the same path, whose figures are printed but judged against no target.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"
SMOKE_HELP = (
    "a size that runs in seconds, on the same path: the figures are printed, no target is "
    "judged (the sizes given still count)"
)


def description(doc: str | None) -> str:
    return (doc or "").split("\n\n")[0]


class BenchParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` with ``--smoke`` and, unless ``url`` is None, ``--url``."""

    def __init__(self, doc: str | None, *, url: str | None = DEFAULT_URL) -> None:
        super().__init__(description=description(doc))
        self._sizes: dict[str, tuple[object, object]] = {}
        self.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
        if url is not None:
            self.add_argument(
                "--url", default=url, help=f"an admin URL on the PostgreSQL server ({url})"
            )

    def size(
        self,
        *flags: str,
        full: object,
        smoke: object,
        help: str,
        type: Callable[[str], Any] = int,
    ) -> None:
        """A size: ``full`` by default, ``smoke`` under ``--smoke``, unless given."""
        action = self.add_argument(
            *flags, type=type, default=None, help=f"{help} (default {full}; --smoke {smoke})"
        )
        self._sizes[action.dest] = (full, smoke)

    def serve_options(self, *, log_level: bool = True) -> None:
        """``--keep-log`` (serve's log kept after the run), and ``--log-level`` of serve."""
        self.add_argument("--keep-log", action="store_true", help="keep serve's log")
        if log_level:
            self.add_argument(
                "--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING"], help="of serve"
            )

    def read(self, argv: Sequence[str] | None = None) -> argparse.Namespace:
        """The arguments, every size not given filled in."""
        args = self.parse_args(argv)
        for dest, (full, smoke) in self._sizes.items():
            if getattr(args, dest) is None:
                setattr(args, dest, smoke if args.smoke else full)
        return args


def exit_with(main: Callable[[], int]) -> NoReturn:
    """A bench's exit: ``main()``'s status (0 every target met or nothing judged, 1 one
    missed); 130 when interrupted (Ctrl-C, or SIGTERM: a bench's ``finally`` blocks stop
    what it started and drop what it made either way); 2 on an error, after its
    traceback."""
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even if started ignoring it
    started = time.monotonic()
    try:
        code = main()
    except (KeyboardInterrupt, asyncio.CancelledError):
        print("interrupted", file=sys.stderr)
        code = 130
    except Exception:  # report it; what the bench started is cleaned up by then
        traceback.print_exc()
        code = 2
    print(f"total runtime {time.monotonic() - started:.1f}s")
    sys.exit(code)


def names(value: str) -> list[str]:
    """A comma-separated list (``--presets river,oban``)."""
    return [v.strip() for v in value.split(",") if v.strip()]
