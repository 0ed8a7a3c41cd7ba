"""Outputs of the host's utility nodes that size a workflow, computed as the host computes them.

Each entry takes the node's input values (exact) and returns its outputs, or None when the inputs are
not what the host's node accepts (the caller then treats the output as unknown). Mirrors ComfyUI 0.33.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

# ResolutionSelector's ratios (comfy_extras/nodes_resolution.py).
ASPECT_RATIOS = {
    "1:1 (Square)": (1, 1), "2:3 (Portrait Photo)": (2, 3), "3:2 (Photo)": (3, 2),
    "3:4 (Portrait Standard)": (3, 4), "4:3 (Standard)": (4, 3), "9:16 (Portrait Widescreen)": (9, 16),
    "16:9 (Widescreen)": (16, 9), "21:9 (Ultrawide)": (21, 9),
}  # fmt: skip


def resolution_selector(inputs: dict[str, Any]) -> tuple[int, int] | None:
    """ResolutionSelector.execute: width and height from an aspect ratio and a megapixel target."""
    ratio = ASPECT_RATIOS.get(inputs.get("aspect_ratio", "1:1 (Square)"))
    megapixels, multiple = inputs.get("megapixels", 1.0), inputs.get("multiple", 8)
    if ratio is None or isinstance(megapixels, bool) or not isinstance(megapixels, (int, float)):
        return None
    if isinstance(multiple, bool) or not isinstance(multiple, int) or multiple < 1:
        return None
    if not 0 < megapixels <= 16:  # the node's own range
        return None
    scale = math.sqrt(megapixels * 1024 * 1024 / (ratio[0] * ratio[1]))
    return round(ratio[0] * scale / multiple) * multiple, round(ratio[1] * scale / multiple) * multiple


def number_convert(inputs: dict[str, Any]) -> tuple[float, int] | None:
    """ComfyNumberConvert.execute (comfy_extras/nodes_number_convert.py): FLOAT and INT outputs."""
    value = inputs.get("value")
    if isinstance(value, bool):
        return (1.0, 1) if value else (0.0, 0)
    if isinstance(value, int):
        return float(value), value
    if isinstance(value, float):
        return (value, int(value)) if math.isfinite(value) else None
    if isinstance(value, str):
        try:
            as_float = float(value.strip())
        except ValueError:
            return None
        if not math.isfinite(as_float):
            return None
        try:
            return as_float, int(value.strip())
        except ValueError:
            return as_float, int(as_float)
    return None


def wan_camera_embedding(inputs: dict[str, Any]) -> tuple[Any, ...] | None:
    """WanCameraEmbedding.execute (comfy_extras/nodes_camera_trajectory.py): the camera embedding, then
    its own width, height and length passed on, which WanCameraImageToVideo takes through links."""
    sizes = [inputs.get(name) for name in ("width", "height", "length")]
    if any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in sizes):
        return None
    return (None, *sizes)


# class_type -> (the inputs it reads, the function of their values)
NODE_OUTPUTS: dict[str, tuple[tuple[str, ...], Callable[[dict[str, Any]], tuple[Any, ...] | None]]] = {
    "ResolutionSelector": (("aspect_ratio", "megapixels", "multiple"), resolution_selector),
    "ComfyNumberConvert": (("value",), number_convert),
    "WanCameraEmbedding": (("width", "height", "length"), wan_camera_embedding),
}
