"""The host's API as a contract: which host names ``nodes/host/`` touches, what each host has under them,
and whether the two agree.

``touched(dir)`` reads the pack's host code (no import): inside each function, a name bound to a host
module (``mm = host_module("comfy.model_management")``, ``sys.modules.get("execution")``, ``import
comfy.sd``, or the conventional names ``mm``, ``execution``, ``progress``) and what is read off it
(``mm.free_memory(...)``, ``execution.PromptExecutor.add_message``, ``getattr(mm, "vram_state", None)``).
A read through ``getattr(x, name, default)``/``hasattr`` is feature-detected: the code works without it.
A call records the keywords and the number of positional arguments it passes.

``describe(source)`` reads one host module's source (no import either, so a file read from a public
index, as 0.38's ``model_management.py``, is described the same way as a checkout): its top-level
functions, classes (their methods and the ``self.x`` their ``__init__`` sets), values and imports, with
each function's parameters. ``dump_host_api.py`` writes, per host version, the description of every
touched name into ``memory/data/host_api/<version>.json``; ``check(uses, record)`` lists what a record
breaks: a name used without feature detection that the host lacks, a keyword it does not take, more
positional arguments than it accepts.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CONVENTIONAL = {
    "mm": "comfy.model_management",
    "self.mm": "comfy.model_management",
    "execution": "execution",
    "progress": "comfy_execution.progress",
    "server": "server:PromptServer",  # an instance: module:Class
}
# comfy_aimdo: the DynamicVRAM library the host pins (its records: comfy-aimdo-<version>.json)
HOST_ROOTS = (
    "comfy", "comfy_execution", "execution", "server", "nodes", "folder_paths", "comfyui_version",
    "comfy_aimdo",
)  # fmt: skip


@dataclass
class Use:
    """One host name as ``nodes/host/`` uses it (``module``: the host module; ``path``: names below it)."""

    module: str
    path: tuple[str, ...]
    required: bool = False  # read directly somewhere (not only through getattr/hasattr)
    calls: list[tuple[int, tuple[str, ...]]] = field(default_factory=list)  # (positional, keywords)
    where: set[str] = field(default_factory=set)

    @property
    def key(self) -> str:
        return ".".join((self.module, *self.path))


def _chain(node: ast.AST) -> list[str] | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return [node.id, *reversed(parts)]
    return None


def _loaded_module(value: ast.AST) -> str | None:
    """The host module a call such as ``host_module("comfy.sd")`` returns."""
    if not isinstance(value, ast.Call) or not value.args or not isinstance(value.args[0], ast.Constant):
        return None
    func = _chain(value.func)
    name = value.args[0].value
    loader = func is not None and (
        func[-1] in ("host_module", "import_module") or func == ["sys", "modules", "get"]
    )
    if loader and isinstance(name, str) and name.split(".")[0] in HOST_ROOTS:
        return name
    return None


class _Scanner(ast.NodeVisitor):
    def __init__(self, where: str, uses: dict[str, Use], class_aliases: dict[str, str]) -> None:
        self.where, self.uses = where, uses
        self.aliases: dict[str, str] = dict(class_aliases)
        self.guarded: set[tuple[str, str]] = set()  # (module, name) feature-detected in this function
        self.optional_modules: set[str] = set()  # host modules this function tests for ``is None``

    def _use(self, module: str, path: list[str], required: bool) -> Use | None:
        if not path or path[-1].startswith("_headroom"):  # the pack's own marks on host objects
            return None
        path = path[:2] if path[0][:1].isupper() else path[:1]  # module.name or module.Class.member
        key = ".".join((module, *path))
        use = self.uses.setdefault(key, Use(module, tuple(path)))
        if not required:
            self.guarded.add((module, path[0]))
        use.required |= (
            required and (module, path[0]) not in self.guarded and module not in self.optional_modules
        )
        use.where.add(self.where)
        return use

    def _resolve(self, chain: list[str]) -> tuple[str, list[str]] | None:
        for n in range(len(chain), 0, -1):
            head = ".".join(chain[:n])
            if head in self.aliases:
                return self.aliases[head], chain[n:]
        for n in range(len(chain), 0, -1):
            head = ".".join(chain[:n])
            if head in CONVENTIONAL:
                module, _, cls = CONVENTIONAL[head].partition(":")
                return module, [cls, *chain[n:]] if cls else chain[n:]
        return None

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name.split(".")[0] in HOST_ROOTS:
                self.aliases[alias.asname or alias.name] = alias.name

    def visit_Assign(self, node: ast.Assign) -> None:
        module = _loaded_module(node.value)
        chain = _chain(node.value)
        resolved = self._resolve(chain) if chain else None
        for target in node.targets:
            name = _chain(target)
            if name is None:
                continue
            if module is not None:
                self.aliases[".".join(name)] = module
            elif resolved is not None and not resolved[1]:
                self.aliases[".".join(name)] = resolved[0]
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = _chain(node.func)
        if (
            func in (["getattr"], ["hasattr"])
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
        ):
            inner = _chain(node.args[0])
            resolved = self._resolve(inner) if inner else None
            if resolved is not None and isinstance(node.args[1].value, str):
                self._use(resolved[0], [*resolved[1], node.args[1].value], required=False)
                for arg in node.args[2:]:
                    self.visit(arg)
                self.visit(node.args[0]) if not isinstance(node.args[0], ast.Name) else None
                return
        if func is not None:
            resolved = self._resolve(func)
            if resolved is not None and resolved[1] and len(resolved[1]) <= 2:
                use = self._use(resolved[0], resolved[1], required=True)
                if use is not None and len(resolved[1]) == len(use.path):
                    starred = any(isinstance(a, ast.Starred) for a in node.args)
                    keywords = tuple(k.arg for k in node.keywords if k.arg is not None)
                    if not starred and all(k.arg is not None for k in node.keywords):
                        use.calls.append((len(node.args), keywords))
                for arg in [*node.args, *(k.value for k in node.keywords)]:
                    self.visit(arg)
                if isinstance(node.func, ast.Attribute):
                    self.visit(node.func.value) if len(resolved[1]) > 2 else None
                return
        self.generic_visit(node)

    def visit_Compare(self, node: ast.Compare) -> None:
        """``progress is None``: the function copes with a host without that module."""
        if isinstance(node.left, ast.Name) and any(isinstance(op, ast.Is | ast.IsNot) for op in node.ops):
            resolved = self._resolve([node.left.id])
            if resolved is not None and not resolved[1]:
                self.optional_modules.add(resolved[0])
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        chain = _chain(node)
        resolved = self._resolve(chain) if chain else None
        if resolved is not None and resolved[1]:
            self._use(
                resolved[0], resolved[1], required=not isinstance(getattr(node, "ctx", None), ast.Store)
            )
            return
        self.generic_visit(node)


LEGACY = "legacy_2024"  # the module of the 2024 host's code paths (nodes/host/legacy_2024.py)
CURRENT_ONLY = " (current hosts: the 2024 host's path is legacy_2024's)"


def _branches_to_legacy(func: ast.AST) -> bool:
    """Whether a function asks ``legacy_2024`` first: what it reads after that is current hosts' only."""
    return any(isinstance(n, ast.Call) and (_chain(n.func) or [""])[0] == LEGACY for n in ast.walk(func))


