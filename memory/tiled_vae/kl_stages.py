"""The KL decoder's structure, duck-typed (never imported): ``check_decoder`` reads a host decoder's
layers and refuses one it does not know; ``build_stages`` cuts it into the stages ``kl.KLTiledDecoder``
runs tile by tile, each starting at a GroupNorm, with the receptive field each reaches (see ``kl``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, cast

import torch
from torch import nn

from .tiles import Unsupported, add_reach, carried_conv, conv_radius, max_reach, time_reach, upsampled_need


class _Resnet(Protocol):
    """The host's ResnetBlock as ``check_decoder`` checked it (a shortcut where the channels change)."""

    in_channels: int
    out_channels: int
    norm1: nn.GroupNorm
    conv1: nn.Module
    norm2: nn.GroupNorm
    conv2: nn.Module
    conv_shortcut: nn.Module
    nin_shortcut: nn.Module

    def __call__(self, x: torch.Tensor, temb: None) -> torch.Tensor: ...


class _Conv(Protocol):
    out_channels: int


class _Upsample(Protocol):
    """The host's LDM Upsample (with_conv): interpolate, then ``conv``."""

    conv: nn.Module

    def __call__(self, x: torch.Tensor) -> torch.Tensor: ...


class _Level(Protocol):
    block: Sequence[_Resnet]


class _Mid(Protocol):
    block_1: _Resnet
    attn_1: nn.Module
    block_2: _Resnet


class KLDecoder(Protocol):
    """The host's LDM KL decoder (``comfy.ldm.modules.diffusionmodules.model.Decoder``), duck-typed."""

    conv_in: nn.Module
    mid: _Mid
    up: Sequence[_Level]
    norm_out: nn.GroupNorm
    conv_out: nn.Module
    num_resolutions: int


@dataclass
class Stage:
    """One GroupNorm-to-GroupNorm segment of the up path."""

    name: str
    norm: nn.GroupNorm  # applied to the first input
    inputs: tuple[str, ...]  # park names: (normalised input, *other inputs)
    output: str
    body: Callable[..., torch.Tensor]  # (normalised first input, *other inputs) -> output
    halo: int  # stage-input pixels each tile reads beyond its core
    scale: int  # output pixels per input pixel (2 after an upsample)
    level: int  # input resolution = latent resolution * 2**level
    time_level: int  # time upsamples before this stage (video: T latent frames -> 2T - 1 each)
    time_up: bool  # this stage's upsample also doubles time (HunyuanVideo's first levels)
    in_channels: tuple[int, ...]
    out_channels: int
    work_channels: int  # values per input pixel the body holds at its peak, inputs excluded
    # Video (3D) convolutions pad a copy of their input (replicate, causal in time): the channels per
    # input pixel of the largest such copy (the upsampled sum in an upsampling stage). 0 for images.
    pad_channels: int = 0
    time_halo: tuple[int, int] = (0, 0)  # stage-input frames each chunk reads before and after its core

    def frames(self, latent_frames: int) -> int:
        """Frames of this stage's input for a clip of ``latent_frames`` (1 for images)."""
        frames = latent_frames
        for _ in range(self.time_level):
            frames = 2 * frames - 1
        return frames


def _name(module: object) -> str:
    return type(module).__name__


def _is_groupnorm(module: object) -> bool:
    return isinstance(module, nn.GroupNorm)


def _time_up(upsample: object, video: bool) -> bool:
    """Whether the host's Upsample doubles time too: a scalar factor on a video, or (2, 2, 2)."""
    factor = getattr(upsample, "scale_factor", 2.0)
    if isinstance(factor, (tuple, list)):
        return len(factor) == 3 and float(factor[0]) > 1
    return video and float(factor) > 1


def _spatial_scale(upsample: object) -> int:
    factor = getattr(upsample, "scale_factor", 2.0)
    factors = factor if isinstance(factor, (tuple, list)) else (factor, factor)
    hw = {float(f) for f in factors[-2:]}
    if len(hw) != 1 or not float(next(iter(hw))).is_integer():
        raise Unsupported(f"upsample factor {factor}")
    return int(next(iter(hw)))


def _check_resnet(block: nn.Module) -> None:
    for name in ("norm1", "conv1", "norm2", "conv2"):
        if not hasattr(block, name):
            raise Unsupported(f"{type(block).__name__} is not a ResnetBlock (no {name})")
    if not (_is_groupnorm(block.norm1) and _is_groupnorm(block.norm2)):
        raise Unsupported("ResnetBlock norms are not GroupNorm")
    if any(hasattr(block, name) for name in ("time_stack", "time_mixer", "temb_proj")):
        raise Unsupported(f"{type(block).__name__} mixes time or a timestep embedding")


def _shortcut(block: _Resnet) -> nn.Module | None:
    if block.in_channels == block.out_channels:
        return None
    return block.conv_shortcut if getattr(block, "use_conv_shortcut", False) else block.nin_shortcut


def _swish(
    block: _Resnet, act: Callable[[torch.Tensor], torch.Tensor]
) -> Callable[[torch.Tensor], torch.Tensor]:
    swish: Callable[[torch.Tensor], torch.Tensor] = getattr(block, "swish", act)
    return swish


def _out_channels(conv: nn.Module) -> int:
    """A convolution's output channels, through the 0.18+ core's CarriedConv3d wrapper (``.conv``)."""
    return cast(_Conv, getattr(conv, "conv", conv)).out_channels


