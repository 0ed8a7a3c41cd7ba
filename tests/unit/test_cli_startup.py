"""The command line starts without torch or the node layer, and the pack root still registers the nodes
(and installs the monitor) when a host loads it. Each check runs in a fresh interpreter: sys.modules
of this one already holds torch. Start-up time and memory: bench/cli_startup.py."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "example_workflows" / "api" / "Flux Dev text to image.json"
HEAVY = ("torch", "matplotlib", "comfyui_headroom.nodes")


def probe(code: str, cwd: Path) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


CLI = """
    import contextlib, io, json, runpy, sys
    sys.argv = ["comfyui_headroom", *{args!r}]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        try:
            runpy.run_module("comfyui_headroom", run_name="__main__", alter_sys=True)
        except SystemExit as exc:
            code = exc.code
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "matplotlib") or m in {heavy!r})
    print(json.dumps({{"code": code, "out": printed.getvalue(), "loaded": loaded}}))
"""


@pytest.mark.parametrize(
    "args", [["plan", str(EXAMPLE), "--vram", "8GB", "--ram", "32GB"], ["--help"]], ids=["plan", "help"]
)
def test_the_cli_imports_neither_torch_nor_the_nodes(args: list[str], tmp_path: Path) -> None:
    report = probe(CLI.format(args=args, heavy=set(HEAVY)), tmp_path)
    assert report["code"] == 0
    assert "fits: yes" in report["out"] if args[0] == "plan" else "usage:" in report["out"]
    assert report["loaded"] == []


def test_the_planning_layers_import_no_torch(tmp_path: Path) -> None:
    """Every module of workflow/, models/ and planning/, the command line's whole path, imported."""
    report = probe(
        """
        import importlib, json, pkgutil, sys
        import comfyui_headroom.memory as memory
        names = []
        for sub in ("workflow", "models", "planning"):
            package = importlib.import_module(f"comfyui_headroom.memory.{sub}")
            names += [m.name for m in pkgutil.walk_packages(package.__path__, package.__name__ + ".")]
        for name in names:
            importlib.import_module(name)
        heavy = sorted(m for m in sys.modules if m.split(".")[0] == "torch" or ".nodes" in m)
        print(json.dumps({"modules": names, "heavy": heavy}))
        """,
        tmp_path,
    )
    assert "comfyui_headroom.memory.planning.pipeline" in report["modules"]
    assert report["heavy"] == []


HOST_LOAD = """
    import importlib, importlib.util, json, os, sys
    # what nodes.load_custom_node does (both hosts): import the folder's __init__.py under its name
    name = "Headroom-Pack_x"
    spec = importlib.util.spec_from_file_location(name, os.path.join({root!r}, "__init__.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    before = sorted(m for m in sys.modules if m.startswith(name + ".nodes") or m == "torch")
    host = importlib.import_module(name + ".nodes.host")  # record the monitor's installation
    installs = []
    host.install_monitor = lambda: installs.append(1) or {{}}
    web = getattr(module, "WEB_DIRECTORY")
    entry = hasattr(module, "comfy_entrypoint")  # newer hosts probe it: absent, not an error
    mappings = getattr(module, "NODE_CLASS_MAPPINGS")
    names = getattr(module, "NODE_DISPLAY_NAME_MAPPINGS")
    again = module.NODE_CLASS_MAPPINGS is mappings and hasattr(module, "NODE_CLASS_MAPPINGS")
    print(json.dumps({{"before": before, "web": web, "entry": entry, "nodes": sorted(mappings),
                      "names": sorted(names), "installs": len(installs), "again": again,
                      "listed": "NODE_CLASS_MAPPINGS" in dir(module), "version": module.__version__}}))
"""


def test_a_host_loading_the_pack_gets_the_nodes_and_the_monitor(tmp_path: Path) -> None:
    report = probe(HOST_LOAD.format(root=str(ROOT)), tmp_path)
    assert report["before"] == [], "executing the pack root imported the node layer"
    assert report["web"] == "./js" and report["entry"] is False
    assert len(report["nodes"]) == 6 and report["names"] == report["nodes"]
    assert report["installs"] == 1 and report["again"], "the monitor is installed once, on first access"
    assert report["listed"] and report["version"]


def test_unknown_names_raise_attribute_error() -> None:
    import comfyui_headroom

    with pytest.raises(AttributeError, match="comfy_entrypoint"):
        comfyui_headroom.comfy_entrypoint  # noqa: B018
    assert not hasattr(comfyui_headroom, "NODE_CLASS_MAPPING")
