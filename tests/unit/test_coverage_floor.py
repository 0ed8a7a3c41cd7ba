"""The run's coverage line and floor (headroom_testing.coverage): a test that stops running fails the run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from headroom_testing.coverage import (
    below_floor,
    below_line_floor,
    host_label,
    read_floor,
    read_line_floor,
    record_floor,
    tier_of,
)
from headroom_testing.line_coverage import credit, function_body_lines, product_files

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


def _run(
    project: Path, *args: str, comfyui_root: Path | None = None, line_coverage: bool = False
) -> subprocess.CompletedProcess:
    """pytest in ``project``; with ``line_coverage`` measuring the lines of the pack-shaped ``project``
    (its memory/, nodes/ and entry points), else with line coverage off (the counts' tests)."""
    env = dict(os.environ, PYTHONPATH=str(TESTS) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("COMFYUI_ROOT", None)
    env.pop("PYTEST_ADDOPTS", None)  # the caller's options (a --basetemp) are not the inner run's
    env.pop("HEADROOM_COVERAGE_RECORD", None)  # nor its recording of floors: the inner run checks them
    env["HEADROOM_LINE_COVERAGE"] = "1" if line_coverage else "0"
    env.pop("HEADROOM_LINE_COVERAGE_DATA", None)  # the caller's data file is not the inner run's
    if line_coverage:
        args = (*args, "--line-coverage-root", str(project))
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


def test_a_line_run_at_import_is_credited_to_each_tier_that_used_the_file() -> None:
    """Import-time lines (run once per process, by whichever tier imported first, while collecting or
    inside a test) count for every tier that ran or imported anything in the file; the lines of function
    bodies a tier's tests ran count for it alone."""
    body = {3, 4, 5}
    by_line = {1: [""], 2: ["import:host"], 3: ["unit"], 4: ["host", "unit"], 5: ["host"], 6: ["host"]}
    assert credit(by_line, body) == {"unit": {1, 2, 3, 4, 6}, "host": {1, 2, 4, 5, 6}}
    assert credit({1: ["import:unit"], 2: ["import:unit"]}, {2}) == {"unit": {1, 2}}
    assert credit({1: [""]}) == {}  # imported before any tier: no tier used it


def test_function_bodies_are_what_runs_when_called() -> None:
    source = (
        "import os\n"  # 1
        "@staticmethod\n"  # 2
        "def f(x=os.sep):\n"  # 3
        "    'doc'\n"  # 4
        "    return x\n"  # 5
        "class C:\n"  # 6
        "    y = 1\n"  # 7
        "    async def g(self):\n"  # 8
        "        def h():\n"  # 9
        "            return 2\n"  # 10
        "        return h\n"  # 11
        "def one(): return 3\n"  # 12
    )
    assert function_body_lines(source) == {4, 5, 9, 10, 11}


def test_the_product_is_memory_nodes_and_the_entry_points(tmp_path: Path) -> None:
    for name in ("__init__.py", "cli.py", "memory/a.py", "memory/sub/b.py", "nodes/c.py", "tests/t.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    (tmp_path / "memory/__pycache__").mkdir()
    (tmp_path / "memory/__pycache__/a.py").write_text("")
    found = [p.relative_to(tmp_path).as_posix() for p in product_files(tmp_path)]
    assert found == ["__init__.py", "cli.py", "memory/a.py", "memory/sub/b.py", "nodes/c.py"]


def test_below_line_floor_allows_half_a_point() -> None:
    assert below_line_floor({"unit": 70.6, "host": 40.0}, {"unit": 71.0, "host": 40.0}) == []
    assert below_line_floor({"unit": 70.4}, {"unit": 71.0, "gpu": 0.0}) == [
        "unit: 70.4% of lines ran, the floor is 71.0% (0.5 points allowed)"
    ]


def test_recording_lines_keeps_the_counts_and_other_tiers(tmp_path: Path) -> None:
    path = tmp_path / "floor.json"
    record_floor(path, "a", {"unit": 3, "host": 2}, lines={"unit": 70.04, "host": 40.0})
    record_floor(path, "a", {"host": 1}, ("host",), lines={"host": 38.26, "unit": 1.0})
    assert read_floor(path, "a") == {"unit": 3, "host": 1}
    assert read_line_floor(path, "a") == {"unit": 70.0, "host": 38.3}
    record_floor(path, "a", {"host": 1}, ("host",))  # line coverage off: its floor is kept
    assert read_line_floor(path, "a") == {"unit": 70.0, "host": 38.3}
    assert read_line_floor(path, "b") == {}


def _pack_project(tmp_path: Path) -> Path:
    """A pack-shaped project: ``memory/m.py`` with a() and b() (4 lines), a unit test that calls a()
    and a host test that calls b(); the module ``memory.m`` is importable from the project folder."""
    (tmp_path / "pytest.ini").write_text("[pytest]\npythonpath = .\n")
    (tmp_path / "conftest.py").write_text(
        "from headroom_testing.coverage import pytest_addoption, pytest_configure  # noqa: F401\n"
    )
    (tmp_path / "memory").mkdir()
    (tmp_path / "memory" / "m.py").write_text("def a():\n    return 1\n\n\ndef b():\n    return 2\n")
    for tier, call in (("unit", "a"), ("host", "b")):
        (tmp_path / "tests" / tier).mkdir(parents=True)
        (tmp_path / "tests" / tier / f"test_{tier}.py").write_text(
            f"from memory import m\n\n\ndef test_it():\n    assert m.{call}()\n"
        )
    return tmp_path / "tests" / "host" / "test_host.py"


def test_a_tier_that_runs_fewer_lines_fails_the_run_and_recording_writes_the_share(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each tier's share of lines is printed beside its counts; the host test stops calling b(): its
    share falls from 75% (a's and b's def lines, b's body) to 50% and the run fails naming the tier."""
    monkeypatch.delenv("COMFYUI_ROOT", raising=False)
    host_test = _pack_project(tmp_path)
    floor = tmp_path / "floor.json"
    floor.write_text(json.dumps({"hosts": {host_label(): {"unit": 1}}}))

    recorded = _run(tmp_path, "--coverage-floor", str(floor), "--coverage-record", line_coverage=True)
    assert recorded.returncode == 0, recorded.stdout
    assert "unit 1 ran / 0 skipped (75.0% of lines)" in recorded.stdout
    assert "host 1 ran / 0 skipped (75.0% of lines)" in recorded.stdout
    assert "all tiers 100.0% of the pack's 4 lines, in-process only" in recorded.stdout
    assert read_line_floor(floor, host_label()) == {"unit": 75.0, "host": 75.0}
    assert read_floor(floor, host_label()) == {"unit": 1, "host": 1, "gpu": 0, "e2e": 0, "fuzz": 0}

    held = _run(tmp_path, "--coverage-floor", str(floor), line_coverage=True)
    assert held.returncode == 0, held.stdout

    host_test.write_text("from memory import m\n\n\ndef test_it():\n    assert m\n")
    dropped = _run(tmp_path, "--coverage-floor", str(floor), line_coverage=True)
    assert dropped.returncode == 1, dropped.stdout
    assert "host 1 ran / 0 skipped (50.0% of lines)" in dropped.stdout
    assert "coverage below the floor: host: 50.0% of lines ran, the floor is 75.0%" in dropped.stdout
    assert "unit: " not in dropped.stdout.split("coverage below the floor", 1)[1]

    off = _run(tmp_path, "--coverage-floor", str(floor))  # HEADROOM_LINE_COVERAGE=0: not held
    assert off.returncode == 0, off.stdout
    assert "line coverage off (HEADROOM_LINE_COVERAGE=0)" in off.stdout