def _where(path: Path, name: str, func: ast.AST) -> str:
    return f"{path.name}:{name}" + (CURRENT_ONLY if _branches_to_legacy(func) else "")


def touched(host_dir: Path) -> dict[str, Use]:
    """Every host name the modules in ``host_dir`` (``nodes/host``) touch, by ``module.name[.member]``."""
    uses: dict[str, Use] = {}
    for path in sorted(host_dir.glob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in tree.body:  # nested functions are read with their enclosing one (and its guards)
            if isinstance(node, ast.ClassDef):  # self.x = host_module(...) in one method, used in others
                aliases: dict[str, str] = {}
                for item in ast.walk(node):
                    if isinstance(item, ast.Assign) and _loaded_module(item.value):
                        for target in item.targets:
                            if _chain(target):
                                aliases[".".join(_chain(target) or [])] = _loaded_module(item.value) or ""
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        _Scanner(_where(path, f"{node.name}.{item.name}", item), uses, aliases).visit(item)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                _Scanner(_where(path, node.name, node), uses, {}).visit(node)
    return uses


def _params(func: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, Any]:
    a = func.args
    positional = [p.arg for p in (*a.posonlyargs, *a.args)]
    return {
        "async": isinstance(func, ast.AsyncFunctionDef),
        "positional": positional,
        "keyword_only": [p.arg for p in a.kwonlyargs],
        "varargs": a.vararg is not None,
        "varkw": a.kwarg is not None,
    }


def describe(source: str) -> dict[str, Any]:
    """The top-level names of one module's source: functions (with parameters), classes (methods with
    parameters, attributes set in ``__init__``, base names), values and imported names."""
    names: dict[str, Any] = {}
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names[node.name] = {"kind": "function", **_params(node)}
        elif isinstance(node, ast.ClassDef):
            members: dict[str, Any] = {}
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    members[item.name] = {"kind": "function", **_params(item)}
                    for sub in ast.walk(item) if item.name == "__init__" else ():
                        if isinstance(sub, ast.Assign | ast.AnnAssign):
                            for target in sub.targets if isinstance(sub, ast.Assign) else [sub.target]:
                                chain = _chain(target)
                                if chain and len(chain) == 2 and chain[0] == "self":
                                    members.setdefault(chain[1], {"kind": "value"})
                elif isinstance(item, ast.Assign | ast.AnnAssign):
                    for target in item.targets if isinstance(item, ast.Assign) else [item.target]:
                        if isinstance(target, ast.Name):
                            members[target.id] = {"kind": "value"}
            bases = [".".join(_chain(b) or ["?"]) for b in node.bases]
            names[node.name] = {"kind": "class", "bases": bases, "members": members}
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                for sub in ast.walk(target):
                    if isinstance(sub, ast.Name):
                        names.setdefault(sub.id, {"kind": "value"})
        elif isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                names.setdefault(alias.asname or alias.name.split(".")[0], {"kind": "import"})
        elif isinstance(node, ast.If | ast.Try):  # names defined under a module-level if/try
            for sub in ast.walk(node):
                if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    names.setdefault(sub.name, {"kind": "function", **_params(sub)})
                elif isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                    names.setdefault(sub.id, {"kind": "value"})
    return names


def describe_class(source: str, name: str, members: list[str]) -> dict[str, Any] | None:
    """One class of a module's source, ``members`` of it only: each a function (its parameters, and how
    many of its positional ones have defaults), a property, a value, ``inherited`` (not in the class,
    which has bases) or None (absent). None when the module has no such class."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            break
    else:
        return None
    described = describe(ast.unparse(node))[name]
    functions = [item for item in node.body if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))]
    defaults = {item.name: len(item.args.defaults) for item in functions}
    properties = {
        item.name for item in functions if any(_chain(d) == ["property"] for d in item.decorator_list)
    }
    found: dict[str, Any] = {}
    for member in members:
        entry = described["members"].get(member)
        if entry is None:
            entry = {"kind": "inherited"} if described["bases"] else None
        elif member in properties:
            entry = {"kind": "property"}
        elif entry["kind"] == "function":
            entry = {**entry, "defaults": defaults[member]}
        found[member] = entry
    return {"bases": described["bases"], "members": found}


def module_file(root: Path, module: str) -> Path | None:
    """Where a host module's source lives under a host folder (a module file or a package's __init__)."""
    base = root.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def record(
    uses: dict[str, Use],
    sources: dict[str, str | None],
    version: str,
    origin: str,
    classes: dict[str, tuple[str | None, list[str]]] | None = None,
) -> dict[str, Any]:
    """The data file of one host: for each touched name, what the host has there (None: the module or the
    name is absent). ``sources``: module -> its source (None when the host has no such module; a module
    left out of ``sources`` was not read, as for a host of which only some files can be read).
    ``classes``: ``module.Class`` -> (its module's source, or None when the host has no such module; the
    members the pack's host protocols name, ``host_protocols``), described under ``classes``
    (``describe_class``; None: the class or its module is absent)."""
    described = {m: (describe(s) if s is not None else None) for m, s in sources.items()}
    names: dict[str, Any] = {}
    for key, use in sorted(uses.items()):
        if use.module not in described:
            continue
        module = described[use.module]
        entry = None if module is None else module.get(use.path[0])
        if entry is not None and len(use.path) > 1:
            if entry.get("kind") != "class":
                entry = {"kind": "unknown"}  # an attribute of a value or an import: not readable statically
            else:
                entry = entry["members"].get(use.path[1], {"kind": "inherited"} if entry["bases"] else None)
        if entry is not None and entry.get("kind") == "class":  # the class as a whole: its members' names
            entry = {**entry, "members": sorted(entry["members"])}
        names[key] = entry
    data: dict[str, Any] = {"version": version, "origin": origin, "modules": sorted(described)}
    data["names"] = names
    if classes:
        data["classes"] = {
            qualname: None if source is None else describe_class(source, qualname.rpartition(".")[2], members)
            for qualname, (source, members) in sorted(classes.items())
        }
    return data


def check(uses: dict[str, Use], data: dict[str, Any]) -> list[str]:
    """What in ``data`` (one host's record) the pack's use breaks; [] when it holds."""
    problems = []
    for key, use in sorted(uses.items()):
        if key not in data["names"]:
            continue  # a module this record did not read
        entry = data["names"][key]
        where = ", ".join(sorted(use.where))
        if entry is None:
            if use.required and not _legacy_only(use, data) and not _current_only(use, data):
                problems.append(f"{data['version']}: {key} is absent but read directly ({where})")
            continue
        if entry.get("kind") != "function":
            continue
        accepted = set(entry["positional"]) | set(entry["keyword_only"])
        bound = entry["positional"][1:] if len(use.path) > 1 else entry["positional"]  # self
        for positional, keywords in use.calls:
            unknown = [k for k in keywords if k not in accepted]
            if unknown and not entry["varkw"]:
                problems.append(f"{data['version']}: {key} takes no {', '.join(unknown)} ({where})")
            if positional > len(bound) and not entry["varargs"]:
                problems.append(
                    f"{data['version']}: {key} takes {len(bound)} positional arguments, "
                    f"the pack passes {positional} ({where})"
                )
    return problems


def _legacy_only(use: Use, data: dict[str, Any]) -> bool:
    """A name only the 2024 host's code paths (``legacy_2024``) read is not expected of the current hosts."""
    return all(w.startswith(f"{LEGACY}.py:") for w in use.where) and data["version"] != "2024-03"


def _current_only(use: Use, data: dict[str, Any]) -> bool:
    """A name read only where a function has asked ``legacy_2024`` first is not expected of the 2024 host."""
    return all(w.endswith(CURRENT_ONLY) for w in use.where) and data["version"] == "2024-03"
