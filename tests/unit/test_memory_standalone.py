"""memory/ imports and runs with no ComfyUI anywhere on the path (checked in a fresh interpreter)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = textwrap.dedent(
    """
    import importlib, importlib.util, json, pkgutil, sys
    host = ("comfy", "nodes", "server", "folder_paths", "execution", "comfy_execution", "comfy_extras")
    on_path = [name for name in host if importlib.util.find_spec(name) is not None]
    import comfyui_headroom.memory as memory
    modules = [m.name for m in pkgutil.walk_packages(memory.__path__, "comfyui_headroom.memory.")]
    for name in modules:
        importlib.import_module(name)
    import comfyui_headroom
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in host)
    print(json.dumps({"on_path": on_path, "modules": modules, "loaded": loaded,
                      "nodes": sorted(comfyui_headroom.NODE_CLASS_MAPPINGS)}))
    """
)


def test_memory_and_the_pack_import_without_comfyui(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=tmp_path, capture_output=True, text=True, check=True, timeout=120
    )
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["on_path"] == [], "a ComfyUI is importable here, so this test would prove nothing"
    assert "comfyui_headroom.memory.units" in report["modules"]
    assert report["loaded"] == []
    assert len(report["nodes"]) == 6  # nodes/ defers every host import to call time