def check_decoder(model: nn.Module) -> KLDecoder:
    """The model's KL decoder, or Unsupported saying why this engine cannot tile it exactly."""
    decoder = getattr(model, "decoder", None)
    if decoder is None or getattr(model, "max_batch_size", None) is not None:
        raise Unsupported("no plain decoder")
    for name in ("conv_in", "mid", "up", "norm_out", "conv_out", "num_resolutions"):
        if not hasattr(decoder, name):
            raise Unsupported(f"decoder has no {name}")
    # The same attribute names, other maths: HunyuanImage 2.1's and HunyuanVideo 1.5's decoders add a
    # channel-repeated latent to conv_in's output and upsample by pixel shuffle, in another order.
    if hasattr(decoder, "block_out_channels") or len(decoder.up) != decoder.num_resolutions:
        raise Unsupported(f"{type(decoder).__module__}.{type(decoder).__name__} is not the LDM KL decoder")
    for i_level, level in enumerate(decoder.up):
        upsample = getattr(level, "upsample", None)
        if i_level != 0 and (_name(upsample) != "Upsample" or not getattr(upsample, "with_conv", False)):
            raise Unsupported(f"up[{i_level}] upsamples with {_name(upsample)}, not an LDM Upsample")
    if getattr(decoder, "give_pre_end", False):
        raise Unsupported("decoder returns its pre-output features")
    if not _is_groupnorm(decoder.norm_out):
        raise Unsupported("norm_out is not a GroupNorm")
    for level in decoder.up:
        if len(getattr(level, "attn", ())) > 0:
            raise Unsupported("attention in the up path reaches across tiles")
        for block in level.block:
            _check_resnet(block)
    return cast(KLDecoder, decoder)


def build_stages(decoder: KLDecoder, act: Callable[[torch.Tensor], torch.Tensor]) -> list[Stage]:
    """The up path and output head as GroupNorm-delimited stages, with halos from the layers."""
    stages: list[Stage] = []
    level = 0  # resolution doubling count so far
    time_level = 0
    video = not isinstance(decoder.conv_in, nn.Conv2d)
    levels = list(reversed(range(len(decoder.up))))
    for i_level in levels:
        up = decoder.up[i_level]
        blocks = list(up.block)
        upsample: _Upsample | None = getattr(up, "upsample", None) if i_level != 0 else None
        for j, block in enumerate(blocks):
            swish = _swish(block, act)
            last = j == len(blocks) - 1
            short = _shortcut(block)
            up_here = upsample if last else None
            scale = _spatial_scale(up_here) if up_here is not None else 1
            time_up = up_here is not None and _time_up(up_here, video)
            name = f"up{i_level}.block{j}"

            def body_a(
                h: torch.Tensor, block: _Resnet = block, swish: Callable[[torch.Tensor], torch.Tensor] = swish
            ) -> torch.Tensor:
                return carried_conv(block.conv1)(swish(h))

            def body_b(
                h: torch.Tensor,
                x: torch.Tensor,
                block: _Resnet = block,
                swish: Callable[[torch.Tensor], torch.Tensor] = swish,
                short: nn.Module | None = short,
                up_here: _Upsample | None = up_here,
            ) -> torch.Tensor:
                h = carried_conv(block.conv2)(swish(h))  # dropout is the identity in eval
                if short is not None:
                    x = carried_conv(short)(x)
                y = x + h
                del x, h
                return up_here(y) if up_here is not None else y

            cin, cout = block.in_channels, block.out_channels
            stages.append(
                Stage(
                    name + ".a",
                    block.norm1,
                    ("x",),
                    "t",
                    body_a,
                    conv_radius(block.conv1),
                    1,
                    level,
                    time_level,
                    False,
                    (cin,),
                    cout,
                    cin + cout,  # normalised input, conv1 output
                    cin if video else 0,
                    time_reach(block.conv1),
                )  # fmt: skip
            )
            need = upsampled_need(conv_radius(up_here.conv), scale) if up_here is not None else 0
            reach = max(conv_radius(block.conv2), conv_radius(short) if short is not None else 0)
            time_halo = max_reach(time_reach(block.conv2), time_reach(short) if short is not None else (0, 0))
            if up_here is not None:
                up_reach = time_reach(up_here.conv)
                step = 2 if time_up else 1
                time_halo = add_reach(
                    time_halo, (upsampled_need(up_reach[0], step), upsampled_need(up_reach[1], step))
                )
            stages.append(
                Stage(
                    name + ".b",
                    block.norm2,
                    ("t", "x"),
                    "x",
                    body_b,
                    reach + need,
                    scale,
                    level,
                    time_level,
                    time_up,
                    (cout, cin),
                    cout,
                    # normalised t, conv2 output, shortcut, sum; then the sum, upsampled, convolved
                    max(cout * (3 + (short is not None)), cout * (1 + 2 * scale * scale * (1 + time_up))),
                    (cout * scale * scale * (1 + time_up) if up_here is not None else cout) if video else 0,
                    time_halo,
                )  # fmt: skip
            )
            if up_here is not None:
                level += 1 if scale == 2 else 0
                time_level += time_up

    def body_out(h: torch.Tensor) -> torch.Tensor:
        y = carried_conv(decoder.conv_out)(act(h))
        return torch.tanh(y) if getattr(decoder, "tanh_out", False) else y

    cout_last = _out_channels(decoder.conv_out)
    channels = decoder.norm_out.num_channels
    stages.append(
        Stage(
            "out",
            decoder.norm_out,
            ("x",),
            "image",
            body_out,
            conv_radius(decoder.conv_out),
            1,
            level,
            time_level,
            False,
            (channels,),
            cout_last,
            2 * channels + cout_last,  # normalised, activated, output
            channels if video else 0,
            time_reach(decoder.conv_out),
        )  # fmt: skip
    )
    return stages
