"""``queuebot console`` as a person drives it through a whole incident: one long-running
process (its scheduler runs the plans' waves beside it), a line said at a time, and each
reply read as the person reads it before the next line is said."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from types import TracebackType

from tests.helpers.processes import clean_environ, interactive

ROOT = Path(__file__).resolve().parents[2]


class ConsoleSession:
    def __init__(self, *, config: Path, database_url: str, cwd: Path) -> None:
        env = clean_environ(discord=True)
        env.update(
            QUEUEBOT_CONFIG=str(config),
            QUEUEBOT_DATABASE_URL=database_url,
            PYTHONPATH=str(ROOT),
        )
        self.process = interactive("console", cwd=cwd, env=env)
        self._out: list[str] = []
        self._err: list[str] = []
        self._readers = [
            threading.Thread(target=self._read, args=(self.process.stdout, self._out), daemon=True),
            threading.Thread(target=self._read, args=(self.process.stderr, self._err), daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    @staticmethod
    def _read(stream: object, into: list[str]) -> None:
        for line in stream:  # type: ignore[attr-defined]
            into.append(line)

    @property
    def out(self) -> str:
        return "".join(self._out)

    @property
    def err(self) -> str:
        return "".join(self._err)

    def _alive(self) -> None:
        assert self.process.poll() is None, (
            f"the console exited {self.process.returncode}\n{self.out[-6000:]}\n{self.err[-4000:]}"
        )

    def say(
        self,
        line: str,
        *,
        expect: str | tuple[str, ...],
        timeout: float = 60,
        settle: float = 10,
    ) -> str:
        """Say ``line`` and wait for its reply, which must show ``expect`` (one of them,
        where several are given): the text the console printed from the line's echo on (its
        reply, and any post printed since). A reply that says something else fails once
        nothing more was printed for ``settle`` seconds."""
        wanted = (expect,) if isinstance(expect, str) else expect
        assert self.process.stdin is not None
        start = len(self.out)
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()
        echo = f"> {line}\n"
        deadline = time.monotonic() + timeout
        seen, quiet_since = "", time.monotonic()
        while True:
            after = self.out[start:]
            at = after.find(echo)
            if at >= 0:
                section = after[at + len(echo) :]
                if section.endswith("\n\n"):
                    if any(w in section for w in wanted):
                        return section
                    if section != seen:
                        seen, quiet_since = section, time.monotonic()
                    assert time.monotonic() - quiet_since < settle, (
                        f"{line!r}: the reply does not say {expect!r}; it said:\n{section[-6000:]}"
                    )
            self._alive()
            assert time.monotonic() < deadline, (
                f"{line!r}: waited {timeout} s for {expect!r}; it said:\n{after[-6000:]}"
            )
            time.sleep(0.05)

    def shown(self, text: str, *, since: int = 0, timeout: float = 60) -> str:
        """Wait until the console has printed ``text`` (after position ``since``): a post
        the person sees without asking."""
        deadline = time.monotonic() + timeout
        while text not in self.out[since:]:
            self._alive()
            assert time.monotonic() < deadline, (
                f"waited {timeout} s for {text!r}; it said:\n{self.out[since:][-6000:]}"
            )
            time.sleep(0.1)
        return self.out[since:]

    def close(self, timeout: float = 60) -> None:
        """End of input: the console must exit cleanly, without a traceback."""
        if self.process.stdin is not None and not self.process.stdin.closed:
            self.process.stdin.close()
        self.process.wait(timeout=timeout)
        for reader in self._readers:
            reader.join(timeout=10)
        assert self.process.returncode == 0, self.err[-4000:]
        assert "Traceback" not in self.out + self.err, self.err[-4000:]

    def __enter__(self) -> ConsoleSession:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self.process.poll() is None:
            if kind is None:
                self.close()
            else:
                self.process.kill()
                self.process.wait()
