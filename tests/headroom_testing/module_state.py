"""Finding process-wide state in source: module-level objects a function changes, objects made by a call
at import, ``global`` rebinding and cached functions (tests/unit/test_process_state.py holds the pack to
declaring each in ``memory.process_state.PROCESS``)."""

from __future__ import annotations

import ast
from dataclasses import dataclass

# calls whose result does not change after import (or is per thread/context by design)
IMMUTABLE_CALLS = frozenset(
    {"compile", "frozenset", "tuple", "TypeVar", "ParamSpec", "getLogger", "object", "namedtuple", "Path",
     "int", "float", "str", "bytes", "MappingProxyType", "Lock", "RLock", "CFUNCTYPE", "cast", "field"}
)  # fmt: skip
_MUTATORS = frozenset(
    {"add", "pop", "clear", "update", "setdefault", "append", "extend", "remove", "discard", "popitem",
     "move_to_end", "insert", "appendleft", "popleft"}
)  # fmt: skip
_CONTAINERS = (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)


@dataclass(frozen=True)
class Found:
    name: str
    line: int
    kind: str  # "mutated container", "made by a call", "rebound with global", "cached function"


def _held(value: ast.expr) -> bool:
    return isinstance(value, ast.Call) and ast.unparse(value.func).endswith("PROCESS.hold")


def module_state(source: str) -> list[Found]:
    """The process-wide objects of one module's source that are not declared with ``PROCESS.hold``."""
    tree = ast.parse(source)
    assigned: dict[str, tuple[int, ast.expr]] = {}
    found: list[Found] = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            assigned[node.targets[0].id] = (node.lineno, node.value)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            assigned[node.target.id] = (node.lineno, node.value)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if any("cache" in ast.unparse(d) for d in node.decorator_list):
                found.append(Found(node.name, node.lineno, "cached function"))
    changed: set[str] = set()
    rebound: set[str] = set()
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        for x in ast.walk(fn):
            if isinstance(x, ast.Global):
                rebound.update(x.names)
            elif isinstance(x, ast.Call) and isinstance(x.func, ast.Attribute) and x.func.attr in _MUTATORS:
                if isinstance(x.func.value, ast.Name):
                    changed.add(x.func.value.id)
            elif isinstance(x, (ast.Assign, ast.AugAssign, ast.Delete)):
                targets = x.targets if isinstance(x, (ast.Assign, ast.Delete)) else [x.target]
                for t in targets:
                    if isinstance(t, ast.Subscript):
                        if isinstance(t.value, ast.Name):
                            changed.add(t.value.id)
                        elif ast.unparse(t.value) == "globals()":
                            rebound.add(ast.unparse(t.slice))
    for name, (line, value) in assigned.items():
        if _held(value) or name.startswith("__"):
            continue
        if isinstance(value, _CONTAINERS) and name in changed:
            found.append(Found(name, line, "mutated container"))
        elif isinstance(value, ast.Call) and ast.unparse(value.func).split(".")[-1] not in IMMUTABLE_CALLS:
            found.append(Found(name, line, "made by a call"))
    for name in sorted(rebound):
        line = assigned.get(name, (0, None))[0]
        found.append(Found(name, line, "rebound with global"))
    return sorted(found, key=lambda f: (f.line, f.name))
