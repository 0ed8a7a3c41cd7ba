"""The run's coverage line and floor (headroom_testing.coverage): a test that stops running fails the run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from headroom_testing.coverage import below_floor, host_label, read_floor, record_floor, tier_of

TESTS = Path(__file__).resolve().parents[1]


def test_the_tier_is_the_folder_under_tests() -> None:
    assert tier_of("tests/unit/test_x.py::test_a[1]") == "unit"
    assert tier_of("tests/host/test_x.py::test_a") == "host"
    assert tier_of("/abs/tests/e2e/test_x.py::test_a") == "e2e"
    assert tier_of("tests/fuzz/test_x.py") == "fuzz"
    assert tier_of("elsewhere/test_x.py::t") == "other"


def test_below_floor_names_each_short_tier_with_both_counts() -> None:
    assert below_floor({"unit": 10, "host": 5}, {"unit": 10, "host": 4}) == []
    assert below_floor({"unit": 9, "host": 5}, {"unit": 10, "host": 4, "gpu": 0}) == [
        "unit: 9 tests ran, the floor is 10"
    ]
    assert below_floor({}, {"e2e": 1}) == ["e2e: 0 tests ran, the floor is 1"]


def test_the_floor_is_recorded_and_read_per_host(tmp_path: Path) -> None:
    path = tmp_path / "floor.json"
    assert read_floor(path, "a") is None
    record_floor(path, "a", {"unit": 3, "other": 7})
    record_floor(path, "b", {"unit": 1})
    assert read_floor(path, "a") == {"unit": 3} and read_floor(path, "b") == {"unit": 1}
    assert read_floor(path, "c") is None


def _run(project: Path, *args: str, comfyui_root: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(TESTS) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("COMFYUI_ROOT", None)
    env.pop("PYTEST_ADDOPTS", None)  # the caller's options (a --basetemp) are not the inner run's
    env.pop("HEADROOM_COVERAGE_RECORD", None)  # nor its recording of floors: the inner run checks them
    if comfyui_root is not None:
        env["COMFYUI_ROOT"] = str(comfyui_root)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(project / "pytest.ini"), "-p", "no:cacheprovider", *args],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _project(tmp_path: Path) -> Path:
    """A project with the coverage plugin and one unit test file, ``tests/unit/test_a.py``."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "conftest.py").write_text(
        "from headroom_testing.coverage import pytest_addoption, pytest_configure  # noqa: F401\n"
    )
    unit = tmp_path / "tests" / "unit"
    unit.mkdir(parents=True)
    (unit / "test_a.py").write_text(
        "import pytest\n\ndef test_one():\n    pass\n\ndef test_two():\n    pass\n\n"
        "@pytest.mark.skip(reason='x')\ndef test_skipped():\n    pass\n"
    )
    return unit / "test_a.py"


def test_a_dropped_test_fails_the_run_and_the_summary_says_what_ran(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("COMFYUI_ROOT", raising=False)  # the inner run's host, whatever the caller's
    tests = _project(tmp_path)
    floor = tmp_path / "floor.json"
    floor.write_text(json.dumps({"hosts": {host_label(): {"unit": 2, "gpu": 0}}}))

    whole = _run(tmp_path, "--coverage-floor", str(floor))
    assert whole.returncode == 0, whole.stdout
    assert f"coverage on {host_label()}: unit 2 ran / 1 skipped" in whole.stdout

    tests.write_text("def test_one():\n    pass\n")  # test_two dropped
    dropped = _run(tmp_path, "--coverage-floor", str(floor))
    assert dropped.returncode == 1, dropped.stdout
    assert "coverage below the floor: unit: 1 tests ran, the floor is 2" in dropped.stdout

    tests.write_text("")  # nothing left: pytest's "no tests" (5) is a failure too
    empty = _run(tmp_path, "--coverage-floor", str(floor))
    assert empty.returncode == 1, empty.stdout

    recorded = _run(tmp_path, "--coverage-floor", str(floor), "--coverage-record")
    assert recorded.returncode == 5  # no floor check when recording; pytest's own status stands
    assert read_floor(floor, host_label()) == {"unit": 0, "host": 0, "gpu": 0, "e2e": 0, "fuzz": 0}


def _host(tmp_path: Path, version: str) -> Path:
    """A stand-in ComfyUI checkout: the host label reads only its comfyui_version.py."""
    root = tmp_path / f"comfyui-{version}"
    root.mkdir()
    (root / "comfyui_version.py").write_text(f'__version__ = "{version}"\n')
    return root


def test_with_comfyui_root_the_floor_is_that_hosts_and_a_drop_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """./scripts/test with COMFYUI_ROOT=<a 0.3.64 checkout> holds the run to that host's floor (here 2
    unit tests), not to another host's (1): one test dropped from two fails the run."""
    monkeypatch.delenv("COMFYUI_ROOT", raising=False)  # the CI host's label, whatever the caller's
    ci = host_label()
    old = _host(tmp_path, "0.3.64")
    monkeypatch.setenv("COMFYUI_ROOT", str(old))
    label = host_label()
    assert label.startswith("ComfyUI 0.3.64 on ") and label != ci
    project = tmp_path / "project"
    project.mkdir()
    _project(project).write_text("def test_one():\n    pass\n")  # of test_one and test_two
    floor = project / "floor.json"
    floor.write_text(json.dumps({"hosts": {label: {"unit": 2}, ci: {"unit": 1}}}))
    dropped = _run(project, "--coverage-floor", str(floor), comfyui_root=old)
    assert dropped.returncode == 1, dropped.stdout
    assert f"coverage on {label}: unit 1 ran / 0 skipped" in dropped.stdout
    assert "coverage below the floor: unit: 1 tests ran, the floor is 2" in dropped.stdout


def test_a_run_of_one_tier_is_held_to_that_tiers_floor_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """scripts/primary-host runs tests/host alone with ``--coverage-tiers host``: the unit floor of the
    same host entry does not fail it, a host test dropped does, and recording keeps the unit floor."""
    monkeypatch.delenv("COMFYUI_ROOT", raising=False)
    _project(tmp_path)
    host_tests = tmp_path / "tests" / "host"
    host_tests.mkdir()
    (host_tests / "test_h.py").write_text("def test_h1():\n    pass\n\ndef test_h2():\n    pass\n")
    floor = tmp_path / "floor.json"
    floor.write_text(json.dumps({"hosts": {host_label(): {"unit": 2, "host": 2}}}))
    args = ("tests/host", "--coverage-floor", str(floor))

    whole_floor = _run(tmp_path, *args)
    assert whole_floor.returncode == 1, whole_floor.stdout  # unit: 0 ran, the floor is 2
    one_tier = _run(tmp_path, *args, "--coverage-tiers", "host")
    assert one_tier.returncode == 0, one_tier.stdout

    (host_tests / "test_h.py").write_text("def test_h1():\n    pass\n")
    dropped = _run(tmp_path, *args, "--coverage-tiers", "host")
    assert dropped.returncode == 1, dropped.stdout
    assert "coverage below the floor: host: 1 tests ran, the floor is 2" in dropped.stdout

    recorded = _run(tmp_path, *args, "--coverage-tiers", "host", "--coverage-record")
    assert recorded.returncode == 0, recorded.stdout
    assert read_floor(floor, host_label()) == {"unit": 2, "host": 1}
