"""A non-editable install works: the wheel holds every module and data file of the pack, and the README's
``plan`` command runs from a fresh virtualenv with it installed, from a folder outside the checkout.

Offline: the wheel is built with this environment's setuptools (no build isolation) and installed with
``--no-deps --no-index``; the fresh venv reaches the dependencies (numpy, psutil, ...) through a .pth
file naming this interpreter's site-packages, added after the install so that pip there never sees the
editable install of the checkout.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
import site
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest

from headroom_testing import pack_copy

ROOT = Path(__file__).resolve().parents[2]
# README: python -m comfyui_headroom plan "example_workflows/HunyuanVideo 1.5 720p text to video.json" ...
README_EXAMPLE = ROOT / "example_workflows" / "HunyuanVideo 1.5 720p text to video.json"
README_ARGS = ("--vram", "12GB", "--ram", "32GB", "--gpu", "RTX 4070")
ROOT_MODULES = ("__init__.py", "__main__.py", "cli.py", "version.py")
NOT_COPIED = pack_copy.ignore("tests", "bench", "scripts", "assets")


def package_folders() -> list[str]:
    """Every folder of .py files under memory/ and nodes/, as a dotted package name."""
    found = set()
    for top in ("memory", "nodes"):
        for path in (ROOT / top).rglob("*.py"):
            if "__pycache__" not in path.parts:
                found.add(".".join(("comfyui_headroom", *path.parent.relative_to(ROOT).parts)))
    return sorted(found)


def shipped_files() -> list[str]:
    """What the wheel must hold, as paths inside it."""
    files = [f"comfyui_headroom/{name}" for name in ROOT_MODULES]
    for top in ("memory", "nodes"):
        files += [
            str(p.relative_to(ROOT)) for p in (ROOT / top).rglob("*.py") if "__pycache__" not in p.parts
        ]
    files += [str(p.relative_to(ROOT)) for p in (ROOT / "memory" / "data").glob("*.json")]
    files += [str(p.relative_to(ROOT)) for p in (ROOT / "js").rglob("*") if p.is_file()]
    return sorted(f if f.startswith("comfyui_headroom/") else f"comfyui_headroom/{f}" for f in files)


def test_pyproject_lists_every_package() -> None:
    listed = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    assert listed["package-dir"] == {"comfyui_headroom": "."}
    missing = sorted(set(package_folders()) - set(listed["packages"]))
    assert not missing, f"add to [tool.setuptools] packages in pyproject.toml: {missing}"
    assert "comfyui_headroom.memory.planning" in listed["packages"]


def build_tools_missing() -> str | None:
    if importlib.util.find_spec("pip") is None:
        return "pip is not installed in this environment"
    try:
        version = importlib.metadata.version("setuptools")
    except importlib.metadata.PackageNotFoundError:
        return "setuptools is not installed (pip install -e '.[test]')"
    if tuple(int(p) for p in version.split(".")[:2] if p.isdigit()) < (70, 1):
        return (
            f"setuptools {version} < 70.1 cannot build without the wheel package (pip install -e '.[test]')"
        )
    if importlib.util.find_spec("venv") is None:
        return "the venv module is missing (Debian: apt-get install python3-venv)"
    return None


def run(command: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=180)


def test_the_wheel_installs_and_plans_the_readme_example(tmp_path: Path) -> None:
    missing = build_tools_missing()
    if missing:
        pytest.skip(f"cannot build the wheel offline: {missing}")
    source = tmp_path / "src"  # a copy, so the build leaves nothing (build/, egg-info) in the checkout
    shutil.copytree(ROOT, source, ignore=NOT_COPIED)
    dist = tmp_path / "dist"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    out = run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(dist), str(source)],
        tmp_path,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    (wheel,) = dist.glob("comfyui_headroom-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    absent = [f for f in shipped_files() if f not in names]
    assert not absent, f"not in the wheel: {absent}"
    assert not [n for n in names if n.startswith(("comfyui_headroom/tests/", "comfyui_headroom/bench/"))]

    venv = tmp_path / "venv"
    out = run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path)
    assert out.returncode == 0, out.stderr
    python = venv / "bin" / "python"
    out = run([*pip, "--python", str(python), "install", "--no-deps", "--no-index", str(wheel)], tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    target = Path(sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)}))
    # this interpreter's package folders, and those a .pth file added (a venv layered on another's)
    layered = [p for p in sys.path if Path(p).name in ("site-packages", "dist-packages")]
    deps = list(dict.fromkeys([*site.getsitepackages(), site.getusersitepackages(), *layered]))
    (target / "headroom_test_deps.pth").write_text("\n".join(deps) + "\n", encoding="utf-8")

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = run([str(python), "-c", "import comfyui_headroom; print(comfyui_headroom.__file__)"], elsewhere)
    assert out.returncode == 0 and out.stdout.strip().startswith(str(target)), out.stdout + out.stderr
    out = run([str(python), "-m", "comfyui_headroom", "plan", str(README_EXAMPLE), *README_ARGS], elsewhere)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "15 nodes will run, 4 model components" in out.stdout and "fits: yes" in out.stdout
    assert "RTX 4070" in out.stdout
    assert (venv / "bin" / "headroom").is_file()  # the console script as well
