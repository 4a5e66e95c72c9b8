"""The migration files keep the convention ``head_revision`` reads the newest revision
from, without importing alembic: each is ``NNNN_what.py``, declares revision ``"NNNN"``,
and follows the one numbered before it; so the highest number is alembic's own head."""

from __future__ import annotations

import re
from importlib import resources

from alembic.config import Config
from alembic.script import ScriptDirectory

from services.db.migrate import head_revision


def test_every_migration_file_is_numbered_as_its_revision_and_follows_the_one_before() -> None:
    folder = resources.files("services") / "migrations" / "versions"
    files = sorted(f.name for f in folder.iterdir() if f.name.endswith(".py"))
    files.remove("__init__.py")
    assert files, "no migration files"
    for number, name in enumerate(files, start=1):
        assert re.fullmatch(r"\d{4}_\w+\.py", name), f"{name}: expected NNNN_what.py"
        source = (folder / name).read_text()
        revision = re.search(r'^revision = "(\w+)"$', source, re.M)
        down = re.search(r"^down_revision = (None|\"\w+\")$", source, re.M)
        assert revision and revision[1] == name[:4] == f"{number:04d}", name
        assert down and down[1] == ("None" if number == 1 else f'"{number - 1:04d}"'), name


def test_the_newest_revision_read_from_the_names_is_alembics_head() -> None:
    cfg = Config()
    cfg.set_main_option("script_location", str(resources.files("services") / "migrations"))
    assert head_revision() == ScriptDirectory.from_config(cfg).get_current_head()
