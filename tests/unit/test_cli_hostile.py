"""Hostile input to ``plan`` (issue #18): every bad flag or workflow exits 2 with one line naming it.

In process (``main(argv)``), so a traceback would fail the test instead of printing.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from comfyui_headroom.cli import main
from comfyui_headroom.memory.planning.costmodel import Hardware
from comfyui_headroom.memory.units import GiB, format_bytes

WORKFLOWS = Path(__file__).resolve().parents[2] / "example_workflows"
FLUX = WORKFLOWS / "api" / "Flux Dev text to image.json"
T2I = "Flux Dev text to image.json"


def plan(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Exit code, stdout and stderr of ``plan argv`` (argparse's errors exit through SystemExit)."""
    try:
        code = main(["plan", *argv])
    except SystemExit as exc:
        code = exc.code  # type: ignore[assignment]
    out = capsys.readouterr()
    return code, out.out, out.err


def one_error_line(err: str) -> str:
    """The single line a refused input prints, with no traceback."""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


@pytest.mark.parametrize(
    ("flag", "value", "accepted"),
    [
        ("--ram", "0", "1.00 MiB"),  # C63: was replaced by this machine's RAM
        ("--vram", "0", "1.00 MiB"),
        ("--vram", "1e30", "64.00 TiB"),
        ("--vram", "1e308", "64.00 TiB"),  # the fuzzer's: an OverflowError in bytes
        ("--ram", "-4GB", "write it like"),
        ("--reserve", "nan", "write it like"),
        ("--h2d-pinned", "-5", "GB/s"),  # C66
        ("--h2d-pinned", "0", "GB/s"),  # C65: was a ZeroDivisionError
        ("--disk", "nan", "GB/s"),  # C66: printed "transfer nan s"
        ("--disk", "inf", "GB/s"),
        ("--disk", "1e12", "GB/s"),
        ("--disk", "fast", "GB/s"),
        ("--pcie", "7", "choose from"),
    ],
)
def test_numeric_flags_are_validated(
    capsys: pytest.CaptureFixture[str], flag: str, value: str, accepted: str
) -> None:
    code, out, err = plan(capsys, str(FLUX), "--vram", "8GB", "--ram", "32GB", f"{flag}={value}")
    assert code == 2 and out == ""
    line = one_error_line(err)
    assert flag in line and value in line and accepted in line


def test_zero_ram_is_refused_like_zero_vram(capsys: pytest.CaptureFixture[str]) -> None:
    """C63: both budgets are refused the same way, neither replaced by a default."""
    errors = [
        one_error_line(plan(capsys, str(FLUX), "--vram", v, "--ram", r)[2])
        for v, r in (("0", "8GB"), ("8GB", "0"))
    ]
    assert errors[0].replace("--vram", "FLAG") == errors[1].replace("--ram", "FLAG")


