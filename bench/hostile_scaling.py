"""What the command line does to big and hostile prompts, timed by size (issue #31).

    python bench/hostile_scaling.py [--copies 100,300,1000,1500] [--out bench/results/hostile_scaling.md]

Each prompt is the Flux Dev API template repeated ``copies`` times (10 nodes a copy, its own loaders and
seed), as a user pasting workflows together makes one: the 2 MB case is 1,500 copies, 15,000 nodes. Timed
as ``python -m comfyui_headroom plan FILE --vram 8GB`` in process: parse, order, extract, plan, the
baselines and the host report, i.e. everything but printing. The ratio of seconds per node between the
largest and the smallest size says whether planning is linear (about 1) or not.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import datetime
import io
import json
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FLUX = ROOT / "example_workflows" / "api" / "Flux Dev text to image.json"

from comfyui_headroom.cli import main as cli_main  # noqa: E402


def flux_copies(n: int) -> dict[str, Any]:
    base = json.loads(FLUX.read_text())
    prompt: dict[str, Any] = {}
    for i in range(n):
        for node_id, node in copy.deepcopy(base).items():
            for name, value in node["inputs"].items():
                if isinstance(value, list) and len(value) == 2 and isinstance(value[0], str):
                    node["inputs"][name] = [f"{i}_{value[0]}", value[1]]
                if name in ("seed", "noise_seed"):
                    node["inputs"][name] = i
            prompt[f"{i}_{node_id}"] = node
    return prompt


def time_cli(path: Path) -> tuple[float, float]:
    """Wall and CPU seconds of one plan (on a shared machine the CPU time is the figure that compares)."""
    start, cpu = time.perf_counter(), time.process_time()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        cli_main(["plan", str(path), "--vram", "8GB", "--ram", "32GB"])
    return time.perf_counter() - start, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", default="100,300,1000,1500", help="template copies per prompt")
    parser.add_argument("--out", type=Path, default=None, help="append a markdown table here")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for n in (int(x) for x in args.copies.split(",")):
            path = Path(folder) / f"flux_x{n}.json"
            path.write_text(json.dumps(flux_copies(n)))
            wall, seconds = time_cli(path)
            nodes = n * len(json.loads(FLUX.read_text()))
            rows.append((n, nodes, path.stat().st_size / 1e6, wall, seconds))
            print(
                f"{nodes:>6} nodes {rows[-1][2]:5.2f} MB {wall:7.2f} s wall {seconds:7.2f} s CPU", flush=True
            )
    per_node = [s / nodes for _, nodes, _, _, s in rows]
    lines = [
        f"## {datetime.date.today()} {platform.node()} ({platform.processor() or platform.machine()}), "
        f"python {platform.python_version()}",
        f"`python bench/hostile_scaling.py --copies {args.copies}`",
        "",
        "| copies | nodes | MB | wall s | CPU s (CLI, in process) | CPU ms per node |",
        "|---:|---:|---:|---:|---:|---:|",
        *(
            f"| {n} | {nodes:,} | {mb:.2f} | {wall:.2f} | {s:.2f} | {1e3 * s / nodes:.3f} |"
            for n, nodes, mb, wall, s in rows
        ),
        "",
        f"CPU ms per node, largest / smallest: {per_node[-1] / per_node[0]:.2f} (1 is linear)",
    ]
    print("\n".join(lines))
    if args.out:
        with args.out.open("a", encoding="utf-8") as out:
            out.write("\n".join(lines) + "\n\n")


if __name__ == "__main__":
    sys.exit(main())
