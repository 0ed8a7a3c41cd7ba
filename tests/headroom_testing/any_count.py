"""How much of ``nodes/`` is typed ``Any``, read with ``ast`` (nothing imported).

``count(dir)`` walks every ``*.py`` under ``dir`` and counts, in annotations only (parameters, returns,
annotated assignments and attributes):

- ``parameters``: every parameter of every function but a method's ``self``/``cls``;
- ``any_parameters``: those whose annotation is ``Any`` itself (``x: Any``, ``x: Any | None``);
- ``any_in_parameters``: those whose annotation names ``Any`` anywhere (``dict[str, Any]`` too);
- ``any_returns``: returns annotated ``Any`` itself;
- ``any_uses``: every ``Any`` written in an annotation (a parameter's, a return's, an attribute's).

``tests/unit/test_any_count.py`` holds ``nodes/`` to a ceiling of each; ``python -m
headroom_testing.any_count [DIR]`` (from ``tests/``) prints them.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass
class AnyCount:
    parameters: int = 0
    any_parameters: int = 0
    any_in_parameters: int = 0
    any_returns: int = 0
    any_uses: int = 0


def _anys(annotation: ast.AST | None) -> int:
    if annotation is None:
        return 0
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):  # a quoted annotation
        try:
            annotation = ast.parse(annotation.value, mode="eval")
        except SyntaxError:
            return 0
    return sum(
        1
        for n in ast.walk(annotation)
        if (isinstance(n, ast.Name) and n.id == "Any") or (isinstance(n, ast.Attribute) and n.attr == "Any")
    )


def _is_any(annotation: ast.AST | None) -> bool:
    """``Any``, ``Any | None`` or ``Optional[Any]``: the value itself is untyped."""
    if annotation is None:
        return False
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        try:
            annotation = ast.parse(annotation.value, mode="eval").body
        except SyntaxError:
            return False
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        return _is_any(annotation.left) or _is_any(annotation.right)
    if isinstance(annotation, ast.Subscript) and _anys(annotation.value) == 0:
        name = annotation.value
        if isinstance(name, ast.Name | ast.Attribute) and getattr(name, "id", getattr(name, "attr", "")) in (
            "Optional",
        ):
            return _is_any(annotation.slice)
    return isinstance(annotation, ast.Name | ast.Attribute) and _anys(annotation) == 1


def count_source(source: str, result: AnyCount | None = None) -> AnyCount:
    result = result if result is not None else AnyCount()
    tree = ast.parse(source)
    methods = {
        id(item)
        for cls in ast.walk(tree)
        if isinstance(cls, ast.ClassDef)
        for item in cls.body
        if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            a = node.args
            params = [*a.posonlyargs, *a.args, *a.kwonlyargs]
            params += [p for p in (a.vararg, a.kwarg) if p is not None]
            if id(node) in methods and params and params[0] in (*a.posonlyargs, *a.args):
                if params[0].arg in ("self", "cls") and params[0].annotation is None:
                    params = params[1:]
            for p in params:
                result.parameters += 1
                result.any_parameters += _is_any(p.annotation)
                result.any_in_parameters += _anys(p.annotation) > 0
                result.any_uses += _anys(p.annotation)
            result.any_returns += _is_any(node.returns)
            result.any_uses += _anys(node.returns)
        elif isinstance(node, ast.AnnAssign):
            result.any_uses += _anys(node.annotation)
    return result


def count(root: Path) -> AnyCount:
    result = AnyCount()
    for path in sorted(root.rglob("*.py")):
        count_source(path.read_text(encoding="utf-8"), result)
    return result


if __name__ == "__main__":
    where = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[2] / "nodes"
    print(asdict(count(where)))
