"""The shape of the house, measured from the code: modules and lines per package, the
modules over the size limit, the loose modules at ``services/``'s top, and the imports
between the packages of ``services/`` (``A -> B: n`` = n import statements in A name B).

    python scripts/house.py            the whole picture
    python scripts/house.py --check    only the limits; exit 1 when one is broken

The limits (docs/architecture.md): no module over ``MAX_LINES`` lines in bot/, commands/
and services/; at most ``MAX_TOP`` modules at services/'s top, ``__init__.py`` included.
tests/unit/test_house.py runs the check in the suite.
"""

from __future__ import annotations

import ast
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CODE = ("bot", "commands", "services")
MAX_LINES = 450
MAX_TOP = 16


def modules(root: Path = ROOT) -> list[Path]:
    return sorted(
        p for top in CODE for p in (root / top).rglob("*.py") if "migrations" not in p.parts
    )


def lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def too_long(root: Path = ROOT) -> list[tuple[str, int]]:
    found = [(str(p.relative_to(root)), lines(p)) for p in modules(root)]
    return [(name, n) for name, n in found if n > MAX_LINES]


def services_top(root: Path = ROOT) -> list[str]:
    return sorted(p.name for p in (root / "services").glob("*.py"))


def package_of(module: str) -> str:
    """``services.plans.engine`` -> ``services.plans``; ``bot.serve`` -> ``bot``."""
    parts = module.split(".")
    if parts[0] == "services" and len(parts) > 1:
        return ".".join(parts[:2])
    return parts[0]


def module_name(path: Path, root: Path) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_between(root: Path = ROOT) -> Counter[tuple[str, str]]:
    arrows: Counter[tuple[str, str]] = Counter()
    for path in modules(root):
        source = package_of(module_name(path, root))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
                if node.module == "services":
                    names = [f"services.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            for name in names:
                if name.split(".")[0] not in CODE:
                    continue
                target = package_of(name)
                if target != source:
                    arrows[(source, target)] += 1
    return arrows


def picture(root: Path = ROOT) -> str:
    out: list[str] = []
    per_package: Counter[str] = Counter()
    per_package_lines: Counter[str] = Counter()
    for path in modules(root):
        package = package_of(module_name(path, root))
        per_package[package] += 1
        per_package_lines[package] += lines(path)
    out.append("modules and lines per package:")
    for package in sorted(per_package):
        out.append(f"  {package:32} {per_package[package]:4} {per_package_lines[package]:7}")
    total = sum(per_package.values())
    out.append(f"  {'all':32} {total:4} {sum(per_package_lines.values()):7}")
    top = services_top(root)
    out.append(f"modules at services/'s top: {len(top)} (limit {MAX_TOP}): {' '.join(top)}")
    long = too_long(root)
    out.append(f"modules over {MAX_LINES} lines: {len(long)}")
    out.extend(f"  {name} {n}" for name, n in long)
    arrows = imports_between(root)
    between = {k: v for k, v in arrows.items() if k[0].startswith("services.")}
    out.append(f"imports between the packages of services/: {len(between)} arrows")
    out.extend(f"  {a} -> {b}: {n}" for (a, b), n in sorted(between.items()))
    return "\n".join(out)


def broken(root: Path = ROOT) -> list[str]:
    found = [f"{name} is {n} lines (limit {MAX_LINES})" for name, n in too_long(root)]
    top = services_top(root)
    if len(top) > MAX_TOP:
        found.append(f"services/ has {len(top)} modules at its top (limit {MAX_TOP})")
    return found


def main(argv: list[str]) -> int:
    root = ROOT
    rest = [a for a in argv if a != "--check"]
    if rest:
        root = Path(rest[0]).resolve()
    if "--check" in argv:
        problems = broken(root)
        for problem in problems:
            print(problem)
        return 1 if problems else 0
    print(picture(root))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
