"""The memory timeline as a picture (matplotlib, optional): device and host memory over the prompt, with
node spans shaded and the plan's predicted peak per node drawn next to what happened."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..optional import optional_module
from ..planning.records import PlannedRun
from ..units import GiB
from .probe import Sample
from .runs import NodeRecord

_SERIES = (  # field, label, colour
    ("device_used", "device used", "#c62828"),
    ("reserved", "torch reserved", "#ef6c00"),
    ("allocated", "torch allocated", "#f9a825"),
    ("rss", "process RSS", "#1565c0"),
    ("ram_used", "system RAM used", "#64b5f6"),
)


def timeline_image(
    samples: Sequence[Sample],
    nodes: Sequence[NodeRecord] = (),
    planned: PlannedRun | None = None,
    size: tuple[int, int] = (768, 384),
) -> np.ndarray | None:
    """An RGB float32 array [H, W, 3] in 0..1, or None without matplotlib."""
    if optional_module("matplotlib", "the Memory Monitor's chart output") is None:
        return None
    # An Agg canvas of our own: no pyplot state and no GUI backend inside a server.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    width, height = size
    fig = Figure(figsize=(width / 96, height / 96), dpi=96)
    canvas = FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    t0 = min([s.t for s in samples] + [n.started for n in nodes], default=0.0)
    for name, label, colour in _SERIES:
        points = [(s.t - t0, getattr(s, name) / GiB) for s in samples if getattr(s, name) is not None]
        if points:
            xs, ys = zip(*points, strict=True)
            ax.plot(xs, ys, label=label, color=colour, linewidth=1.4, drawstyle="steps-post")
    for k, node in enumerate(nodes):
        end = node.finished if node.finished is not None else node.started
        ax.axvspan(node.started - t0, end - t0, color="#90a4ae" if k % 2 else "#cfd8dc", alpha=0.35, lw=0)
        p = planned.node(node.node_id) if planned else None
        if p is not None and p.vram_peak:
            ax.hlines(p.vram_peak / GiB, node.started - t0, end - t0, colors="#6a1b9a", linestyles="dashed")
        ax.text(
            node.started - t0, 0, f" #{node.node_id}", fontsize=7, rotation=90, va="bottom", color="#37474f"
        )
    if planned is not None and planned.budget_vram:
        ax.axhline(
            planned.budget_vram / GiB, color="#b71c1c", linestyle=":", linewidth=1, label="VRAM budget"
        )
    ax.set_xlabel("seconds")
    ax.set_ylabel("GiB")
    ax.set_ylim(bottom=0)
    ax.set_title("Headroom memory timeline (dashed: planned VRAM peak per node)", fontsize=9)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    canvas.draw()
    rgba = np.asarray(canvas.buffer_rgba(), dtype=np.float32)
    return rgba[..., :3] / 255.0
