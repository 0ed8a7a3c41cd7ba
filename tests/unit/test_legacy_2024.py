"""The 2024 host in one place: its check (``is_2024_host``), the host names only it has, and its code
paths live in ``nodes/host/legacy_2024.py``; the rest of ``nodes/host`` is code for current hosts and
reaches the 2024 host only by calling that module, whose functions do nothing on a current host."""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace

import pytest

from comfyui_headroom.nodes.host import legacy_2024

ROOT = Path(__file__).resolve().parents[2]
HOME = ROOT / "nodes" / "host" / "legacy_2024.py"
# host names only the 2024 host has, which current hosts' code must not reach for
ONLY_2024 = {"recursive_execute", "set_model_unet_function_wrapper", "load_unet"}


def _names(path: Path) -> set[str]:
    """Every identifier, attribute and string constant in a module's code (its docstrings and comments
    left out), strings split into dotted words: ``"comfy_execution.progress"`` names both."""
    found: set[str] = set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = {
        id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)
    }
    for node in ast.walk(tree):
        if id(node) in docs:
            continue
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            found.add(node.name)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.update(node.value.replace("(", " ").replace(".", " ").replace("`", " ").split())
    return found


def _pack_modules() -> list[Path]:
    return [p for d in ("nodes", "memory") for p in sorted((ROOT / d).rglob("*.py")) if p != HOME]


@pytest.mark.parametrize("path", _pack_modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_the_2024_check_and_its_host_names_are_only_in_its_module(path: Path) -> None:
    names = _names(path)
    assert "is_2024_host" not in names, "ask a legacy_2024 function instead of the check"
    assert "is_legacy_host" not in names, "the old check"
    tests = [n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Call)]
    finds = [
        ast.unparse(c)
        for c in tests
        if "find_spec" in ast.unparse(c.func) and "comfy_execution" in ast.unparse(c)
    ]
    assert finds == [], "the check's test of the host, outside its module"
    code = [n for n in names if n in ONLY_2024]
    assert code == [], f"2024-host names outside legacy_2024: {code}"


def test_the_module_holds_the_check_and_those_names() -> None:
    assert {"is_2024_host", "comfy_execution"} | ONLY_2024 <= _names(HOME)
    assert 'find_spec("comfy_execution")' in HOME.read_text()


def test_on_a_current_host_each_function_does_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(legacy_2024, "is_2024_host", lambda: False)
    execution = SimpleNamespace(recursive_execute=lambda: None, get_output_data=lambda: None)
    model = SimpleNamespace(model_options={"model_function_wrapper": None})
    assert legacy_2024.hook_node_boundaries(object(), execution) is None  # type: ignore[arg-type]
    assert execution.recursive_execute.__name__ == "<lambda>"  # nothing patched
    assert legacy_2024.makes_own_prompt_id() is False
    assert legacy_2024.load_diffusion_model(Path("x"), "fp8", ValueError) is None
    assert legacy_2024.loaded_bytes(SimpleNamespace(model_memory=lambda: 5)) is None
    assert legacy_2024.latent_channels(SimpleNamespace(latent_rgb_factors=[[0]] * 4)) is None
    assert legacy_2024.stream_model(model, None, lambda *a: pytest.fail("made a stream")) is None
    assert legacy_2024.streams_on(model) is None
    assert legacy_2024.arm(SimpleNamespace(model=None), None, {}) is None


def test_on_the_2024_host_they_take_its_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(legacy_2024, "is_2024_host", lambda: True)
    assert legacy_2024.makes_own_prompt_id() is True
    assert legacy_2024.loaded_bytes(SimpleNamespace(model_memory=lambda: 5)) == 5
    assert legacy_2024.latent_channels(SimpleNamespace(latent_rgb_factors=[[0]] * 4)) == 4
    with pytest.raises(ValueError, match="weight_dtype fp8"):
        legacy_2024.load_diffusion_model(Path("x"), "fp8", ValueError)
    assert legacy_2024.hook_node_boundaries(object(), SimpleNamespace()) == (
        "off: neither comfy_execution.progress nor recursive_execute on this host"
    )


def test_the_check_follows_the_executor_package(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "comfy_execution", SimpleNamespace())
    assert legacy_2024.is_2024_host() is False
    monkeypatch.delitem(sys.modules, "comfy_execution")
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    assert legacy_2024.is_2024_host() is True
