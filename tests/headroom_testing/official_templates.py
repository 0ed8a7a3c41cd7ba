"""The official workflow templates (the comfyui-workflow-templates-json package, a test dependency)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def official_template(name: str) -> dict:
    """The template ``name`` as its JSON; skips (saying why) without the package or the template."""
    try:
        import comfyui_workflow_templates_json as package
    except ImportError:
        pytest.skip("pip install comfyui-workflow-templates-json (the official workflow templates)")
    path = Path(package.__file__).parent / "templates" / f"{name}.json"
    if not path.exists():
        pytest.skip(f"{path.name} is not in this version of the templates package")
    return json.loads(path.read_text(encoding="utf-8"))
