"""Every write to a host object goes through the patch registry (nodes/host/patches.py), or is one of the
few exceptions below, each with its reason (docs/architecture.md, "Writes to host objects").

A write is, in ``memory/`` and ``nodes/``, read with ``ast``: ``setattr``/``delattr``/``__setattr__`` on
an object that is not ``self`` (or ``cls``), and an assignment to ``X.__class__``, ``X.data`` or
``X.__dict__[...]`` where ``X`` is not ``self``. A new one fails here, naming its file and line: route it
through the registry, or add it below with the reason it cannot be (in the same commit).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WRITES = {"__class__", "data"}  # attributes whose assignment rebinds a host object's identity or storage
OWN = {"self", "cls"}

# (file, enclosing function) -> why it writes to a host object outside the registry. Keep it short.
EXCEPTIONS: dict[tuple[str, str], str] = {
    ("nodes/host/patches.py", "PatchRegistry.wrap"): "the registry itself: the write every patch makes",
    ("nodes/host/patches.py", "PatchRegistry.wrap.undo"): "the registry itself: a patch's undo",
    ("nodes/host/text_encoders.py", "_swap_class"): "the Stream CLIP class swap of our own clone: "
    "made here, recorded at once (REGISTRY.record(SWAP)) with its undo",
    ("nodes/host/text_encoders.py", "_swap_class.undo"): "that swap's undo, which the registry runs",
    ("nodes/host/prefetch.py", "HostPrefetch.land"): "a load the host's own way: the weights move to the "
    "device in place (the Parameter objects the host holds stay), its LoadedModel entry is the registered "
    "patch (REGISTRY.insert) and the host's unload moves them back; a failed load puts them back here",
    ("memory/residency/host_memory.py", "pin"): "a tier move (pinned RAM): memory/ never imports the "
    "registry; it rebinds .data so the Parameter the host and other patchers hold stays, and the next "
    "tier move (nodes/host/residency.place_host_copy) or the host's unload replaces it",
    ("memory/residency/host_memory.py", "to_pageable"): "a tier move (pageable RAM), as pin",
    ("memory/residency/mapped.py", "bind"): "a tier move (the file's pages), as pin",
    ("memory/residency/read_through.py", "_Hooks.wrap_apply"): "the disk tier's instance _apply: memory/ "
    "never imports the registry; its caller records the undo (REGISTRY.record_on(READ_THROUGH), held "
    "weakly so the registry does not keep the model alive)",
    ("memory/residency/read_through.py", "Borrowed.give_back"): "puts back the mapping's view lent for one "
    "host call, inside the registered wrapper of ModelPatcher.patch_weight_to_device (lora_reads)",
    ("memory/streaming/host_buffer.py", "set_weight"): "a streaming session binds each block's weights "
    "into its host buffer and puts the originals back when the session ends (in force only while the "
    "sampler runs, undone by the session itself, also on an interrupt)",
}


@dataclass(frozen=True)
class Write:
    path: str
    function: str
    line: int
    what: str


def _own(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id in OWN


def writes_in(path: Path, root: Path = ROOT) -> list[Write]:
    """Every write to an object that is not ``self`` in ``path``, with its enclosing function's name."""
    rel = path.relative_to(root).as_posix()
    found: list[Write] = []

    def visit(node: ast.AST, scope: list[str]) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            scope = [*scope, node.name]
        what = _write(node)
        if what:
            found.append(Write(rel, ".".join(scope), getattr(node, "lineno", 0), what))
        for child in ast.iter_child_nodes(node):
            visit(child, scope)

    visit(ast.parse(path.read_text(encoding="utf-8")), [])
    return found


def _write(node: ast.AST) -> str:
    if isinstance(node, ast.Call) and node.args and not _own(node.args[0]):
        func = node.func
        if isinstance(func, ast.Name) and func.id in ("setattr", "delattr"):
            return f"{func.id}({ast.unparse(node.args[0])}, ...)"
        if isinstance(func, ast.Attribute) and func.attr in ("__setattr__", "__delattr__"):
            return f"{ast.unparse(func)}({ast.unparse(node.args[0])}, ...)"
    targets: list[ast.expr] = []
    if isinstance(node, (ast.Assign, ast.Delete)):
        targets = list(node.targets)
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        targets = [node.target]
    for target in [e for t in targets for e in (t.elts if isinstance(t, ast.Tuple) else [t])]:
        if isinstance(target, ast.Attribute) and target.attr in WRITES and not _own(target.value):
            return f"{ast.unparse(target)} ="
        if (
            isinstance(target, ast.Subscript)
            and isinstance(target.value, ast.Attribute)
            and target.value.attr == "__dict__"
            and not _own(target.value.value)
        ):
            return f"{ast.unparse(target)} ="
    return ""


def pack_writes(root: Path = ROOT) -> list[Write]:
    files = [f for folder in ("memory", "nodes") for f in sorted((root / folder).rglob("*.py"))]
    return [w for f in files for w in writes_in(f, root)]


def test_every_write_to_a_host_object_is_registered_or_a_documented_exception() -> None:
    found = pack_writes()
    new = [
        f"{w.path}:{w.line} {w.what} (in {w.function})"
        for w in found
        if (w.path, w.function) not in EXCEPTIONS
    ]
    assert not new, (
        "a write to a host object outside the patch registry: route it through nodes/host/patches.py "
        "(replace, wrap, record, record_on, insert) or add it to EXCEPTIONS with its reason:\n"
        + "\n".join(new)
    )
    stale = sorted(set(EXCEPTIONS) - {(w.path, w.function) for w in found})
    assert not stale, f"exceptions that no longer write (take them out): {stale}"


def test_a_planted_host_write_is_found(tmp_path: Path) -> None:
    """The scan fires on each kind of write to another object, and not on an object's writes to itself."""
    (tmp_path / "nodes" / "host").mkdir(parents=True)
    (tmp_path / "nodes" / "host" / "planted.py").write_text(
        "def plant(model, clip, t, m, v):\n"
        "    setattr(model, 'forward', v)\n"
        "    clip.__class__ = type(v)\n"
        "    t.data = v\n"
        "    m.__dict__['_apply'] = v\n"
        "    object.__setattr__(model, 'x', v)\n"
        "\n"
        "class Own:\n"
        "    def __init__(self, v):\n"
        "        setattr(self, 'a', v)\n"
        "        self.data = v\n"
        "        self.__dict__['b'] = v\n"
        "        object.__setattr__(self, 'c', v)\n"
    )
    found = pack_writes(tmp_path)
    assert [(w.function, w.line, w.what) for w in found] == [
        ("plant", 2, "setattr(model, ...)"),
        ("plant", 3, "clip.__class__ ="),
        ("plant", 4, "t.data ="),
        ("plant", 5, "m.__dict__['_apply'] ="),
        ("plant", 6, "object.__setattr__(model, ...)"),
    ]
    assert all((w.path, w.function) not in EXCEPTIONS for w in found)
