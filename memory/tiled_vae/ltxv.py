"""Exact tiled decode for the LTXV video VAE: LTX-Video 0.9.x and LTX-2 / 2.3 (128 latent channels), the
host's ``CausalVideoAutoencoder`` / ``VideoVAE`` on every host, the 0.18+ core's chunked one included (its
modules' per-thread causal caches are reset around each call: ``_Stateless``).

LTXV's decoder (``decoder.conv_in``, ``up_blocks``, ``conv_norm_out``, ``conv_out``; duck-typed, never
imported) has no attention and no GroupNorm in the configurations the host ships: its norms are
PixelNorm or a per-pixel LayerNorm, its timestep conditioning is one scale/shift per channel, and its
upsamplers are depth-to-space. Every layer is therefore local in space, so:

* the head (the latent noise mix, un-normalisation, ``conv_in`` and the timestep embeddings) runs once
  on the whole latent, where it is cheap;
* the rest is cut into stages at its norms (two per residual block, one per depth-to-space upsampler,
  the output head), each run tile by tile (and, when the budget needs it, run of frames by run of
  frames), each crop grown by the stage's receptive field in space and in time read from its
  convolutions (both sides in time: the decoder pads time with its first and last frames unless it
  is causal) and cropped back (no blending) into a park for the next stage;
* a PixelNorm is per pixel, but torch's channel mean rounds differently with the tensor's extent (its
  CPU sum kernel groups columns by 32 and by thread), so on the CPU each PixelNorm's mean is taken over
  the whole parked activation, as the full decode takes it, and a tile divides by its crop of it;
* the noise the host injects (LTXV 0.9.1: ``torch.randn`` of the whole frame in each residual block,
  and ``randn_like`` of the latent) is drawn up front, in the host's order and shapes from the same
  generator, and each tile adds its crop of it. In float32 on the CPU the result is the full decode's
  up to the convolution kernel's rounding for another tile shape (see the package docstring).
"""

from __future__ import annotations

import inspect
import math
import threading
from collections.abc import Callable
from dataclasses import replace
from types import EllipsisType
from typing import cast

import torch
from einops import rearrange
from torch import nn

from .layout import StageGeometry, TileLayout, run_with_oom_retry
from .ltxv_stages import (
    ChannelStats,
    DepthToSpace,
    PixelNormLike,
    Plan,
    Resnet,
    Spec,
    causal_time_reach,
    check_conv,
    check_norm,
    d2s_stride,
    module_name,
    resnet_plan,
    stage_values,
)
from .parks import ParkAllocator, live_bytes
from .runtime import DecodeOptions, DecodeReport, Progress
from .tiles import (
    Unsupported,
    chunks,
    crop_area,
    min_crop_frames,
    tiles_of,
)

HEAD_VALUES_PER_PX = 6.0  # per latent voxel x conv_in output channels (noise mix + conv_in)


class _Stateless:
    """Runs a host module of the 0.18 core's LTXV decoder as one whole call: its causal convolutions
    and depth-to-space blocks keep per-thread state between calls (``temporal_cache_state``: the frames
    carried to the next time chunk, whether the first frame was dropped), which the host's own decode
    sets up and clears around its chunk loop. Before a call each convolution is marked as at the clip's
    end with nothing carried in (it pads time on both sides, as the earlier hosts' stateless forward
    does) and every other state is cleared; after it the state this thread left is removed. Nothing to
    do on hosts whose modules keep no state."""

    def __init__(self, module: Resnet | DepthToSpace | nn.Module) -> None:
        self.stateful: list[tuple[dict[int, object], bool]] = []
        for m in module.modules():
            state = getattr(m, "temporal_cache_state", None)
            if isinstance(state, dict):
                self.stateful.append((state, module_name(m) == "CausalConv3d"))

    def __enter__(self) -> None:
        tid = threading.get_ident()
        for state, conv in self.stateful:
            if conv:
                state[tid] = (None, True)
            else:
                state.pop(tid, None)

    def __exit__(self, *exc: object) -> None:
        tid = threading.get_ident()
        for state, _ in self.stateful:
            state.pop(tid, None)


def whole_mean(norm: nn.Module | None, x: torch.Tensor) -> torch.Tensor | None:
    """PixelNorm's channel mean of squares over a whole activation, as the host's forward computes it."""
    if norm is None or module_name(norm) != "PixelNorm":
        return None
    return torch.mean(x**2, dim=cast(PixelNormLike, norm).dim, keepdim=True)


