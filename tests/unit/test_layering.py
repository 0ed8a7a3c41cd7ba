"""The layer rules of docs/architecture.md ("Layer rules"), checked on the source: each fails the moment an
import breaks it, naming the import (file:line).

Imports are read with ``ast``: relative and absolute (``comfyui_headroom.…``) ones, at module level, inside
functions and under ``if TYPE_CHECKING:`` alike, since each of them is a dependency a reader has to follow.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACK = "comfyui_headroom"  # the import name; ComfyUI imports the same folder under another name
# Top-level modules a ComfyUI host provides; only the host module (nodes/host) may import them.
HOST_MODULES = {
    "comfy", "comfy_api", "comfy_execution", "comfy_extras", "comfyui_version", "execution",
    "folder_paths", "latent_preview", "node_helpers", "nodes", "server", "app", "comfy_aimdo",
}  # fmt: skip
PACK_DIRS = ("memory", "nodes")
# memory/planning decides; the runtime packages act on its plans and telemetry measures them.
RUNTIME = ("memory.residency", "memory.streaming", "memory.tiled_vae", "memory.telemetry")


# ------------------------------------------------------------------------------------ the import graph


@dataclass(frozen=True)
class Import:
    source: str  # importing module, dotted from the pack root ("" is the pack's __init__)
    target: str  # imported pack module, or the absolute name for a module outside the pack
    path: Path
    line: int
    in_pack: bool

    def where(self, root: Path = ROOT) -> str:
        return f"{self.path.relative_to(root)}:{self.line} imports {self.target or PACK}"


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def pack_files(root: Path = ROOT, dirs: tuple[str, ...] = PACK_DIRS) -> list[Path]:
    files = sorted(root.glob("*.py"))
    for folder in dirs:
        files += sorted((root / folder).rglob("*.py"))
    return files


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def imports_of(path: Path, modules: set[str], root: Path = ROOT) -> list[Import]:
    """Every import in ``path``: pack modules resolved to their dotted name from the pack root, others kept
    absolute. ``from X import y`` depends on ``X.y`` when that is a module, else on ``X``; importing ``a.b.c``
    also runs the packages ``a`` and ``a.b`` unless they enclose the importer (then they are running)."""
    source = module_name(path, root)
    package = source.split(".") if path.name == "__init__.py" and source else source.split(".")[:-1]
    found: list[Import] = []

    def add(target: str, line: int, names: list[str]) -> None:
        subs = [f"{target}.{n}".strip(".") for n in names if f"{target}.{n}".strip(".") in modules]
        targets = subs if subs and len(subs) == len(names) else [target, *subs]
        parts = target.split(".") if target else []
        for i in range(1, len(parts)):  # enclosing packages run first
            enclosing = ".".join(parts[:i])
            if enclosing in modules and not _within(source, enclosing):
                targets.append(enclosing)
        for t in dict.fromkeys(targets):
            if t != source:
                found.append(Import(source, t, path, line, in_pack=True))

    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                name = alias.name
                if name == PACK or name.startswith(PACK + "."):
                    add(name[len(PACK) + 1 :], node.lineno, [])
                else:
                    found.append(Import(source, name, path, node.lineno, in_pack=False))
        elif isinstance(node, ast.ImportFrom):
            names = [a.name for a in node.names if a.name != "*"]
            if node.level:
                if node.level - 1 > len(package):
                    raise AssertionError(f"{path}:{node.lineno}: a relative import above the pack root")
                base = package[: len(package) - (node.level - 1)]
                add(".".join([*base, *([node.module] if node.module else [])]), node.lineno, names)
            elif node.module == PACK or (node.module or "").startswith(PACK + "."):
                add(node.module[len(PACK) + 1 :], node.lineno, names)
            else:
                found.append(Import(source, node.module or "", path, node.lineno, in_pack=False))
    return sorted(found, key=lambda i: i.line)


def import_graph(root: Path = ROOT, dirs: tuple[str, ...] = PACK_DIRS) -> dict[str, list[Import]]:
    files = pack_files(root, dirs)
    modules = {module_name(p, root) for p in files}
    return {module_name(p, root): imports_of(p, modules, root) for p in files}


def cycles(graph: dict[str, list[Import]]) -> list[list[Import]]:
    """One cycle (as its imports, in order) per strongly connected group of modules (Tarjan)."""
    edges = {m: [i for i in imps if i.in_pack and i.target in graph] for m, imps in graph.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for edge in edges[v]:
            w = edge.target
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(group)

    for v in sorted(edges):
        if v not in index:
            visit(v)
    found = []
    for group in groups:  # walk inside the group from its first module back to itself
        start = min(group)
        path: list[Import] = []
        seen: set[str] = set()
        v = start
        while not (path and v == start):
            seen.add(v)
            inside = [e for e in edges[v] if e.target in group]
            edge = next((e for e in inside if e.target == start), None) or next(
                (e for e in inside if e.target not in seen), inside[0]
            )
            path.append(edge)
            v = edge.target
            if v in seen and v != start:  # closed a loop that skips the start: report that loop
                path = path[next(i for i, e in enumerate(path) if e.source == v) :]
                break
        found.append(path)
    return found


GRAPH = import_graph()


def _offending(prefix: str, rule: Callable[[Import], bool]) -> list[str]:
    return [
        i.where()
        for module, imports in sorted(GRAPH.items())
        if _within(module, prefix)
        for i in imports
        if rule(i)
    ]


# ------------------------------------------------------------------------------------------- the rules


def test_no_import_cycles() -> None:
    found = cycles(GRAPH)
    assert not found, "import cycles (see docs/architecture.md, Layer rules):\n" + "\n".join(
        " -> ".join(i.where() for i in cycle) for cycle in found
    )


def test_planning_imports_none_of_the_runtime_or_telemetry() -> None:
    bad = _offending("memory.planning", lambda i: i.in_pack and any(_within(i.target, r) for r in RUNTIME))
    assert not bad, "memory/planning must not import " + ", ".join(RUNTIME) + ":\n" + "\n".join(bad)


def test_workflow_and_models_import_nothing_of_planning() -> None:
    bad = [
        *_offending("memory.workflow", lambda i: i.in_pack and _within(i.target, "memory.planning")),
        *_offending("memory.models", lambda i: i.in_pack and _within(i.target, "memory.planning")),
    ]
    assert not bad, "memory/workflow and memory/models sit below planning:\n" + "\n".join(bad)


def test_memory_imports_nothing_outside_memory() -> None:
    # Not nodes/, not the pack root (whose __init__ loads nodes/): the core runs and is tested without them.
    bad = _offending("memory", lambda i: i.in_pack and not _within(i.target, "memory"))
    assert not bad, "memory/ must not import nodes/ or the rest of the pack:\n" + "\n".join(bad)


def test_memory_never_imports_comfyui() -> None:
    bad = _offending("memory", lambda i: not i.in_pack and i.target.split(".")[0] in HOST_MODULES)
    assert not bad, "memory/ must not import the host:\n" + "\n".join(bad)


def _is_host_module(path: Path) -> bool:
    host = ROOT / "nodes" / "host"
    return path == host.with_suffix(".py") or host in path.parents


@pytest.mark.parametrize("path", pack_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_only_the_host_module_imports_comfyui(path: Path) -> None:
    if _is_host_module(path):
        return
    modules = set(GRAPH)
    bad = [
        i.where()
        for i in imports_of(path, modules)
        if not i.in_pack and i.target.split(".")[0] in HOST_MODULES
    ]
    assert not bad, "only nodes/host imports the host:\n" + "\n".join(bad)


@pytest.mark.parametrize("path", pack_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_the_pack_imports_itself_relatively(path: Path) -> None:
    # ComfyUI imports the pack under its folder name, which is not comfyui_headroom.
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    bad = [
        f"{path.relative_to(ROOT)}:{n.lineno}"
        for n in ast.walk(tree)
        if (isinstance(n, ast.Import) and any(a.name.split(".")[0] == PACK for a in n.names))
        or (isinstance(n, ast.ImportFrom) and n.level == 0 and (n.module or "").split(".")[0] == PACK)
    ]
    assert not bad, "use relative imports inside the pack: " + ", ".join(bad)


def test_the_pack_has_the_documented_layout() -> None:
    for name in ("__init__.py", "__main__.py", "pyproject.toml", "requirements.txt", "README.md", "LICENSE"):
        assert (ROOT / name).is_file(), name
    for name in ("nodes", "memory", "js", "example_workflows", "tests", "bench", ".ci", "docs"):
        assert (ROOT / name).is_dir(), name
    assert (ROOT / ".ci" / "run").is_file()
    assert (ROOT / "docs" / "architecture.md").is_file()


def test_host_module_is_the_one_place_with_host_imports() -> None:
    host = sorted(p for p in pack_files() if _is_host_module(p))
    assert host, "no nodes/host module"
    text = "".join(p.read_text(encoding="utf-8") for p in host)
    assert "host_module(" in text and "importlib" in text


# ------------------------------------------------------------------- the checker on packs made to fail


def _pack(tmp_path: Path, files: dict[str, str]) -> dict[str, list[Import]]:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    return import_graph(tmp_path, ("memory",))


def test_a_type_checking_import_closes_a_cycle(tmp_path: Path) -> None:
    graph = _pack(
        tmp_path,
        {
            "memory/__init__.py": "",
            "memory/s/__init__.py": "",
            "memory/s/a.py": "from .b import B\n",
            "memory/s/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import A\n",
        },
    )
    (cycle,) = cycles(graph)
    assert [(i.source, i.target, i.line) for i in cycle] == [
        ("memory.s.a", "memory.s.b", 1),
        ("memory.s.b", "memory.s.a", 3),
    ]
    assert cycle[0].where(tmp_path) == "memory/s/a.py:1 imports memory.s.b"


def test_function_level_and_absolute_imports_count(tmp_path: Path) -> None:
    graph = _pack(
        tmp_path,
        {
            "memory/__init__.py": "",
            "memory/x.py": "def f():\n    from comfyui_headroom.memory import y\n",
            "memory/y.py": "from . import z\n",
            "memory/z.py": "import comfyui_headroom.memory.x\n",
        },
    )
    (cycle,) = cycles(graph)
    assert {(i.source, i.target) for i in cycle} == {
        ("memory.x", "memory.y"), ("memory.y", "memory.z"), ("memory.z", "memory.x"),
    }  # fmt: skip


def test_importing_a_module_runs_its_package_and_that_can_close_a_cycle(tmp_path: Path) -> None:
    files = {
        "memory/__init__.py": "",
        "memory/p/__init__.py": "from .q import Q\n",
        "memory/p/q.py": "from ..r import R\n",
        "memory/r.py": "from .p.other import O\n",  # runs memory/p/__init__.py first
        "memory/p/other.py": "",
    }
    (cycle,) = cycles(_pack(tmp_path, files))
    assert {(i.source, i.target) for i in cycle} == {
        ("memory.p", "memory.p.q"), ("memory.p.q", "memory.r"), ("memory.r", "memory.p"),
    }  # fmt: skip
    # a submodule importing its sibling does not run the package it is part of again
    graph = _pack(tmp_path, {"memory/r.py": "", "memory/p/q.py": "from .other import O\n"})
    assert not cycles(graph)
    assert [i.target for i in graph["memory.p.q"]] == ["memory.p.other"]


def test_acyclic_imports_pass_and_outside_modules_are_kept(tmp_path: Path) -> None:
    graph = _pack(
        tmp_path,
        {
            "memory/__init__.py": "",
            "memory/a.py": "import torch\nfrom .b import B\nfrom comfy import sd\n",
            "memory/b.py": "from collections import deque\n",
        },
    )
    assert not cycles(graph)
    assert [(i.target, i.in_pack) for i in graph["memory.a"]] == [
        ("torch", False), ("memory.b", True), ("comfy", False),
    ]  # fmt: skip


def test_the_module_map_in_docs_architecture_names_every_module() -> None:
    """docs/architecture.md's "Folders" section is the module map: a new module is named there."""
    import re

    doc = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = doc[doc.index("## Folders") : doc.index("## Layer rules")]
    named = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", section))
    missing = [
        str(p.relative_to(ROOT))
        for folder in PACK_DIRS
        for p in sorted((ROOT / folder).rglob("*.py"))
        if p.stem != "__init__" and p.stem not in named
    ]
    assert missing == [], f"name these in docs/architecture.md's module map: {missing}"
