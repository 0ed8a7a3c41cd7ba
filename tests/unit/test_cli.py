"""The command line as a user runs it: ``python -m comfyui_headroom ...`` in a fresh process."""

from __future__ import annotations

import json
import re
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


WORKFLOWS = Path(__file__).resolve().parents[2] / "example_workflows"
FLUX = WORKFLOWS / "api" / "Flux Dev text to image.json"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "No such file"),
        (
            "{not json",
            "not valid JSON: Expecting property name enclosed in double quotes at line 1, column 2",
        ),
        ("[1, 2]", "workflow"),
        (b"\xff\xfe\x00", "cannot read workflow"),
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
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err


def test_plan_rejects_a_bad_size(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["plan", str(tmp_path / "w.json"), "--vram", "lots"])
    assert exit_info.value.code == 2
    assert "not a size: 'lots'" in capsys.readouterr().err


def test_plan_prints_a_table_and_a_summary(tmp_path: Path) -> None:
    out = run("plan", str(FLUX), "--vram", "8GB", "--ram", "32GB", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "KSampler" in text and "stream" in text and "flux1-dev.safetensors" in text
    assert "fits: yes" in text and "comfyui: transfer" in text and "less)" in text


def test_plan_json_and_png(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    png = tmp_path / "timeline.png"
    assert main(["plan", str(FLUX), "--vram", "12GB", "--ram", "32GB", "--json", "--png", str(png)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["fits"] is True
    assert [s["class_type"] for s in data["steps"]][-1] == "SaveImage"
    sampler = next(s for s in data["steps"] if s["class_type"] == "KSampler")
    assert sampler["vram_peak"] <= data["budget"]["vram"]
    assert set(data["baselines"]) == {"comfyui", "model_offload", "lower_bound"}
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plan_that_cannot_fit_says_what_would(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", str(FLUX), "--vram", "1GB", "--ram", "32GB"]) == 1
    out = capsys.readouterr().out
    assert "fits: NO" in out and "more usable VRAM" in out and "minimum VRAM for this workflow" in out
    assert "to fit: a card with" in out and "GiB of activations" in out


def test_bad_input_exits_2_with_one_line_from_a_fresh_process(tmp_path: Path) -> None:
    """As a user runs it: a zero bandwidth was a ZeroDivisionError traceback (exit 1)."""
    out = run("plan", str(FLUX), "--vram", "8GB", "--ram", "32GB", "--h2d-pinned", "0", cwd=tmp_path)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.startswith("error: argument --h2d-pinned: '0'") and out.stderr.count("\n") == 1


@pytest.mark.parametrize("vram", ["8GB", "10.5GB"])
def test_the_advised_card_fits_and_one_just_below_does_not_when_the_reserve_exceeds_the_card(
    vram: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """--reserve above --vram: the advice was the card's own size plus the usable minimum, so each card
    it named advised a bigger one (8 -> 9.35 -> 10.73 GiB ...). It is solved now: the minimum plus the
    reserve asked for, rounded up to what it prints."""
    args = ["plan", str(FLUX), "--ram", "32GB", "--reserve", "10GB"]
    assert main([*args, "--vram", vram]) == 1
    advised = re.search(r"to fit: a card with (\d+\.\d\d) GiB of VRAM or more", capsys.readouterr().out)
    assert advised is not None
    card = float(advised.group(1))
    assert card > 10
    assert main([*args, "--vram", f"{card:.2f}GiB"]) == 0
    assert "fits: yes" in capsys.readouterr().out
    assert main([*args, "--vram", f"{card - 0.01:.2f}GiB"]) == 1
    assert f"a card with {card:.2f} GiB" in capsys.readouterr().out  # the same advice from below
