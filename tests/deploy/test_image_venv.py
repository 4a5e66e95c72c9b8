"""scripts/image.sh in a fresh clone: with no .venv yet it makes one the way
scripts/test.sh does (python3 -m venv .venv, then queuebot installed into it editable),
instead of stopping with "no Python at .venv/bin/python". Run in a copy of the script
with stand-ins for Python and Docker on PATH (they record what they were asked), so
nothing is installed and no image is built: the stand-in Docker has no engine, where
the script stops on its own."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

FAKE_PYTHON = """#!/usr/bin/env bash
echo "python3 $*" >>"$CALLS"
if [ "$1" = -m ] && [ "$2" = venv ]; then
  mkdir -p "$3/bin"
  cat >"$3/bin/python" <<'VENV'
#!/usr/bin/env bash
echo "venv $*" >>"$CALLS"
if [ "$1" = -c ]; then echo 3.11; fi
VENV
  chmod +x "$3/bin/python"
fi
"""
NO_ENGINE = '#!/usr/bin/env bash\necho "docker $*" >>"$CALLS"\nexit 1\n'


def clone(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A tree holding the script and pyproject.toml, no .venv; PATH with the stand-ins."""
    tree = tmp_path / "clone"
    (tree / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "image.sh", tree / "scripts" / "image.sh")
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stand_ins = {"python3": FAKE_PYTHON, "python3.11": FAKE_PYTHON, "docker": NO_ENGINE}
    for name, text in stand_ins.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "CALLS": str(tmp_path / "calls.log"),
    }
    return tree, env


def image_sh(tree: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``scripts/image.sh fresh`` in the clone ``tree``, with ``env`` only."""
    return subprocess.run(
        ["bash", "scripts/image.sh", "fresh"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_image_sh_makes_the_venv_in_a_fresh_clone(tmp_path: Path) -> None:
    tree, env = clone(tmp_path)
    run = image_sh(tree, env)
    assert "no Python at" not in run.stderr, run.stderr
    assert run.returncode == 2 and "no Docker engine answers" in run.stderr, run.stderr
    assert "image: no .venv yet: making it as scripts/test.sh does" in run.stdout, run.stdout
    calls = (tmp_path / "calls.log").read_text().splitlines()
    assert calls[:3] == [
        "python3 -m venv .venv",
        "venv -m pip install -q --upgrade pip",
        "venv -m pip install -q -e .[test]",
    ], calls
    assert (tree / ".venv" / ".queuebot-installed").is_file()  # scripts/test.sh's stamp

    # made once: the next run uses it as it is
    os.remove(tmp_path / "calls.log")
    again = image_sh(tree, env)
    assert again.returncode == 2 and "no Docker engine answers" in again.stderr, again.stderr
    calls = (tmp_path / "calls.log").read_text().splitlines()
    assert not [c for c in calls if c.startswith("python3") or " pip " in c], calls


def test_a_python_named_by_the_caller_is_used_and_never_made(tmp_path: Path) -> None:
    tree, env = clone(tmp_path)
    run = image_sh(tree, {**env, "PYTHON": str(tmp_path / "nowhere" / "python")})
    assert run.returncode == 2, run.stderr
    assert f"image: no Python at {tmp_path / 'nowhere' / 'python'}" in run.stderr, run.stderr
    assert not (tree / ".venv").exists()
