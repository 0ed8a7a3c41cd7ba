"""The command line: ``python -m comfyui_headroom`` (also installed as ``headroom``).

Runs with no GPU, no ComfyUI and no model files.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from .memory.costmodel import GB, GiB
from .memory.optional import optional_module
from .memory.units import parse_bytes
from .version import __version__

# Exit codes: 0 it fits, 1 it does not fit (the output says what would make it fit), 2 bad input.
EXIT_DOES_NOT_FIT = 1
EXIT_BAD_INPUT = 2


def _size(text: str) -> int:
    try:
        return parse_bytes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m comfyui_headroom",
        description="Headroom: plan where every model of a ComfyUI workflow lives (GPU, pinned RAM, RAM, "
        "disk) at every step, before it runs.",
    )
    parser.add_argument("--version", action="version", version=f"Headroom {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    plan = commands.add_parser(
        "plan",
        help="will this workflow fit my card, and how?",
        description="Predict the execution order of a workflow and plan the residency of every model "
        "component under a VRAM/RAM budget. No GPU and no model files needed.",
    )
    plan.add_argument("workflow", type=Path, help="a ComfyUI workflow (UI format) or API prompt, as JSON")
    plan.add_argument("--vram", type=_size, required=True, help="usable VRAM, e.g. 8GB")
    plan.add_argument("--ram", type=_size, default=None, help="system RAM, e.g. 32GB (default: this machine)")
    plan.add_argument("--models-dir", type=Path, default=None, help="a models folder to read sizes from")
    plan.add_argument("--json", action="store_true", help="print the plan as JSON")
    plan.add_argument("--png", type=Path, default=None, help="also draw a residency timeline to this PNG")
    plan.add_argument("--pcie", type=int, choices=(3, 4, 5), default=4, help="PCIe generation (default 4)")
    plan.add_argument("--h2d-pinned", type=float, default=None, help="measured pinned upload GB/s (override)")
    plan.add_argument("--disk", type=float, default=None, help="measured disk read GB/s (override)")
    plan.add_argument(
        "--reserve", type=_size, default=GiB // 2, help="VRAM kept for the driver and host (default 0.5GB)"
    )
    return parser


def _default_ram() -> int:
    psutil = optional_module("psutil", "reading this machine's RAM for --ram")
    return int(psutil.virtual_memory().total) if psutil else 32 * GiB


def cmd_plan(args: argparse.Namespace) -> int:
    from .memory.baselines import BASELINES
    from .memory.costmodel import Budget, Hardware
    from .memory.extract import workload_from_graph
    from .memory.graph import WorkflowError, load_workflow
    from .memory.order import predict_order
    from .memory.planner import plan
    from .memory.report import plan_json, plan_table, summary, timeline_png

    try:
        graph = load_workflow(args.workflow)
        order = predict_order(graph)
        hw = Hardware.pcie(args.pcie).with_overrides(
            h2d_pinned=args.h2d_pinned and args.h2d_pinned * GB, disk=args.disk and args.disk * GB
        )
        workload = workload_from_graph(graph, order, models_dir=args.models_dir, tflops=hw.tflops)
        budget = Budget.from_card(args.vram, args.ram or _default_ram(), reserve=args.reserve)
    except (WorkflowError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    result = plan(workload, budget, hw)
    baselines = {name: policy(workload, budget, hw) for name, policy in BASELINES.items()}
    if args.json:
        print(json.dumps(plan_json(result, workload, baselines), indent=2))
    else:
        print(f"{args.workflow}: {len(order)} nodes will run, {len(workload.components)} model components")
        if result.feasible:
            print(plan_table(result, workload))
        print(summary(result, baselines))
        for note in workload.notes:
            print(f"note: {note}")
    if args.png:
        if optional_module("matplotlib", "the --png residency timeline") is None:
            print("error: --png needs matplotlib (pip install matplotlib)", file=sys.stderr)
            return EXIT_BAD_INPUT
        if result.feasible:
            timeline_png(result, workload, args.png)
    return 0 if result.feasible else EXIT_DOES_NOT_FIT


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "plan":
        return cmd_plan(args)
    parser.print_help()
    return 0
