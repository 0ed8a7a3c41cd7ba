"""comfy-import-guard (PyPI; it predicts a custom node's breakage from ``comfy.*`` symbols a ComfyUI
version no longer has) reports the pack safe on the primary host, ComfyUI 0.33.0. Users and registries
run it: a "WILL BREAK" from a false alarm in tests/ or scripts/ (a fixture named ``comfy``, an alias reused
for two modules) reads as a broken pack.

It runs where the tool is installed (the ``test`` extra pins it) and the 0.33 tarball is beside the
checkout (``../shared/hosts``, as in CI), offline: a git repository of the tarball's tree tagged
``v0.33.0`` stands in for the tool's ComfyUI clone. Each missing piece skips with its reason.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TARBALL = ROOT.parent / "shared" / "hosts" / "comfyui-0.33.0-783545f.tar.gz"
TOOL = [sys.executable, "-m", "comfy_import_guard.cli"]


def _git(*args: str, cwd: Path) -> str:
    done = subprocess.run(
        ["git", "-c", "user.email=ci@localhost", "-c", "user.name=ci", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    return done.stdout


def test_comfy_import_guard_finds_nothing_that_breaks_on_0_33(tmp_path: Path) -> None:
    pytest.importorskip("comfy_import_guard", reason="comfy-import-guard is not installed (the test extra)")
    if not TARBALL.is_file():
        pytest.skip(f"no 0.33 host tarball at {TARBALL} (it is beside the checkout in CI)")
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("git and a git checkout are needed (the tool resolves against a git clone)")
    with tarfile.open(TARBALL) as tar:
        tar.extractall(tmp_path / "src", filter="data")
    clone = tmp_path / "cache" / "ComfyUI"
    shutil.move(tmp_path / "src" / "comfyui", clone)
    found = re.search(r"__version__\s*=\s*['\"]([^'\"]+)", (clone / "comfyui_version.py").read_text())
    assert found, "the tarball's comfyui_version.py names no version"
    tag = f"v{found.group(1)}"
    _git("init", "-q", cwd=clone)
    _git("add", "-A", cwd=clone)
    _git("commit", "-qm", "the host tarball", cwd=clone)
    _git("tag", tag, cwd=clone)

    pack = tmp_path / "install" / "custom_nodes" / "comfyui-headroom"
    for name in _git("ls-files", "-z", cwd=ROOT).split("\0"):
        if name and (ROOT / name).is_file():
            (pack / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(ROOT / name, pack / name)

    done = subprocess.run(
        [*TOOL, "--offline", "--json", "--quiet", "check", "--cache-dir", str(tmp_path / "cache")]
        + ["--comfy-dir", str(tmp_path / "install"), "--target", tag],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.stdout.strip(), done.stderr
    report = json.loads(done.stdout)
    (result,) = report["packs"]
    assert result["verdict"] != "WILL BREAK" and report["totals"]["will_break"] == 0, json.dumps(
        result["breaking"], indent=1
    )
    assert result["python_files"] > 100 and result["references"] > 100  # it read the pack
