"""What ``scripts/gpu-check`` writes, after every step, so that a run cut off mid-way keeps what it measured.

After each step this run's section of ``gpu-check.md`` is written anew (the steps done, the one running
cut off, the rest "not run yet", and the command that resumes from the next step), and, when a copy
folder is given (``--copy-to``, else ``$OUT`` where the device tool sets it), ``gpu-check.md``, the log
and ``gpu-check-results.tgz`` go there: the tarball holds every file this run wrote (each benchmark's
table and JSON, the merged ``memory/data/gpu_efficiency.json``) under its path in the repository, so
``tar xzf gpu-check-results.tgz`` at the repository's root puts them in place.
"""

from __future__ import annotations

import datetime
import importlib.util
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

ROOT = Path(__file__).resolve().parents[1]
TARBALL = "gpu-check-results.tgz"

SUMMARY_HEADER = """# GPU check (scripts/gpu-check)

One section per run of `scripts/gpu-check` on a machine (newest last): the machine, the date, the
command, then one row per step (every `tests/gpu/test_*.py` and GPU benchmark, in the order run) with
its result, exit code, seconds, expected seconds, timeout and where its table went. Steps that could not
run say why. Each benchmark's own table is in the results file named in its row; the full output of
every step is in `gpu-check.log` beside this file (not committed).
"""


class RunStep(Protocol):
    name: str
    kind: str
    timeout: int
    results: str
    skip: str | None
    rc: int | None
    seconds: float
    outcome: str
    tail: list[str]
    expected: int
    measured: bool
    outputs: list[Path]


def machine(host_desc: str) -> list[str]:
    """Machine facts for the results file: GPU, driver, CPU, RAM, torch, host."""
    gpu = "none"
    if shutil.which("nvidia-smi"):
        query = "--query-gpu=name,driver_version,memory.total"
        res = subprocess.run(
            ["nvidia-smi", query, "--format=csv,noheader"], capture_output=True, text=True, timeout=30
        )
        if res.returncode == 0 and res.stdout.strip():
            gpu = "; ".join(line.strip() for line in res.stdout.strip().splitlines())
            gpu = gpu.replace(", ", " | driver ", 1)
    cpu = next((ln.split(":", 1)[1].strip() for ln in _text(Path("/proc/cpuinfo")).splitlines()
                if ln.startswith("model name")), platform.processor() or platform.machine())  # fmt: skip
    mem = re.search(r"MemTotal:\s+(\d+) kB", _text(Path("/proc/meminfo")))
    ram = f"{int(mem.group(1)) / 2**20:.0f} GiB" if mem else "unknown"
    torch_v = "absent"
    if importlib.util.find_spec("torch") is not None:
        import torch

        torch_v = f"{torch.__version__} (CUDA {torch.version.cuda})"
    commit = ""
    if shutil.which("git"):  # the GPU image may have none, the copied tree no .git
        cmd = ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"]
        commit = subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
    return [
        f"- GPU: {gpu}",
        f"- CPU: {cpu}, {os.cpu_count()} logical CPUs; RAM {ram}",
        f"- Python {platform.python_version()} ({sys.executable}), torch {torch_v}, {platform.platform()}",
        f"- host: {host_desc}",
        f"- commit: {commit or 'unknown (no git)'}",
    ]


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def display(path: Path) -> str:
    try:
        return path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return str(path)


def table(steps: Sequence[RunStep]) -> list[str]:
    lines = [
        "| # | step | result | rc | seconds | expected s | timeout s | results |",
        "|---|---|---|---|---:|---:|---:|---|",
    ]
    for i, s in enumerate(steps, 1):
        result = f"skipped: {s.skip}" if s.skip else (s.outcome or "not run yet")
        rc = "-" if s.rc is None else str(s.rc)
        secs = f"{s.seconds:.0f}" if s.outcome else "-"
        exp = f"{s.expected}" + ("" if s.measured else " (est.)")
        lines.append(f"| {i} | `{s.name}` | {result} | {rc} | {secs} | {exp} | {s.timeout} | {s.results} |")
    return lines


def resume_hint(steps: Sequence[RunStep], command: str) -> str:
    """The command that goes on from the first step this run did not finish (or None left)."""
    pending = next(
        (i for i, s in enumerate(steps, 1) if s.outcome.startswith("TIMEOUT") or _not_reached(s)), None
    )
    if pending is None:
        return "Every selected step ran."
    base = " ".join(w for w in _drop_from(command.split()))
    return f"Next: `{base} --from {pending}` (step {pending}, `{steps[pending - 1].name}`)."


def _not_reached(s: RunStep) -> bool:
    return not s.outcome and (s.skip is None or "budget" in s.skip or "cut off" in s.skip)


def _drop_from(words: list[str]) -> list[str]:
    out, skip = [], False
    for w in words:
        if skip:
            skip = False
        elif w == "--from":
            skip = True
        elif not w.startswith("--from="):
            out.append(w)
    return out


class Progress:
    """This run's section of gpu-check.md and its copies, written again after every step."""

    def __init__(self, results: Path, head: list[str], log_path: Path, copy_to: Path | None,
                 command: str, started: datetime.datetime) -> None:  # fmt: skip
        self.summary = results / "gpu-check.md"
        old = self.summary.read_text(encoding="utf-8") if self.summary.is_file() else ""
        self.before = old if old.strip() else SUMMARY_HEADER
        self.head, self.log_path, self.copy_to = head, log_path, copy_to
        self.command, self.started = command, started

    def write(self, steps: Sequence[RunStep], extra: Sequence[Path] = ()) -> Path:
        gpu = next(
            (h.split(": ", 1)[1].split(" | ")[0] for h in self.head if h.startswith("- GPU: ")), "none"
        )
        title = f"## {self.started.strftime('%Y-%m-%d %H:%M UTC')}: {gpu if gpu != 'none' else 'no GPU'}"
        took = (datetime.datetime.now(datetime.UTC) - self.started).total_seconds()
        lines = [title, "", *self.head, f"- so far: {took:.0f} s", "", *table(steps), ""]
        lines += [
            resume_hint(steps, self.command),
            "",
            f"Full output of every step: `{display(self.log_path)}`.",
        ]
        for step in steps:
            show = step.tail[-15:] if step.rc == 0 else step.tail  # pytest's -ra summary; all of a failure
            if step.tail and (step.kind == "pytest" or step.rc != 0):
                lines += ["", f"### {step.name}: last {len(show)} lines", "", "```text", *show, "```"]
        self.summary.write_text(self.before.rstrip("\n") + "\n\n" + "\n".join(lines) + "\n", encoding="utf-8")
        if self.copy_to is not None:
            self._copy(steps, extra)
        return self.summary

    def _copy(self, steps: Sequence[RunStep], extra: Sequence[Path]) -> None:
        self.copy_to.mkdir(parents=True, exist_ok=True)
        files = [self.summary, self.log_path, *(f for s in steps if s.outcome for f in s.outputs), *extra]
        seen: set[Path] = set()
        tmp = self.copy_to / (TARBALL + ".part")
        with tarfile.open(tmp, "w:gz") as tar:
            for f in files:
                f = f.resolve()
                if f in seen or not f.is_file():
                    continue
                seen.add(f)
                name = display(f)
                tar.add(f, arcname=name if not name.startswith("/") else f"bench/results/{f.name}")
        tmp.replace(self.copy_to / TARBALL)  # never a half-written tarball under the name
        for f in (self.summary, self.log_path):
            if f.is_file() and f.resolve() != (self.copy_to / f.name).resolve():
                shutil.copy2(f, self.copy_to / f.name)