def test_bandwidth_overrides_reach_the_plan(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = plan(
        capsys, str(FLUX), "--vram", "8GB", "--ram", "32GB", "--json", "--h2d-pinned", "6.5", "--disk", "0.5"
    )
    assert code == 0
    hardware = json.loads(out)["hardware"]
    assert hardware["h2d_pinned"] == 6.5e9 and hardware["disk"] == 0.5e9


@pytest.mark.parametrize("field", ["h2d_pinned", "disk", "tflops"])
@pytest.mark.parametrize("value", [0.0, -1.0, math.nan, math.inf])
def test_hardware_refuses_rates_that_are_not_positive_and_finite(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=field):
        Hardware.pcie(4).with_overrides(**{field: value})


def test_reserve_advice_never_exceeds_the_card(capsys: pytest.CaptureFixture[str]) -> None:
    """C64: with a reserve bigger than the card, the advice is the card minus the minimum."""
    code, out, _ = plan(capsys, str(FLUX), "--vram", "8GB", "--ram", "32GB", "--reserve", "16GB", "--json")
    assert code == 1
    data = json.loads(out)
    below = re.search(r"--reserve below (\S+ \S+)", data["advice"])
    assert below, data["advice"]
    assert below.group(1) == format_bytes(8 * GiB - data["min_vram_bytes"])


def test_reserve_advice_with_a_sane_reserve(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = plan(capsys, str(FLUX), "--vram", "1.5GB", "--ram", "32GB", "--reserve", "1GB", "--json")
    assert code == 1
    data = json.loads(out)
    assert f"--reserve below {format_bytes(int(1.5 * GiB) - data['min_vram_bytes'])}" in data["advice"]


@pytest.mark.parametrize("kind", ["missing", "file"])
def test_models_dir_must_be_a_folder(capsys: pytest.CaptureFixture[str], tmp_path: Path, kind: str) -> None:
    """C67: a models folder that is not there was silently ignored."""
    path = tmp_path / "nonexistent"
    if kind == "file":
        path.write_text("x")
    code, out, err = plan(capsys, str(FLUX), "--vram", "8GB", "--ram", "32GB", "--models-dir", str(path))
    assert code == 2 and out == ""
    line = one_error_line(err)
    assert "--models-dir" in line and str(path) in line


def test_png_into_a_missing_folder_is_refused_before_planning(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """C68: was a FileNotFoundError traceback after the plan printed."""
    png = tmp_path / "missing" / "timeline.png"
    code, out, err = plan(capsys, str(FLUX), "--vram", "8GB", "--ram", "32GB", "--png", str(png))
    assert code == 2 and out == ""
    line = one_error_line(err)
    assert "--png" in line and str(png.parent) in line


def test_png_that_is_a_folder_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, err = plan(capsys, str(FLUX), "--vram", "8GB", "--ram", "32GB", "--png", str(tmp_path))
    assert code == 2 and out == ""
    assert "--png" in one_error_line(err)


def test_png_is_written_exactly_where_asked(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """C69: matplotlib appended ".png" to a name without one."""
    target = tmp_path / "timeline"
    code, _, _ = plan(capsys, str(FLUX), "--vram", "12GB", "--ram", "32GB", "--png", str(target))
    assert code == 0
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert list(tmp_path.iterdir()) == [target]


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full on this system")
def test_png_write_failure_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    """C69: --png /dev/full exited 0 because matplotlib wrote /dev/full.png instead."""
    code, _, err = plan(capsys, str(FLUX), "--vram", "12GB", "--ram", "32GB", "--png", "/dev/full")
    assert not Path("/dev/full.png").exists()
    assert code == 2
    line = one_error_line(err)
    assert "--png" in line and "/dev/full" in line


def _flux_with(tmp_path: Path, node_class: str, name: str, value: object) -> Path:
    prompt = json.loads(FLUX.read_text())
    node = next(nid for nid, n in prompt.items() if n["class_type"] == node_class)
    prompt[node]["inputs"][name] = value
    path = tmp_path / "prompt.json"
    path.write_text(json.dumps(prompt))  # json writes NaN and Infinity, and Python's json reads them back
    return path


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize(
    ("node_class", "name"),
    [("EmptySD3LatentImage", "width"), ("EmptySD3LatentImage", "batch_size"), ("KSampler", "steps")],
)
def test_a_non_finite_input_names_the_node(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, node_class: str, name: str, value: float
) -> None:
    """C57: width NaN said "cannot convert float NaN to integer", naming nothing (inf: a traceback)."""
    path = _flux_with(tmp_path, node_class, name, value)
    code, out, err = plan(capsys, str(path), "--vram", "8GB", "--ram", "32GB")
    assert code == 2 and out == ""
    line = one_error_line(err)
    node = next(nid for nid, n in json.loads(FLUX.read_text()).items() if n["class_type"] == node_class)
    assert f"node {node} ({node_class})" in line and repr(name) in line and "finite number" in line


def test_json_nested_too_deep(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """C56: a RecursionError traceback."""
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    code, out, err = plan(capsys, str(path), "--vram", "8GB")
    assert code == 2 and out == ""
    line = one_error_line(err)
    assert "nested too deep" in line and str(path) in line


def test_argparse_errors_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = plan(capsys, str(FLUX))
    assert code == 2
    assert "--vram" in one_error_line(err)


def _set(path: tuple[object, ...], value: object) -> Callable[[Any], None]:
    def mutate(data: Any) -> None:
        for key in path[:-1]:
            data = data[key]
        data[path[-1]] = value

    return mutate


# Crashes the fuzzer (tests/fuzz) found, as the smallest edits of an example that raised them.
@pytest.mark.parametrize(
    ("example", "mutate", "crash"),
    [
        (f"api/{T2I}", _set(("3", "inputs", "model"), ["10", -2]), "IndexError"),
        (f"api/{T2I}", _set(("10", "inputs", "unet_name"), []), "TypeError: unhashable"),
        (f"api/{T2I}", _set(("3", "inputs", "cfg"), 10**400), "OverflowError"),
        (f"api/{T2I}", _set(("3", "inputs", "model"), ["10", math.inf]), "OverflowError"),
        (T2I, _set(("links", 0, 2), math.inf), "OverflowError"),
        (f"api/{T2I}", _set(("27", "inputs", "width"), 10**400), "OverflowError"),
    ],
)
def test_fuzzer_findings_exit_cleanly(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    example: str,
    mutate: Callable[[Any], None],
    crash: str,
) -> None:
    data = json.loads((WORKFLOWS / example).read_text())
    mutate(data)
    path = tmp_path / "prompt.json"
    path.write_text(json.dumps(data))
    code, _, err = plan(capsys, str(path), "--vram", "8GB", "--ram", "32GB")  # raised `crash` before
    assert code in (0, 1, 2), err
    if code == 2:
        one_error_line(err)


@pytest.mark.parametrize(
    ("node_class", "name"), [("EmptySD3LatentImage", "width"), ("EmptySD3LatentImage", "height")]
)
def test_a_negative_size_names_the_node(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, node_class: str, name: str
) -> None:
    """A width of -1024 planned as "fits: yes"; ComfyUI refuses it."""
    path = _flux_with(tmp_path, node_class, name, -1024)
    code, out, err = plan(capsys, str(path), "--vram", "8GB", "--ram", "32GB")
    assert code == 2 and out == ""
    line = one_error_line(err)
    assert f"({node_class}) input {name!r} is -1024: a size cannot be negative" in line


@pytest.mark.parametrize(
    ("budget", "refused"), [("0.001", True), ("1MiB", True), ("6", False), ("auto", False)]
)
def test_a_streaming_budget_the_node_refuses_at_run_time_is_refused_by_the_plan(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, budget: str, refused: bool
) -> None:
    """Issue #43, bug 6: vram_budget "0.001" (1.02 MiB) passed and `plan` said "fits: yes", exit 0, where
    the node refuses it when it runs ("cannot stream this model"). One rule: the plan refuses it too."""
    prompt = json.loads(FLUX.read_text())
    node = next(nid for nid, n in prompt.items() if n["class_type"] == "KSampler")
    prompt[node]["class_type"] = "HeadroomStreamingSampler"
    prompt[node]["inputs"]["vram_budget"] = budget
    path = tmp_path / "streaming.json"
    path.write_text(json.dumps(prompt))
    code, out, err = plan(capsys, str(path), "--vram", "8GB", "--ram", "64GB")
    if not refused:
        assert code == 0 and err == "", err
        return
    assert code == 2 and out == ""
    line = one_error_line(err)
    assert f"node {node} (HeadroomStreamingSampler) input 'vram_budget'" in line, line
    assert "cannot stream" in line and "needs at least" in line


def test_a_megabyte_value_is_cut_in_the_notes(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Issue #43: `plan` of a 1 MB math expression printed it whole in two note lines of a million
    characters each. Notes are cut to a readable length, saying how much was cut."""
    prompt = json.loads(FLUX.read_text())
    latent = next(nid for nid, n in prompt.items() if n["class_type"] == "EmptySD3LatentImage")
    expression = "9**9**9**9+" + "a+" * 500_000 + "1"
    prompt["900"] = {"class_type": "ComfyMathExpression", "inputs": {"expression": expression, "values.a": 1}}
    prompt[latent]["inputs"]["width"] = ["900", 1]
    path = tmp_path / "big.json"
    path.write_text(json.dumps(prompt))
    code, out, err = plan(capsys, str(path), "--vram", "8GB", "--ram", "32GB")
    assert code == 0, err
    notes = [line for line in out.splitlines() if "ComfyMathExpression" in line and "note" in line]
    assert notes and all(len(line) < 1000 for line in out.splitlines())
    assert all("more characters)" in line for line in notes), notes
