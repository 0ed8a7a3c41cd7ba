"""The command line: ``python -m comfyui_headroom`` (also installed as ``headroom``).

Runs with no GPU, no ComfyUI and no model files.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from .memory.units import parse_bytes
from .version import __version__

# Exit codes: 0 ok, 1 the workflow does not fit, 2 bad input or a feature that has not landed yet.
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
    return parser


def _load_workflow(path: Path) -> dict:
    """Read and sanity-check the workflow file; raise ValueError with a message a person can act on."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file") from None
    except OSError as exc:
        raise ValueError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not a text file; expected a workflow saved as JSON") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno}, column {exc.colno}"
        raise ValueError(f"{path}: malformed JSON at {where}: {exc.msg}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object (a ComfyUI workflow or API prompt)")
    return data


def cmd_plan(args: argparse.Namespace) -> int:
    try:
        _load_workflow(args.workflow)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(
        "error: the residency planner has not landed yet in Headroom "
        f"{__version__} (tracked as issue #3); the workflow file was read and is valid JSON.",
        file=sys.stderr,
    )
    return EXIT_BAD_INPUT


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "plan":
        return cmd_plan(args)
    parser.print_help()
    return 0
