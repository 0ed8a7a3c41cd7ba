"""A stand-in for the host's low-VRAM layers (comfy.ops' cast_bias_weight): weights kept on the CPU and
cast to the input's device inside each forward, bound to a safetensors file's mapping (the disk tier).
Used by tests/gpu/test_read_through_gpu.py and bench/read_through_gpu.py."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

from comfyui_headroom.memory import residency as own_residency


class CastLinear(torch.nn.Linear):
    """A host low-VRAM layer: its weights stay on the CPU and are cast to the input's device per forward."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.weight.to(x.device, x.dtype, non_blocking=True)
        bias = self.bias.to(x.device, x.dtype, non_blocking=True)
        return F.linear(x, weight, bias)


def cast_model(width: int = 256, depth: int = 4, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    torch.manual_seed(0)
    blocks = [CastLinear(width, width, dtype=dtype) for _ in range(depth)]
    return torch.nn.Sequential(*[torch.nn.Sequential(b, torch.nn.GELU()) for b in blocks]).eval()


def mapped_cast_model(
    folder: Path,
    width: int = 256,
    depth: int = 4,
    dtype: torch.dtype = torch.float32,
    residency: ModuleType = own_residency,
) -> tuple[torch.nn.Module, Any]:
    """``cast_model``'s weights saved under ``folder`` and the model bound to the file's mapping, through
    ``residency`` (the pack's ``memory.residency``; a host test passes the copy the host loaded)."""
    model = cast_model(width, depth, dtype)
    path = folder / "m.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    mf = residency.MappedFile(path)
    assert residency.bind(model, [mf]).kept == {}
    return model, mf
