"""The repository's root on ``sys.path``, for the benchmarks that use the test kit:
testkit/ is not part of the installed package (only bot, commands and services are), and a
script run as ``.venv/bin/python bench/NAME.py`` has only bench/ on its path besides it.
Imported for that effect before ``testkit``."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[1])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
