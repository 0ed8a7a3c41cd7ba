"""The per-file sizes the official templates state in their notes.

Each template of ``comfyui-workflow-templates-json`` explains its downloads in Note/MarkdownNote nodes
(top level and inside subgraphs): ``- [file.safetensors](url) (13.25 GB)``. The unit is binary (the
notes' "GB" is GiB: flux1-dev.safetensors, 23,802,816,640 bytes, is stated as 22.17 GB). These stated
sizes check the catalog (scripts/check_model_catalog.py --stated) and size, as a last resort, the files
no host class builds (scripts/solve_template_sizes.py, source "template notes (stated size)").
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

_LINK = re.compile(
    r"\[([^\]\[]+?\.(?:safetensors|sft|gguf|pth|pt|ckpt|bin))\]\([^)]*\)\s*\(\s*([\d.,]+)\s*([KMGT])i?B\s*\)",
    re.IGNORECASE,
)
_UNIT = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
NOTE_TYPES = frozenset({"Note", "MarkdownNote"})


def _notes(workflow: dict) -> Iterator[str]:
    graphs = [workflow, *workflow.get("definitions", {}).get("subgraphs", [])]
    for graph in graphs:
        for node in graph.get("nodes", []):
            if isinstance(node, dict) and node.get("type") in NOTE_TYPES:
                yield from (w for w in node.get("widgets_values") or [] if isinstance(w, str))


def stated_in(text: str) -> dict[str, int]:
    """file name -> bytes for every ``[name](url) (size)`` in a note's text (the smallest if repeated)."""
    found: dict[str, int] = {}
    for match in _LINK.finditer(text):
        value = float(match.group(2).replace(",", ""))
        size = int(round(value * _UNIT[match.group(3).upper()]))
        name = match.group(1).strip().rsplit("/", 1)[-1]
        found[name] = min(found.get(name, size), size)
    return found


def stated_sizes(folder: Path) -> dict[str, tuple[int, float]]:
    """file name -> (bytes, relative rounding of the stated figure) over every template in ``folder``.

    A file stated differently by two templates keeps the smaller figure."""
    sizes: dict[str, tuple[int, float]] = {}
    for path in sorted(folder.glob("*.json")):
        if path.name == "index.json":
            continue
        workflow = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(workflow, dict):
            continue
        for text in _notes(workflow):
            for name, size in stated_in(text).items():
                if name not in sizes or size < sizes[name][0]:
                    sizes[name] = (size, 0.005)  # figures carry 3-4 significant digits
    return sizes
