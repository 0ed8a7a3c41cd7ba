"""The command line as a user runs it: ``python -m comfyui_headroom ...`` in a fresh process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import comfyui_headroom
from comfyui_headroom.cli import main


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "comfyui_headroom", *args]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=120)


def test_help_from_any_folder(tmp_path: Path) -> None:
    out = run("--help", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "plan" in out.stdout and "usage: python -m comfyui_headroom" in out.stdout
    out = run("plan", "--help", cwd=tmp_path)
    assert out.returncode == 0
    for flag in ("--vram", "--ram", "--models-dir", "--json", "--png"):
        assert flag in out.stdout


def test_version(tmp_path: Path) -> None:
    out = run("--version", cwd=tmp_path)
    assert out.returncode == 0 and comfyui_headroom.__version__ in out.stdout


def test_no_command_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    assert "plan" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such file"),
        ("{not json", "malformed JSON at line 1, column 2"),
        ("[1, 2]", "expected a JSON object"),
        (b"\xff\xfe\x00", "not a text file"),
    ],
)
def test_plan_rejects_bad_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | bytes | None, message: str
) -> None:
    path = tmp_path / "workflow.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    assert main(["plan", str(path), "--vram", "8GB"]) == 2
    assert message in capsys.readouterr().err


def test_plan_rejects_a_bad_size(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["plan", str(tmp_path / "w.json"), "--vram", "lots"])
    assert exit_info.value.code == 2
    assert "not a size: 'lots'" in capsys.readouterr().err


def test_plan_placeholder_says_what_is_missing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "workflow.json"
    path.write_text(json.dumps({"nodes": [], "links": []}))
    assert main(["plan", str(path), "--vram", "8GB"]) == 2
    assert "planner has not landed yet" in capsys.readouterr().err
