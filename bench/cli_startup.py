"""Command-line start-up (issue #14): wall time and peak RSS of ``python -m comfyui_headroom``, now and as
it was when the pack root imported the node layer (and so torch) eagerly, side by side in one run.

    python bench/cli_startup.py [--runs 5] [--out bench/results/cli_startup.md]

Both variants run from temporary copies of this checkout (the same files, imported through PYTHONPATH
from a folder outside the repository): "now" as it is, "before" with the pre-#14 eager block appended
to the root ``__init__.py`` (import ``nodes``, so torch, then ``install_monitor()``). One warm-up run
of each writes the bytecode (PYTHONDONTWRITEBYTECODE is dropped: an installed pack has its bytecode);
then the runs alternate, and each figure is the median. Peak RSS is the child's own ``ru_maxrss``
(os.wait4). Targets: plan under 0.5 s and 150 MB.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from headroom_testing import pack_copy  # noqa: E402

EXAMPLE = "example_workflows/api/Flux Dev text to image.json"
COMMANDS: dict[str, list[str] | None] = {
    "plan": ["plan", EXAMPLE, "--vram", "8GB"],
    "--help": ["--help"],
    "python -c pass (the interpreter alone)": None,
}
# What the root __init__.py did before #14, on every import of the package.
EAGER = """
if __package__:
    from .nodes import NODE_CLASS_MAPPINGS, NODE_DISPLAY_NAME_MAPPINGS
    from .nodes.host import install_monitor

    install_monitor()
"""
SKIP = pack_copy.ignore("tests", "bench", "assets")


def make_copy(parent: Path, eager: bool) -> Path:
    package = parent / "comfyui_headroom"
    shutil.copytree(ROOT, package, ignore=SKIP)
    if eager:
        with (package / "__init__.py").open("a", encoding="utf-8") as init:
            init.write(EAGER)
    return parent


Sample = tuple[float, float, int]  # wall seconds, CPU seconds (user + system), peak RSS bytes


def child_env(path: Path) -> dict[str, str]:
    """The copy on the path, and bytecode written and reused as in an installed pack (pip compiles it)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH")}
    return {**env, "PYTHONPATH": str(path)}


def run_once(path: Path, args: list[str] | None, cwd: Path) -> Sample:
    """One ``python -m comfyui_headroom`` process (``args`` None: the bare interpreter, ``-c pass``)."""
    env = child_env(path)
    with tempfile.TemporaryFile() as errors:  # a file, not a pipe: nobody reads while the child runs
        start = time.perf_counter()
        child = subprocess.Popen(
            [sys.executable, *(["-m", "comfyui_headroom", *args] if args is not None else ["-c", "pass"])],
            cwd=cwd,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=errors,
        )
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - start
        child.returncode = os.waitstatus_to_exitcode(status)
        if child.returncode != 0:
            errors.seek(0)
            raise SystemExit(f"{args} from {path} exited {child.returncode}: {errors.read().decode()}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024  # ru_maxrss: KB on Linux


def origin(path: Path, cwd: Path) -> str:
    """Where that copy's comfyui_headroom is imported from (not the editable install of the checkout)."""
    code = "import comfyui_headroom, sys; print(comfyui_headroom.__file__, 'torch' in sys.modules)"
    env = child_env(path)
    out = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True)
    return out.stdout.strip()


def measure(runs: int) -> dict[str, dict[str, list[Sample]]]:
    results: dict[str, dict[str, list[Sample]]] = {c: {"now": [], "before": []} for c in COMMANDS}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        copies = {"now": make_copy(work / "now", False), "before": make_copy(work / "before", True)}
        cwd = work / "cwd"  # outside both copies, holding the example at its relative path
        (cwd / EXAMPLE).parent.mkdir(parents=True)
        shutil.copy(ROOT / EXAMPLE, cwd / EXAMPLE)
        for name, path in copies.items():
            where = origin(path, cwd)
            if not where.startswith(str(path)):
                raise SystemExit(f"the {name} copy is not the one imported: {where}")
            for args in COMMANDS.values():
                run_once(path, args, cwd)  # warm-up: bytecode and page cache
        for _ in range(runs):
            for command, args in COMMANDS.items():
                for name, path in copies.items():
                    results[command][name].append(run_once(path, args, cwd))
    return results


def report(results: dict[str, dict[str, list[Sample]]], runs: int, command: str) -> str:
    lines = [
        "# CLI start-up",
        "",
        f"- date: {datetime.date.today().isoformat()}",
        f"- machine: {platform.machine()}, {os.cpu_count()} cores, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}; 1-minute load average {os.getloadavg()[0]:.1f} at the end "
        "(on a shared machine the CPU column is the steadier one)",
        f"- command: `{command}`",
        f"- measured: `python -m comfyui_headroom plan {EXAMPLE} --vram 8GB` and `--help`, median of {runs} "
        "runs each, alternating; before = the same copy with the pre-#14 eager root __init__ (nodes, torch, "
        "install_monitor) appended",
        "",
        "| command | now s | before s | time ratio | now CPU s | before CPU s | now peak RSS MB "
        "| before peak RSS MB | RSS ratio |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, by in results.items():
        wall, cpu, rss = (
            {v: statistics.median(sample[i] for sample in by[v]) for v in ("now", "before")} for i in range(3)
        )
        mb = {v: rss[v] / 2**20 for v in rss}
        lines.append(
            f"| {name} | {wall['now']:.2f} | {wall['before']:.2f} | {wall['before'] / wall['now']:.1f}x | "
            f"{cpu['now']:.2f} | {cpu['before']:.2f} | {mb['now']:.0f} | {mb['before']:.0f} | "
            f"{mb['before'] / mb['now']:.1f}x |"
        )
    lines += [
        "",
        "Ratios are before / now; CPU s is the child's user + system time (less sensitive to load).",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None, help="append the table here")
    args = parser.parse_args()
    text = report(measure(args.runs), args.runs, "python " + " ".join(sys.argv))
    print(text)
    if args.out:
        with args.out.open("a", encoding="utf-8") as out:
            out.write(text + "\n")


if __name__ == "__main__":
    main()
