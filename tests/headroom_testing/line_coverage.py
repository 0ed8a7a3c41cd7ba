"""Which lines of the pack each tier's tests ran: coverage.py over one pytest run, a context per tier.

The pack's product code is measured: ``memory/``, ``nodes/`` and the entry points (``__init__.py``,
``__main__.py``, ``cli.py``, ``version.py``); not tests, benchmarks or scripts. One measurement serves
every tier: while a test of a tier is set up, run and torn down, coverage.py's dynamic context is the
tier's name (``unit``); while pytest collects (imports) a tier's test modules it is ``import:unit``.

A module's import-time lines (its imports, ``def`` and ``class`` lines, constants: every line outside
a function's body) run once per process, in whichever tier imported it first, while collecting or
inside a test, so each is credited to every tier that ran or imported anything in that file, as is any
line run outside a test (collection, pytest's start): a tier's share is then near what the tier alone
would have run, whichever tiers ran before it (a value cached by an earlier tier still hides its lines).

In-process only: the servers the host and browser tiers start (``python main.py``), the CLI runs and
other subprocesses are not measured. Per-tier contexts need a tracing core: the C tracer is used
(coverage.py's sys.monitoring core, ``COVERAGE_CORE=sysmon`` on Python 3.12+, cannot switch contexts
as of coverage 7.17, so it is not used even where that is set).

``HEADROOM_LINE_COVERAGE_DATA=FILE`` keeps the measurement in FILE (coverage.py's data file, with each
line's contexts: ``coverage html --data-file=FILE --show-contexts`` shows which tiers ran a line).
"""

from __future__ import annotations

import ast
import os
import sys
from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass
from pathlib import Path

ENTRY_POINTS = ("__init__.py", "__main__.py", "cli.py", "version.py")
PRODUCT_DIRS = ("memory", "nodes")
IMPORT = "import:"  # the context prefix while a tier's modules are collected


def product_files(root: Path) -> list[Path]:
    """The pack's product modules under ``root``: the entry points, then ``memory/`` and ``nodes/``."""
    files = [root / name for name in ENTRY_POINTS if (root / name).is_file()]
    for folder in PRODUCT_DIRS:
        files += sorted(p for p in (root / folder).rglob("*.py") if "__pycache__" not in p.parts)
    return files


def function_body_lines(source: str) -> set[int]:
    """The lines inside functions' bodies: what runs when a function is called (a one-line function's
    line runs at import, and counts as such)."""
    lines: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.body[0].lineno > node.lineno:
            lines.update(range(node.body[0].lineno, (node.end_lineno or node.body[0].lineno) + 1))
    return lines


def credit(
    contexts_by_line: Mapping[int, Iterable[str]], body: Set[int] = frozenset()
) -> dict[str, set[int]]:
    """One file's lines credited to each tier, from the contexts each line ran in.

    A tier gets the lines of function bodies (``body``) its tests ran and, when it ran or imported
    anything in the file, every other line run (module and class level: run at import, by whichever
    tier imported the module first) and every line run outside a test (``import:<tier>``, or ``""``,
    the session's start)."""
    ran: dict[str, set[int]] = {}
    outside: set[int] = set()
    touched: set[str] = set()
    for line, contexts in contexts_by_line.items():
        for context in contexts:
            tier = context.removeprefix(IMPORT)
            if tier:
                touched.add(tier)
            if line not in body or tier != context or not tier:
                outside.add(line)
            else:
                ran.setdefault(tier, set()).add(line)
    return {tier: ran.get(tier, set()) | outside for tier in touched}


@dataclass
class LineReport:
    """The share of the pack's executable lines each tier ran, and all tiers together, in percent."""

    statements: int
    tiers: dict[str, float]
    all_tiers: float


def percent(part: int, whole: int) -> float:
    return 100.0 * part / whole if whole else 0.0


class LineCoverage:
    """coverage.py measuring the product under ``root`` in this process, started at once."""

    def __init__(self, root: Path) -> None:
        import coverage

        self.root = root.resolve()
        include = [str(self.root / name) for name in ENTRY_POINTS]
        include += [f"{self.root / folder}/*" for folder in PRODUCT_DIRS]
        # config_file=False: a user's .coveragerc or [tool.coverage] is not this measurement's. The data
        # stays in memory (a pytest run inside a test, with the same environment, cannot erase it) and
        # is copied at the end to HEADROOM_LINE_COVERAGE_DATA, if set
        self.data_file = os.environ.get("HEADROOM_LINE_COVERAGE_DATA") or None
        self.cov = coverage.Coverage(data_file=None, include=include, config_file=False)
        self.cov.set_option("run:core", "ctrace")  # switch_context needs a tracer (module docstring)
        self.cov.set_option("run:disable_warnings", ["no-data-collected"])
        self.context = ""
        self.cov.start()
        self.running = True

    @classmethod
    def start(cls, root: Path) -> LineCoverage | str:
        """A running measurement, or why there is none (turned off, no coverage.py, another tracer)."""
        if os.environ.get("HEADROOM_LINE_COVERAGE", "1") == "0":
            return "line coverage off (HEADROOM_LINE_COVERAGE=0)"
        try:
            import coverage
        except ImportError:
            return "line coverage not measured: coverage.py is not installed (the test extra has it)"
        if coverage.Coverage.current() is not None or sys.gettrace() is not None:
            return "line coverage not measured: another tracer (pytest-cov, a debugger) is running"
        return cls(root)

    def switch(self, context: str) -> str:
        """Count what runs from now on under ``context``; returns the context it replaces."""
        previous = self.context
        if self.running and context != previous:
            self.cov.switch_context(context)
            self.context = context
        return previous

    def stop(self) -> None:
        if self.running:
            self.cov.stop()
            self.running = False
            if self.data_file:  # `coverage html --data-file=FILE --show-contexts`: each line's tiers
                from coverage import CoverageData

                kept = CoverageData(basename=self.data_file)
                kept.erase()
                kept.update(self.cov.get_data())
                kept.write()

    def report(self, tiers: Iterable[str]) -> LineReport:
        """The share of the product's executable lines each of ``tiers`` ran (stops the measurement)."""
        from coverage.python import PythonFileReporter

        self.stop()
        data = self.cov.get_data()
        measured = set(data.measured_files())
        wanted = set(tiers)
        total = 0
        ran = dict.fromkeys(wanted, 0)
        ran_any = 0
        for path in product_files(self.root):
            reporter = PythonFileReporter(str(path), self.cov)
            statements = reporter.lines()
            total += len(statements)
            if str(path) not in measured:
                continue
            by_tier = credit(data.contexts_by_lineno(str(path)), function_body_lines(reporter.source()))
            for tier in wanted & set(by_tier):
                ran[tier] += len(reporter.translate_lines(by_tier[tier]) & statements)
            ran_any += len(reporter.translate_lines(data.lines(str(path)) or []) & statements)
        return LineReport(total, {t: percent(n, total) for t, n in ran.items()}, percent(ran_any, total))
