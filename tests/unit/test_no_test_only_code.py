"""Every name the product defines has a caller in the product (issue #30): a function, class or module
constant of memory/ or nodes/ that only tests or benches use belongs in tests/headroom_testing/ or bench/.

The check is by name: a name counts as used when it appears anywhere in the product's code (memory/,
nodes/, the pack's entry points, js/ and the tools in scripts/) beyond its own definitions. A method
that shares its name with another use is never reported (so nothing is reported wrongly); the names the
host calls itself (route handlers it registers by decorator, handler methods it calls) are exempt.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFINING = ("memory", "nodes")
# Names the host calls, never the pack: ComfyUI's ProgressHandler methods on the pack's handler.
HOST_CALLS = {"start_handler", "finish_handler"}
_WORD = re.compile(r"\b[A-Za-z_]\w*\b")


def _product_files(root: Path) -> list[Path]:
    files = [p for d in (*DEFINING, "scripts") for p in (root / d).rglob("*.py")]
    files += [p for p in (root / "js").rglob("*.js") if "node_modules" not in p.parts]
    entry_points = ("__init__.py", "__main__.py", "cli.py", "version.py")
    files += [root / n for n in entry_points if (root / n).is_file()]
    return files


def _definitions(path: Path) -> list[tuple[str, int]]:
    """The names ``path`` defines: functions, classes and methods, and module-level constants."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            # a decorator with arguments registers it with the host (routes.get(...)) or wraps another
            registered = [d for d in node.decorator_list if isinstance(d, ast.Call)]
            if not (node.name.startswith("__") and node.name.endswith("__")) and not registered:
                found.append((node.name, node.lineno))
    for stmt in tree.body:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [getattr(stmt, "target", None)]
        found += [(t.id, stmt.lineno) for t in targets if isinstance(t, ast.Name) and t.id != "__all__"]
    return found


def unused(root: Path) -> list[str]:
    """``file:line name`` for each name memory/ or nodes/ defines that nothing in the product uses."""
    files = _product_files(root)
    uses: Counter[str] = Counter()
    for path in files:
        uses.update(_WORD.findall(path.read_text(encoding="utf-8")))
    defined = [
        (path, name, line)
        for path in files
        if path.suffix == ".py" and path.relative_to(root).parts[0] in DEFINING
        for name, line in _definitions(path)
    ]
    times = Counter(name for _, name, _ in defined)
    return [
        f"{path.relative_to(root)}:{line} {name}"
        for path, name, line in defined
        if uses[name] <= times[name] and name not in HOST_CALLS
    ]


def test_every_product_name_has_a_product_caller() -> None:
    assert unused(ROOT) == [], "used only by tests or benches (move them there, or give them a caller)"


def test_a_helper_only_a_test_calls_is_reported(tmp_path: Path) -> None:
    (tmp_path / "memory").mkdir()
    (tmp_path / "nodes").mkdir()
    (tmp_path / "memory" / "a.py").write_text(
        "LIMIT = 3\n\n\ndef used() -> int:\n    return LIMIT\n\n\ndef for_tests() -> int:\n    return 1\n"
    )
    (tmp_path / "nodes" / "b.py").write_text("from ..memory.a import used\n\nprint(used())\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text("from memory.a import for_tests\n")
    assert unused(tmp_path) == ["memory/a.py:8 for_tests"]
