"""Packaging as ComfyUI Manager, the registry and pip see it."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import comfyui_headroom

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def requirement_lines() -> list[str]:
    lines = (ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


def name_of(requirement: str) -> str:
    return re.split(r"[<>=~!\[; ]", requirement, maxsplit=1)[0].lower()


def test_requirements_match_pyproject_dependencies() -> None:
    assert sorted(requirement_lines()) == sorted(PYPROJECT["project"]["dependencies"])


def test_torch_is_never_a_dependency() -> None:
    forbidden = {"torch", "torchvision", "torchaudio"}
    assert not forbidden & {name_of(r) for r in requirement_lines()}
    for extra in PYPROJECT["project"]["optional-dependencies"].values():
        assert not forbidden & {name_of(r) for r in extra}


def test_registry_metadata() -> None:
    project = PYPROJECT["project"]
    assert project["name"] == "comfyui-headroom"
    assert project["version"] == comfyui_headroom.__version__
    comfy = PYPROJECT["tool"]["comfy"]
    assert comfy["DisplayName"] == "Headroom"
    assert comfy["PublisherId"] and comfy["Icon"].startswith("https://")
    assert "web" not in comfy, "only WEB_DIRECTORY registers the frontend, or the JS loads twice"
    assert {"test", "host"} <= set(project["optional-dependencies"])


def test_frontend_directory() -> None:
    assert comfyui_headroom.WEB_DIRECTORY == "./js"
    scripts = list((ROOT / "js").glob("*.js"))
    assert scripts
    for script in scripts:
        for spec in re.findall(r"""from\s+["']([^"']+)["']""", script.read_text(encoding="utf-8")):
            assert spec.startswith("."), f"{script.name}: relative imports only (folder names differ): {spec}"


def test_license_is_gpl3_or_later() -> None:
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "GPL-3.0-or-later" in text and "GNU GENERAL PUBLIC LICENSE" in text and "Version 3" in text


def test_node_registry_without_a_host() -> None:
    mappings = comfyui_headroom.NODE_CLASS_MAPPINGS
    assert list(mappings) == [
        "HeadroomOffloadLoader",
        "HeadroomStreamingSampler",
        "HeadroomStreamModel",
        "HeadroomStreamCLIP",
        "HeadroomTiledVAEDecode",
        "HeadroomMemoryMonitor",
    ]
    assert set(comfyui_headroom.NODE_DISPLAY_NAME_MAPPINGS) == set(mappings)
    for cls in mappings.values():
        assert cls.CATEGORY.startswith("Headroom/") and cls.FUNCTION and cls.RETURN_TYPES
