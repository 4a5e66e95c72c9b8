"""The console's terminal: the prompt, and posts that arrive while it waits.

A plan's wave, an expiry or an alert is posted by a background task while the console
waits for the next line. Printed as it comes, it would land after ``queuebot> `` and the
prompt would be gone. So while the prompt is up, a post first returns to the start of
the line and clears it (``\\r`` and the terminal's erase-line), prints on lines of its own,
and draws the prompt again under it. Text already typed on that line stays in the
terminal's input buffer (Enter still sends it) but is no longer shown: the console reads
plain lines, with no line editor that could redraw it. Without a terminal (a script
piping lines in) there is no prompt, and posts are printed as they come."""

from __future__ import annotations

from typing import TextIO

PROMPT = "queuebot> "
CLEAR_LINE = "\r\x1b[K"  # to the start of the line, then erase it


class Screen:
    """One output for the console and its notifier, which knows when the prompt is up."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.prompting = False

    def prompt(self) -> None:
        """Draw the prompt; the console is about to wait for a line."""
        self.out.write(PROMPT)
        self.out.flush()
        self.prompting = True

    def answered(self) -> None:
        """A line was read: the cursor is on a new line, under the prompt."""
        self.prompting = False

    def write(self, text: str) -> None:
        """Print ``text`` (whole lines); over a waiting prompt, on lines of its own and
        with the prompt drawn again after it."""
        if self.prompting:
            self.out.write(CLEAR_LINE + text + PROMPT)
        else:
            self.out.write(text)
        self.out.flush()
