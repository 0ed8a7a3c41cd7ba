"""The command line: ``python -m comfyui_headroom`` (also installed as ``headroom``).

Runs with no GPU, no ComfyUI and no model files.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from .memory.optional import optional_module
from .memory.planning.host_settings import add_host_flags
from .memory.units import GB, GiB, SizeOverflow, format_bytes, parse_bytes
from .version import __version__

# Exit codes: 0 it fits, 1 it does not fit (the output says what would make it fit), 2 bad input.
EXIT_DOES_NOT_FIT = 1
EXIT_BAD_INPUT = 2

# What the numeric flags accept: wide enough for any real machine, narrow enough that the figures stay
# meaningful (a zero or NaN bandwidth would divide by zero or poison every sum).
MIN_SIZE, MAX_SIZE = 2**20, 64 * 2**40  # --vram and --ram alike (a zero RAM is refused, not defaulted)
MIN_RATE, MAX_RATE = 0.001, 10_000.0  # GB/s: 1 MB/s (a network share) to ~80x a PCIe 5 x16 link


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad argument prints one line (no usage block) and exits 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"error: {message} (see {self.prog} --help)\n")


def _size(least: int, most: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        out_of_range = argparse.ArgumentTypeError(
            f"{text!r} is out of range: write a size from {format_bytes(least)} to {format_bytes(most)}, "
            "for example 8GB"
        )
        try:
            nbytes = parse_bytes(text)
        except SizeOverflow:  # "1e308" GB: finite, but not once in bytes
            raise out_of_range from None
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        if not least <= nbytes <= most:
            raise out_of_range
        return nbytes

    return parse


def _rate(text: str) -> float:
    """A bandwidth in GB/s: a finite number in [MIN_RATE, MAX_RATE] (NaN fails every comparison)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not MIN_RATE <= value <= MAX_RATE:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a bandwidth: write GB/s as a number from {MIN_RATE:g} to {MAX_RATE:g}, "
            "for example 6.5"
        )
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
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
    plan.add_argument(
        "--vram",
        type=_size(MIN_SIZE, MAX_SIZE),
        default=None,
        help="the card's VRAM, e.g. 8GB (default: that of --gpu; one of the two is needed)",
    )
    plan.add_argument(
        "--gpu",
        default=None,
        metavar="NAME",
        help="the card, e.g. 'RTX 4090', '4060 Ti', H100: its throughput, VRAM and bus from a table of "
        "published specifications (default: the wall time assumes an RTX 4090 and says so)",
    )
    plan.add_argument(
        "--ram",
        type=_size(MIN_SIZE, MAX_SIZE),
        default=None,
        help="system RAM, e.g. 32GB (default: this machine)",
    )
    plan.add_argument("--models-dir", type=Path, default=None, help="a models folder to read sizes from")
    plan.add_argument("--json", action="store_true", help="print the plan as JSON")
    plan.add_argument(
        "--why",
        action="store_true",
        help="under each node, say in one line why every model component is where the plan puts it "
        "(the JSON always carries each placement's reason)",
    )
    plan.add_argument("--png", type=Path, default=None, help="also draw a residency timeline to this PNG")
    plan.add_argument(
        "--pcie", type=int, choices=(3, 4, 5), default=None, help="PCIe generation (default: --gpu's, else 4)"
    )
    plan.add_argument("--h2d-pinned", type=_rate, default=None, help="measured pinned upload GB/s (override)")
    plan.add_argument("--disk", type=_rate, default=None, help="measured disk read GB/s (override)")
    plan.add_argument(
        "--reserve",
        type=_size(0, MAX_SIZE),
        default=GiB // 2,
        help="VRAM kept for the driver and host (default 0.5GB)",
    )
    add_host_flags(plan)
    return parser


def _default_ram() -> int:
    psutil = optional_module("psutil", "reading this machine's RAM for --ram")
    return int(psutil.virtual_memory().total) if psutil else 32 * GiB


def _check_paths(args: argparse.Namespace) -> str | None:
    """What is wrong with the path flags, checked before planning (so nothing prints, then fails)."""
    models = args.models_dir
    if models is not None and not models.is_dir():
        what = "is not a folder" if models.exists() else "does not exist"
        return f"--models-dir {models} {what}: give the ComfyUI models folder (the one holding checkpoints/)"
    png = args.png
    if png is None:
        return None
    if optional_module("matplotlib", "the --png residency timeline") is None:
        return "--png needs matplotlib (pip install matplotlib)"
    folder = png.parent
    if png.is_dir():
        return f"--png {png} is a folder: give a file name, for example {png / 'timeline.png'}"
    if not folder.is_dir():
        return f"--png {png}: the folder {folder} does not exist"
    if not os.access(png if png.exists() else folder, os.W_OK):
        return f"--png {png}: permission denied, cannot write there"
    return None