def apply_norm(norm: nn.Module | None, x: torch.Tensor, mean: torch.Tensor | None) -> torch.Tensor:
    """The stage's norm on a tile: PixelNorm with the whole activation's mean (its crop) when given,
    else the host's own module (LayerNorm and the rest are per pixel with no cross-row reduction)."""
    if norm is None:
        return x
    if mean is None:
        y: torch.Tensor = norm(x)
        return y
    return x / torch.sqrt(mean + cast(PixelNormLike, norm).eps)


class LTXVTiledDecoder:
    """Decode ``[B, 128, T, H, W]`` LTXV latents: whole-latent head, then every block in tiles."""

    family = "ltxv"

    def __init__(self, model: nn.Module, options: DecodeOptions) -> None:
        dec = getattr(model, "decoder", None)
        names = ("conv_in", "up_blocks", "conv_norm_out", "conv_act", "conv_out", "patch_size", "causal")
        if dec is None or not all(hasattr(dec, n) for n in names):
            raise Unsupported("not an LTXV decoder")
        if not hasattr(model, "per_channel_statistics"):
            raise Unsupported("not an LTXV VAE")
        decode = getattr(model, "decode", None)
        if not callable(decode):
            raise Unsupported("an LTXV VAE without decode()")
        params = inspect.signature(decode).parameters
        if "timestep" in params and "noise_scale" in params:
            # The defaults the host's VAE.decode uses (it passes no options for video VAEs).
            self.timestep = params["timestep"].default
            self.noise_scale = params["noise_scale"].default
        elif hasattr(model, "decode_timestep") and hasattr(model, "decode_noise_scale"):
            # The 0.18 core (LTX-2 and later): the VAE's own attributes, read by its decode().
            self.timestep = model.decode_timestep
            self.noise_scale = model.decode_noise_scale
        else:
            raise Unsupported("LTXV decode() without a timestep and noise scale")
        self.model, self.decoder, self.options = model, dec, options
        check_conv(dec.conv_in)
        self.patch = int(dec.patch_size)
        self.plan = self._plan()
        self.strips = options.strips(video=True)

    def _plan(self) -> list[Plan]:
        """Every stage in the host's order, with its halo read from its convolutions."""
        dec = self.decoder
        causal = bool(dec.causal)
        plan: list[Plan] = []
        channels = dec.conv_in.out_channels
        for i, block in enumerate(dec.up_blocks):
            kind = module_name(block)
            if kind == "UNetMidBlock3D":
                for j, resnet in enumerate(block.res_blocks):
                    plan += resnet_plan(f"up{i}.res{j}", resnet, causal)
            elif kind == "ResnetBlock3D":
                plan += resnet_plan(f"up{i}", block, causal)
                channels = block.out_channels
            elif kind == "DepthToSpaceUpsample":
                t, s = d2s_stride(block)
                plan.append(
                    Plan(
                        f"up{i}.d2s",
                        "d2s",
                        block,
                        ("x",),
                        "x",
                        None,
                        check_conv(block.conv),
                        s,
                        t == 2,
                        channels,
                        causal_time_reach(block.conv, causal),
                    )
                )
                channels = block.out_channels // (s * s * t)
            else:
                raise Unsupported(f"{kind} in the LTXV decoder")
        out = check_norm(dec.conv_norm_out)
        plan.append(
            Plan(
                "out",
                "out",
                dec,
                ("x",),
                "image",
                out,
                check_conv(dec.conv_out),
                self.patch,
                False,
                channels,
                causal_time_reach(dec.conv_out, causal),
            )
        )
        return plan

    # -- sizing -----------------------------------------------------------------------------------
    def _specs(self, latent_shape: tuple[int, ...]) -> list[Spec]:
        """Each stage's live values per input voxel, input frames and resolution, in order."""
        frames, scale, specs = latent_shape[2], 1, []
        for p in self.plan:
            specs.append(Spec(stage_values(p), frames, scale))
            if p.kind == "d2s":
                frames, scale = (2 * frames - 1 if p.time_up else frames), scale * p.scale
        return specs

    def geometry(self, plan: Plan, spec: Spec, latent_shape: tuple[int, ...]) -> StageGeometry:
        height, width = latent_shape[-2] * spec.scale, latent_shape[-1] * spec.scale
        # On the CPU a crop keeps enough frames to take the full decode's convolution kernel.
        min_frames = min_crop_frames(plan.conv_channels, height, spec.frames) if self.strips else 1
        return StageGeometry(height, width, spec.frames, plan.halo, plan.time_halo, self.strips, min_frames)

    def _estimator(
        self, spec: Spec, geo: StageGeometry, batch: int, dtype_bytes: int
    ) -> Callable[[int, int], int]:
        def estimate(tile: int, crop_frames: int) -> int:
            area = crop_area(tile, geo.halo, geo.height, geo.width, geo.strips)
            return int(spec.values * crop_frames * batch * area * dtype_bytes)

        return estimate

    def layouts(
        self, latent_shape: tuple[int, ...], dtype_bytes: int, smallest: bool = False
    ) -> list[tuple[StageGeometry, Callable[[int, int], int], TileLayout]]:
        """Per stage: (geometry, estimator, layout): the chosen layout, or the smallest one."""
        specs = self._specs(latent_shape)
        total = specs[-1].scale * self.patch
        rows = []
        for plan, spec in zip(self.plan, specs, strict=True):
            geo = self.geometry(plan, spec, latent_shape)
            estimate = self._estimator(spec, geo, latent_shape[0], dtype_bytes)
            if smallest:
                layout = geo.smallest()
            else:
                forced = None if self.options.tile is None else self.options.tile * spec.scale // total
                layout = geo.choose(self.options, forced, estimate)
            rows.append((geo, estimate, layout))
        return rows

    def head_bytes(self, latent_shape: tuple[int, ...], dtype_bytes: int) -> int:
        voxels = latent_shape[0] * math.prod(latent_shape[2:])
        channels: int = self.decoder.conv_in.out_channels
        return int(HEAD_VALUES_PER_PX * channels * voxels * dtype_bytes)

    def predicted_peak(self, latent_shape: tuple[int, ...], dtype_bytes: int, smallest: bool = False) -> int:
        tiles = [
            geo.peak(layout, est) for geo, est, layout in self.layouts(latent_shape, dtype_bytes, smallest)
        ]
        return max([self.head_bytes(latent_shape, dtype_bytes), *tiles])

    def minimum_peak(self, latent_shape: tuple[int, ...], dtype_bytes: int) -> int:
        return self.predicted_peak(latent_shape, dtype_bytes, smallest=True)

    # -- running ----------------------------------------------------------------------------------
    def decode(self, latent: torch.Tensor) -> tuple[torch.Tensor, DecodeReport]:
        """The decoder output (before the host's process_output), float32 on the park device."""
        if latent.shape[0] > 1 and self.model.timestep_conditioning:
            return self._decode_clips(latent)
        opts = self.options
        report = DecodeReport(self.family)
        dtype_bytes = torch.empty((), dtype=opts.dtype).element_size()
        shape = tuple(latent.shape)
        layouts = self.layouts(shape, dtype_bytes)
        progress = Progress(1 + sum(geo.count(layout) for geo, _, layout in layouts), opts.progress)
        report.predicted_peak_bytes = self.predicted_peak(shape, dtype_bytes)
        whole = opts.stats_mode() == "kernel"  # PixelNorm means from the whole activation (exact)
        with torch.no_grad(), ParkAllocator(opts, report) as parker:
            sample, bodies = self._head(latent.to(opts.device, opts.dtype))
            parks = {"x": sample}
            progress.step()
            for plan, body, (geo, _, layout) in zip(self.plan, bodies, layouts, strict=True):
                mean = whole_mean(plan.norm, parks[plan.inputs[0]]) if whole else None
                result: dict[str, torch.Tensor] = {}

                def attempt(
                    layout: TileLayout,
                    plan: Plan = plan,
                    body: Callable[..., torch.Tensor] = body,
                    mean: torch.Tensor | None = mean,
                    result: dict[str, torch.Tensor] = result,
                ) -> None:
                    result["park"] = self._run_stage(plan, body, parks, mean, layout, progress, parker)

                geo.record(report, plan.name, run_with_oom_retry(attempt, layout, opts, report))
                if plan.output != "t":  # the block is done with its inputs
                    for name in plan.inputs:
                        parks.pop(name, None)
                parks[plan.output] = result.pop("park")
                del mean
        return parks["image"].float(), report

    def _decode_clips(self, latent: torch.Tensor) -> tuple[torch.Tensor, DecodeReport]:
        """A batch one clip at a time. The host builds LTXV's timestep embedding for one clip, so its own
        decode of a batch fails (a view to the batch size in causal_video_autoencoder) unless its
        memory estimate has it decode clip by clip, as this does; the noise is drawn clip after clip."""
        batch, outer = latent.shape[0], self.options.progress
        report, outputs = DecodeReport(self.family), []
        for b in range(batch):

            def progress(done: int, total: int, b: int = b) -> None:
                if outer is not None:
                    outer(b * total + done, batch * total)

            out, part = LTXVTiledDecoder(self.model, replace(self.options, progress=progress)).decode(
                latent[b : b + 1]
            )
            outputs.append(out)
            report.stages += part.stages
            report.chunks.update(part.chunks)
            report.oom_retries += part.oom_retries
            report.parks_on_disk += part.parks_on_disk
            report.park_disk_bytes += part.park_disk_bytes
            report.predicted_peak_bytes = max(report.predicted_peak_bytes, part.predicted_peak_bytes)
        return torch.cat(outputs), report

    def _head(self, x: torch.Tensor) -> tuple[torch.Tensor, list[Callable[..., torch.Tensor]]]:
        """The host's decode() up to conv_in, then each stage's body with its timestep modulation and
        noise bound; every random draw happens here, in the host's order and shapes."""
        model, dec = self.model, self.decoder
        if model.timestep_conditioning:
            x = torch.randn_like(x) * self.noise_scale + (1.0 - self.noise_scale) * x
        x = cast(ChannelStats, model.per_channel_statistics).un_normalize(x)
        batch = x.shape[0]
        with _Stateless(dec.conv_in):
            sample = dec.conv_in(x, causal=dec.causal)
        dtype, device = sample.dtype, sample.device
        scaled = None
        if dec.timestep_conditioning:
            scaled = self.timestep * dec.timestep_scale_multiplier.to(dtype=dtype, device=device)

        def embed(embedder: nn.Module) -> torch.Tensor:
            assert scaled is not None  # the decoder is timestep-conditioned
            emb: torch.Tensor = embedder(
                timestep=scaled.flatten(),
                resolution=None,
                aspect_ratio=None,
                batch_size=batch,
                hidden_dtype=dtype,
            )
            return emb.view(batch, emb.shape[-1], 1, 1, 1)

        height, width = sample.shape[-2:]
        bodies: list[Callable[..., torch.Tensor]] = []
        for block in dec.up_blocks:
            kind = module_name(block)
            if kind == "UNetMidBlock3D":
                temb = embed(block.time_embedder) if block.timestep_conditioning else None
                for resnet in block.res_blocks:
                    bodies += self._resnet_bodies(resnet, temb, (height, width), dtype, device)
            elif kind == "ResnetBlock3D":  # a channel-changing block: the host passes no timestep
                bodies += self._resnet_bodies(block, None, (height, width), dtype, device)
            else:
                bodies.append(self._d2s_body(block))
                scale = d2s_stride(block)[1]
                height, width = height * scale, width * scale
        modulation = None
        if dec.timestep_conditioning:
            emb = embed(dec.last_time_embedder)
            table = dec.last_scale_shift_table[None, ..., None, None, None].to(device=device, dtype=dtype)
            ada = table + emb.reshape(batch, 2, -1, emb.shape[-3], emb.shape[-2], emb.shape[-1])
            modulation = ada.unbind(dim=1)  # shift, scale
        bodies.append(self._out_body(modulation))
        return sample.to(self.options.park_device), bodies

    def _resnet_bodies(
        self,
        block: Resnet,
        temb: torch.Tensor | None,
        hw: tuple[int, int],
        dtype: torch.dtype,
        device: torch.device,
    ) -> list[Callable[..., torch.Tensor]]:
        """ResnetBlock3D.forward, op for op, split at norm2; the frame noise is drawn now (the host
        draws two ``torch.randn(frame)`` per noise-injecting block, in this order) and cropped per tile."""
        causal = self.decoder.causal
        fresh = _Stateless(block)
        ada = None
        if block.timestep_conditioning:
            assert temb is not None  # the mid block's embedding, which conditions its blocks
            batch = temb.shape[0]
            table = block.scale_shift_table[None, ..., None, None, None].to(device=device, dtype=dtype)
            ada = (table + temb.reshape(batch, 4, -1, temb.shape[-3], temb.shape[-2], temb.shape[-1])).unbind(
                dim=1
            )
        noise = None
        if getattr(block, "inject_noise", False):
            first = torch.randn(hw, device=device, dtype=dtype)
            second = torch.randn(hw, device=device, dtype=dtype)
            noise = (first.to(self.options.park_device), second.to(self.options.park_device))

        def first_half(h: torch.Tensor, c: tuple[int, int, int, int]) -> torch.Tensor:
            if ada is not None:
                h = h * (1 + ada[1]) + ada[0]
            h = block.non_linearity(h)
            with fresh:
                h = block.conv1(h, causal=causal)
            if noise is not None:
                h = h + _scaled(noise[0][None, c[0] : c[1], c[2] : c[3]], block.per_channel_scale1, h)
            return h

        def second_half(h: torch.Tensor, x: torch.Tensor, c: tuple[int, int, int, int]) -> torch.Tensor:
            if ada is not None:
                h = h * (1 + ada[3]) + ada[2]
            h = block.non_linearity(h)
            h = block.dropout(h)
            with fresh:
                h = block.conv2(h, causal=causal)
            if noise is not None:
                h = h + _scaled(noise[1][None, c[0] : c[1], c[2] : c[3]], block.per_channel_scale2, h)
            with fresh:
                shortcut: torch.Tensor = block.conv_shortcut(block.norm3(x))
            return shortcut + h

        return [first_half, second_half]

    def _d2s_body(self, block: DepthToSpace) -> Callable[..., torch.Tensor]:
        causal, fresh = self.decoder.causal, _Stateless(block)

        def body(h: torch.Tensor, c: tuple[int, int, int, int]) -> torch.Tensor:
            with fresh:
                return block(h, causal=causal)  # the host's own forward: no norm, nothing global

        return body

    def _out_body(self, modulation: tuple[torch.Tensor, ...] | None) -> Callable[..., torch.Tensor]:
        """After conv_norm_out: the last timestep modulation, conv_act, conv_out and the unpatchify."""
        dec, patch = self.decoder, self.patch
        fresh = _Stateless(dec.conv_out)

        def body(h: torch.Tensor, c: tuple[int, int, int, int]) -> torch.Tensor:
            if modulation is not None:
                shift, scale = modulation
                h = h * (1 + scale) + shift
            h = dec.conv_act(h)
            with fresh:
                h = dec.conv_out(h, causal=dec.causal)
            if patch == 1:
                return h
            out: torch.Tensor = rearrange(
                h, "b (c p r q) f h w -> b c (f p) (h q) (w r)", p=1, q=patch, r=patch
            )
            return out

        return body

    def _run_stage(
        self,
        plan: Plan,
        body: Callable[..., torch.Tensor],
        parks: dict[str, torch.Tensor],
        mean: torch.Tensor | None,
        layout: TileLayout,
        progress: Progress,
        parker: ParkAllocator,
    ) -> torch.Tensor:
        opts = self.options
        src = parks[plan.inputs[0]]
        frames, height, width = src.shape[-3:]
        s = plan.scale
        out: torch.Tensor | None = None
        for cut in chunks(frames, layout.frames, plan.time_halo):
            o0, o1, j = cut.output(plan.time_up)
            for t in tiles_of(height, width, layout.tile, self.strips):
                if opts.check_interrupt is not None:
                    opts.check_interrupt()
                c = t.crop(plan.halo, height, width)
                window = (slice(cut.c0, cut.c1), slice(c.y0, c.y1), slice(c.x0, c.x1))
                # Contiguous crops: torch's CPU elementwise kernels take a scalar path at the end of each
                # row of a strided view, which rounds transcendental ops (SiLU) differently.
                index: tuple[EllipsisType | slice, ...] = (Ellipsis, *window)
                crops = [parks[k][index].to(opts.device).contiguous() for k in plan.inputs]
                m = mean[index].to(opts.device).contiguous() if mean is not None else None
                h = apply_norm(plan.norm, crops[0], m)
                y = body(h, *crops[1:], (c.y0, c.y1, c.x0, c.x1))
                del h, crops, m
                core = y[
                    ...,
                    j : j + o1 - o0,
                    (t.y0 - c.y0) * s : (t.y1 - c.y0) * s,
                    (t.x0 - c.x0) * s : (t.x1 - c.x0) * s,
                ]
                if out is None:
                    dtype = torch.float32 if plan.output == "image" else y.dtype
                    out_frames = 2 * frames - 1 if plan.time_up else frames
                    shape = (*y.shape[:2], out_frames, height * s, width * s)
                    out = parker.empty(shape, dtype, live_bytes(parks), final=plan.output == "image")
                out[..., o0:o1, t.y0 * s : t.y1 * s, t.x0 * s : t.x1 * s].copy_(core, non_blocking=True)
                del y, core
                progress.step()
        if torch.device(opts.device).type == "cuda":
            torch.cuda.synchronize(opts.device)  # the non-blocking copies into the park must land
        assert out is not None  # every stage has at least one tile
        return out


def _scaled(noise: torch.Tensor, per_channel: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """The host's ``(spatial_noise * per_channel_scale)[None, :, None, ...]`` for a crop of the noise."""
    noise = noise.to(like.device)
    return (noise * per_channel.to(device=like.device, dtype=like.dtype))[None, :, None, ...]
