"""The LTXV decoder's structure, duck-typed (never imported): the host modules it is made of (as
``Protocol``s), and each stage as the structure fixes it (``Plan``): its norm, halo in space and time,
scale and live values per voxel. ``ltxv.LTXVTiledDecoder`` runs the stages (see ``ltxv``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, cast

import torch
from torch import nn

from .tiles import Unsupported, conv_radius, max_reach, time_reach

# Peak live values per input voxel of one tile, per channel of the stage's first input, its crops
# included: measured with measure.PeakLiveBytes on the host's LTXV blocks at 2-5 frames (the causal
# time padding and the convolutions' reflect-padded copies weigh most on short clips), plus a margin;
# tests/host/test_tiled_vae.py checks the estimate against the measurement. A depth-to-space block
# holds its convolution's output (``out_channels``) twice (conv, rearranged) and, when residual, the
# repeated input: see ``stage_values``.
STAGE_VALUES = {"res_a": 11.0, "res_b": 12.0, "out": 8.0}
D2S_VALUES = 6.0  # per input channel, besides the 2 (or 3, residual) copies of the conv's output
LOCAL_NORMS = {"PixelNorm", "LayerNorm", "Identity"}


Layer = Callable[[torch.Tensor], torch.Tensor]


class CausalConv(Protocol):
    """The host's LTXV CausalConv3d: a Conv3d (``conv``) that pads time itself."""

    conv: nn.Conv3d
    time_kernel_size: int

    def __call__(self, x: torch.Tensor, causal: bool = True) -> torch.Tensor: ...


class Resnet(Protocol):
    """The host's ResnetBlock3D (its timestep and noise members only where it has them)."""

    in_channels: int
    out_channels: int
    norm1: nn.Module
    norm2: nn.Module
    norm3: Layer
    conv1: CausalConv
    conv2: CausalConv
    conv_shortcut: nn.Module
    non_linearity: Layer
    dropout: Layer
    timestep_conditioning: bool
    scale_shift_table: torch.Tensor
    per_channel_scale1: torch.Tensor
    per_channel_scale2: torch.Tensor

    def modules(self) -> Any: ...


class DepthToSpace(Protocol):
    """The host's DepthToSpaceUpsample: a causal convolution, then a depth-to-space rearrangement."""

    stride: Sequence[int]
    out_channels: int
    residual: bool
    conv: CausalConv

    def __call__(self, x: torch.Tensor, causal: bool = True) -> torch.Tensor: ...
    def modules(self) -> Any: ...


class ChannelStats(Protocol):  # the VAE's per_channel_statistics
    def un_normalize(self, x: torch.Tensor) -> torch.Tensor: ...


class PixelNormLike(Protocol):
    dim: int
    eps: float


def module_name(module: object) -> str:
    return type(module).__name__


@dataclass
class Plan:
    """One stage as the decoder's structure fixes it (what runs there is bound in ``_head``)."""

    name: str
    kind: str  # res_a | res_b | d2s | out
    block: object  # a Resnet (res_a, res_b), a DepthToSpace (d2s), the decoder (out)
    inputs: tuple[str, ...]  # park names; the first goes through ``norm``
    output: str
    norm: nn.Module | None
    halo: int  # stage-input pixels each tile reads beyond its core
    scale: int  # output pixels per input pixel
    time_up: bool  # the stage turns T frames into 2T - 1
    channels: int  # channels of the first input
    time_halo: tuple[int, int] = (0, 0)  # stage-input frames a chunk reads before and after its core

    @property
    def conv_channels(self) -> int:
        """The fewest channels any of the stage's convolutions reads (the CPU kernel rule)."""
        if self.kind != "res_b":
            return self.channels
        return min(self.channels, cast(Resnet, self.block).in_channels)


class Spec(NamedTuple):
    values: float  # live values per input voxel of a tile (all channels)
    frames: int
    scale: int  # stage-input resolution / latent resolution


def stage_values(plan: Plan) -> float:
    """Live values per input voxel of a tile of ``plan`` (all channels)."""
    if plan.kind != "d2s":
        return STAGE_VALUES[plan.kind] * plan.channels
    d2s = cast(DepthToSpace, plan.block)
    return (3 if d2s.residual else 2) * d2s.out_channels + D2S_VALUES * plan.channels


def check_conv(module: object) -> int:
    if module_name(module) != "CausalConv3d":
        raise Unsupported(f"{module_name(module)} convolution in the LTXV decoder")
    return conv_radius(cast(nn.Module, module))


def causal_time_reach(module: object, causal: bool) -> tuple[int, int]:
    """Frames before and after an output frame that a CausalConv3d reads: it pads time itself, with
    ``k - 1`` copies of the first frame (causal) or ``(k - 1) / 2`` of the first and last."""
    if module_name(module) != "CausalConv3d":
        return time_reach(cast(nn.Module, module))  # a pointwise shortcut
    causal_conv = cast(CausalConv, module)
    conv = causal_conv.conv
    if conv.stride[0] != 1 or conv.dilation[0] != 1 or causal_conv.time_kernel_size % 2 == 0:
        raise Unsupported("LTXV convolution strided, dilated or even in time")
    span = causal_conv.time_kernel_size - 1
    return (span, 0) if causal else (span // 2, span // 2)


def check_norm(module: object) -> nn.Module:
    if module_name(module) not in LOCAL_NORMS:
        raise Unsupported(f"{module_name(module)} in the LTXV decoder reaches across tiles")
    if module_name(module) == "PixelNorm" and getattr(module, "dim", 1) != 1:
        raise Unsupported("PixelNorm over a dimension other than the channels")
    return cast(nn.Module, module)


def d2s_stride(block: DepthToSpace) -> tuple[int, int]:
    stride = tuple(block.stride)
    if len(stride) != 3 or stride[1] != stride[2] or stride[0] not in (1, 2):
        raise Unsupported(f"depth-to-space stride {stride}")
    return stride[0], stride[1]


def resnet_plan(name: str, block: Resnet, causal: bool) -> list[Plan]:
    short = block.conv_shortcut
    check_norm(block.norm3)
    identity = module_name(short) == "Identity"
    reach = 0 if identity else conv_radius(short)
    cin, cout = block.in_channels, block.out_channels
    norm1, norm2 = check_norm(block.norm1), check_norm(block.norm2)
    halo_b = max(check_conv(block.conv2), reach)
    time_a = causal_time_reach(block.conv1, causal)
    time_b = max_reach(
        causal_time_reach(block.conv2, causal), (0, 0) if identity else causal_time_reach(short, causal)
    )
    return [
        Plan(name + ".a", "res_a", block, ("x",), "t", norm1, check_conv(block.conv1), 1, False, cin, time_a),
        Plan(name + ".b", "res_b", block, ("t", "x"), "x", norm2, halo_b, 1, False, cout, time_b),
    ]
