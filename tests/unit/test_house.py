"""The house keeps its limits (docs/architecture.md): no module over 450 lines in bot/,
commands/ and services/, and at most 16 modules at services/'s top. ``python
scripts/house.py`` draws the whole picture; this runs its check."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def house() -> ModuleType:
    spec = importlib.util.spec_from_file_location("house", ROOT / "scripts" / "house.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_no_module_is_over_its_size_and_services_top_stays_small() -> None:
    assert house().broken(ROOT) == []


def test_the_check_names_what_breaks_a_limit(tmp_path: Path) -> None:
    for top in ("bot", "commands", "services"):
        (tmp_path / top).mkdir()
    (tmp_path / "bot" / "long.py").write_text("x = 1\n" * 451)
    for n in range(17):
        (tmp_path / "services" / f"m{n}.py").write_text("")
    assert house().broken(tmp_path) == [
        "bot/long.py is 451 lines (limit 450)",
        "services/ has 17 modules at its top (limit 16)",
    ]
