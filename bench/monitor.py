"""Memory Monitor overhead (issue #7): the sampler and the per-node hooks against node time.

    python bench/monitor.py [--out bench/results/monitor.md] [--pairs 15]

Three measurements on this machine's real sources (torch.cuda and NVML when present, psutil):

1. the cost of one sample (MemoryProbe.read), median and p95 over many reads;
2. the cost the executor hooks add to every node (node_started + node_finished: a peak reset, two samples,
   the record and its event), median;
3. side by side, in one run: a CPU-bound "node" (single-threaded matmuls, ~0.25 s) with telemetry off
   and on (hooks on every node plus the background sampler at 1 Hz, the default, and at 20 Hz), in
   process CPU seconds (the sampler thread's included), interleaved pairs, median of the ratios.

The target is overhead <= 1% of node time. (1) x rate bounds the sampler's share of one core; (2) / node
time is the hooks' share, which gives the shortest node for which the hooks stay under 1%.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT.parent))

try:
    from comfyui_headroom.memory.telemetry.hub import Telemetry
    from comfyui_headroom.memory.telemetry.probe import MemoryProbe
    from comfyui_headroom.memory.telemetry.sampler import Sampler
except ImportError:  # a checkout not installed with pip install -e .
    sys.exit("run from the test virtualenv: pip install -e . first")


def timed(fn, n: int, clock=time.perf_counter) -> list[float]:
    out = []
    for _ in range(n):
        t0 = clock()
        fn()
        out.append(clock() - t0)
    return out


def workload(a: torch.Tensor, repeats: int) -> None:
    x = a
    for _ in range(repeats):
        x = (x @ a).clamp_(-1, 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=None, help="append the result table to this markdown file"
    )
    parser.add_argument("--pairs", type=int, default=15, help="interleaved off/on pairs per rate")
    args = parser.parse_args()
    torch.set_num_threads(1)

    probe = MemoryProbe.detect()
    reads = timed(probe.read, 3000)
    read_med, read_p95 = statistics.median(reads), statistics.quantiles(reads, n=20)[-1]

    telemetry = Telemetry(probe, Sampler(probe.read, period_s=0))
    telemetry.start_prompt("bench", {})

    def hooks() -> None:
        telemetry.node_started("bench", "1", "Bench")
        telemetry.node_finished("bench", "1")

    hook_med = statistics.median(timed(hooks, 3000))

    a = torch.randn(384, 384) / 384**0.5
    repeats = 1
    while statistics.median(timed(lambda r=repeats: workload(a, r), 3)) < 0.25:
        repeats *= 2
    node_s = statistics.median(timed(lambda: workload(a, repeats), 5))

    rows = []
    for rate in (1.0, 20.0):
        ratios = []
        for _ in range(args.pairs):
            # CPU seconds of the whole process (the sampler thread included): on a shared machine wall
            # time mostly measures the neighbours.
            off = timed(lambda: workload(a, repeats), 1, time.process_time)[0]
            sampler = Sampler(probe.read, period_s=1 / rate)
            monitored = Telemetry(probe, sampler)
            monitored.start_prompt("bench", {})
            sampler.ensure_running()

            def node(monitored: Telemetry = monitored) -> None:
                monitored.node_started("bench", "1", "Bench")
                workload(a, repeats)
                monitored.node_finished("bench", "1")

            on = timed(node, 1, time.process_time)[0]
            sampler.stop()
            ratios.append(on / off)
        rows.append((rate, statistics.median(ratios), min(ratios), max(ratios)))

    sources = ", ".join(k for k, v in probe.sources().items() if v) or "none"
    lines = [
        f"- date: {datetime.date.today().isoformat()}",
        f"- machine: {platform.machine()}, {platform.system()} {platform.release()}, Python "
        f"{platform.python_version()}, torch {torch.__version__}, sources: {sources}",
        "- command: `python bench/monitor.py`",
        "",
        "| measurement | value |",
        "|---|---:|",
        f"| one sample (MemoryProbe.read), median | {read_med * 1e6:.1f} µs |",
        f"| one sample, p95 | {read_p95 * 1e6:.1f} µs |",
        f"| sampler share of one core at 1 Hz (median x rate) | {read_med * 100:.4f}% |",
        f"| sampler share of one core at 20 Hz | {read_med * 20 * 100:.3f}% |",
        f"| per-node hooks (start + finish), median | {hook_med * 1e6:.1f} µs |",
        f"| shortest node for which the hooks stay <= 1% | {hook_med * 100 * 1e3:.1f} ms |",
        f"| benchmark node (single-thread matmuls), median | {node_s * 1e3:.0f} ms |",
    ]
    for rate, median, low, high in rows:
        lines.append(
            f"| node CPU time with telemetry on / off, sampler {rate:g} Hz, median of {args.pairs} pairs "
            f"[min, max] | {median:.4f} [{low:.3f}, {high:.3f}] |"
        )
    text = "\n".join(lines)
    print(text)
    if args.out:
        with args.out.open("a", encoding="utf-8") as f:
            f.write(f"\n## Run of {datetime.datetime.now().isoformat(timespec='minutes')}\n\n{text}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