def cmd_plan(args: argparse.Namespace) -> int:
    from .memory.planning.baselines import BASELINES
    from .memory.planning.costmodel import Budget
    from .memory.planning.host_advice import host_lines, host_report, hosts_json, rerun_nodes
    from .memory.planning.host_settings import settings_from_args
    from .memory.planning.pipeline import plan_workflow
    from .memory.planning.remedies import make_it_fit, remedies_text
    from .memory.planning.report import TimelineTooLarge, plan_json, plan_text, timeline_png
    from .memory.workflow.graph import WorkflowError

    problem = _check_paths(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        hw = _hardware(args).with_overrides(
            h2d_pinned=None if args.h2d_pinned is None else args.h2d_pinned * GB,
            disk=None if args.disk is None else args.disk * GB,
        )
        ram = _default_ram() if args.ram is None else args.ram
        budget = Budget.from_card(_vram(args, hw), ram, reserve=args.reserve)
        settings = settings_from_args(args)
        planned = plan_workflow(args.workflow, budget, hw, models_dir=args.models_dir)
    except (WorkflowError, ValueError) as exc:
        print(f"error: {_one_line(exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OverflowError as exc:  # a number too big for a float (say a width of 10**400) in the arithmetic
        print(f"error: {args.workflow}: a number in it is too large to plan with ({exc})", file=sys.stderr)
        return EXIT_BAD_INPUT
    except RecursionError:  # json (or a walk of its result) recursing once per level of nesting
        print(f"error: {args.workflow}: the JSON is nested too deep to be a workflow", file=sys.stderr)
        return EXIT_BAD_INPUT
    order, workload, result = planned.order, planned.workload, planned.plan
    assert result is not None  # planned under a budget
    baselines = {name: policy(workload, budget, hw) for name, policy in BASELINES.items()}
    hosts, advice = host_report(workload, budget, hw, settings, rerun_nodes(planned.graph, order))
    try:
        remedies = make_it_fit(planned.graph, workload, result, models_dir=args.models_dir)
    except (ValueError, KeyError, TypeError, OverflowError, RecursionError) as exc:  # a variant cannot plan
        print(f"note: no changes to make it fit could be planned: {_one_line(exc)}", file=sys.stderr)
        remedies = []
    if args.json:
        body = {**plan_json(result, workload, baselines), "hosts": hosts_json(hosts, advice, settings)}
        body["remedies"] = [r.as_dict() for r in remedies]
        print(json.dumps(body, indent=2))
    else:
        print(f"{args.workflow}: {len(order)} nodes will run, {len(workload.components)} model components")
        print(plan_text(result, workload, baselines, why=args.why))
        for line in remedies_text(remedies):
            print(line)
        print("\n".join(host_lines(hosts, advice, settings, why=args.why)))
    if args.png:
        if not result.feasible:
            print(f"note: no timeline drawn to {args.png}: the workflow does not fit", file=sys.stderr)
        else:
            try:
                timeline_png(result, workload, args.png)
            except TimelineTooLarge as exc:
                print(f"note: no timeline drawn to {args.png}: {exc}", file=sys.stderr)
            except OSError as exc:
                print(f"error: cannot write --png {args.png}: {exc.strerror or exc}", file=sys.stderr)
                return EXIT_BAD_INPUT
    return 0 if result.feasible else EXIT_DOES_NOT_FIT


def _hardware(args: argparse.Namespace) -> Any:
    """--gpu's card (its bus unless --pcie says otherwise), else the PCIe generation's defaults."""
    from dataclasses import replace

    from .memory.planning.costmodel import Hardware
    from .memory.planning.gpus import gpu_names, nearest_gpus

    if args.gpu is None:
        return Hardware.pcie(args.pcie or 4)
    try:
        hw = Hardware.for_gpu(args.gpu)
    except ValueError:
        near = nearest_gpus(args.gpu)
        nearest = f" (nearest: {', '.join(near)})" if near else ""
        raise ValueError(
            f"--gpu {args.gpu!r} is not a card Headroom knows{nearest}; name one of: "
            f"{', '.join(gpu_names())} (or give --vram and --pcie for another card)"
        ) from None
    if args.pcie is not None:
        bus = Hardware.pcie(args.pcie)
        hw = replace(hw, h2d_pinned=bus.h2d_pinned, h2d_pageable=bus.h2d_pageable, d2h=bus.d2h)
    return hw


def _vram(args: argparse.Namespace, hw: Any) -> int:
    if args.vram is not None:
        return args.vram
    if args.gpu is None:
        raise ValueError("give --vram (the card's VRAM, e.g. --vram 8GB) or --gpu (the card's name)")
    return hw.card().vram


def _one_line(exc: BaseException) -> str:
    """An error message on one line: the user sees exactly one line per refused input."""
    return " ".join(str(exc).split())


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "plan":
        return cmd_plan(args)
    parser.print_help()
    return 0
