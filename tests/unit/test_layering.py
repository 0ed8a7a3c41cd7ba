"""The layer rules of DESIGN.md, checked on the source: they fail the moment an import breaks them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Top-level modules a ComfyUI host provides; only nodes/host.py may import them.
HOST_MODULES = {
    "comfy", "comfy_api", "comfy_execution", "comfy_extras", "comfyui_version", "execution",
    "folder_paths", "latent_preview", "node_helpers", "nodes", "server", "app", "comfy_aimdo",
}  # fmt: skip
PACK_DIRS = ("memory", "nodes")


def pack_files() -> list[Path]:
    files = [p for p in ROOT.glob("*.py")]
    for folder in PACK_DIRS:
        files += sorted((ROOT / folder).rglob("*.py"))
    return files


def absolute_imports(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return found


def relative_imports(path: Path) -> list[tuple[int, int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    return [
        (n.lineno, n.level, n.module or "")
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom) and n.level > 0
    ]


def test_the_pack_has_the_documented_layout() -> None:
    for name in ("__init__.py", "__main__.py", "pyproject.toml", "requirements.txt", "README.md", "LICENSE"):
        assert (ROOT / name).is_file(), name
    for name in ("nodes", "memory", "js", "workflows", "tests", "bench", ".ci"):
        assert (ROOT / name).is_dir(), name
    assert (ROOT / ".ci" / "run").is_file()


@pytest.mark.parametrize("path", pack_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_only_the_host_module_imports_comfyui(path: Path) -> None:
    if path == ROOT / "nodes" / "host.py":
        return
    offending = [(line, mod) for line, mod in absolute_imports(path) if mod.split(".")[0] in HOST_MODULES]
    assert not offending, f"{path.relative_to(ROOT)} imports the host directly: {offending}"


@pytest.mark.parametrize("path", pack_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_the_pack_imports_itself_relatively(path: Path) -> None:
    # ComfyUI imports the pack under its folder name, which is not comfyui_headroom.
    imports = absolute_imports(path)
    offending = [(line, mod) for line, mod in imports if mod.split(".")[0] == "comfyui_headroom"]
    assert not offending, f"{path.relative_to(ROOT)}: use relative imports inside the pack: {offending}"


@pytest.mark.parametrize("path", sorted((ROOT / "memory").rglob("*.py")), ids=lambda p: p.name)
def test_memory_imports_nothing_outside_memory(path: Path) -> None:
    depth = len(path.relative_to(ROOT / "memory").parts)  # memory/x.py -> 1, memory/sub/x.py -> 2
    escaping = [(line, level, mod) for line, level, mod in relative_imports(path) if level > depth]
    assert not escaping, f"memory/ must not import the nodes or the rest of the pack: {escaping}"


def test_host_module_is_the_one_place_with_host_imports() -> None:
    host = ROOT / "nodes" / "host.py"
    text = host.read_text(encoding="utf-8")
    assert "_host(" in text and "importlib" in text
