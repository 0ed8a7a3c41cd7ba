"""Tiled VAE Decode (exact, low VRAM): bounded-VRAM decode, identical to a full decode."""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Any

import torch

from ..memory.names import NODE_IDS
from ..memory.tiled_vae import DecodeOptions, Unsupported, make_tiled_decoder
from ..memory.tiled_vae.budget import (
    GPU_AUTO_SHARE,
    activation_budget,
    cpu_activation_limit,
    largest_clip,
    largest_latent,
    park_ram_allowance,
    too_large_message,
)
from ..memory.tiled_vae.runtime import decode_text, host_decode_text
from ..memory.units import format_bytes
from .common import CATEGORY, node_vram_budget, validate_vram_budget, vram_budget_input
from .host import lookups
from .host import vae as host_vae
from .input_checks import latent_error, latent_problem

if TYPE_CHECKING:
    from .host.host_types import VAE


log = logging.getLogger("headroom")


class HeadroomTiledVAEDecode:
    NODE_ID = NODE_IDS["tiled_vae_decode"]
    DISPLAY_NAME = "Tiled VAE Decode (exact, low VRAM)"
    CATEGORY = f"{CATEGORY}/latent"
    DESCRIPTION = (
        "Decodes images and videos of any size in tiles that fit your VRAM, with the same pixels as a "
        "full decode: no seams, no colour shift, no flicker between video chunks."
    )
    RETURN_TYPES = ("IMAGE",)
    OUTPUT_TOOLTIPS = (
        "The decoded images (video frames one after another), as the stock VAE Decode returns them",
    )
    FUNCTION = "decode"

    @classmethod
    def INPUT_TYPES(cls) -> dict[str, Any]:
        return {
            "required": {
                "samples": (
                    "LATENT",
                    {"tooltip": "The latent to decode: an image or video latent of any size"},
                ),
                "vae": ("VAE", {"tooltip": "The VAE of the model that made the latent"}),
            },
            "optional": {
                "vram_budget": vram_budget_input(),
                "mode": (
                    ["exact", "fast"],
                    {
                        "default": "exact",
                        "tooltip": "exact (default): the same pixels as a full decode; fast: quicker and "
                        "approximate, close to a full decode but not identical",
                    },
                ),
            },
            "hidden": {"unique_id": "UNIQUE_ID"},
        }

    @classmethod
    def VALIDATE_INPUTS(cls, vram_budget: Any = "auto") -> bool | str:
        """A bad vram_budget fails when the prompt is queued, before any node runs."""
        return validate_vram_budget(vram_budget, cls.DISPLAY_NAME)

    def decode(
        self,
        samples: dict[str, Any],
        vae: VAE,
        vram_budget: str = "auto",
        mode: str = "exact",
        unique_id: Any = None,
    ) -> dict[str, object]:
        """The decoded IMAGE, and what the decode did (tiled or whole, what sized its tiles, or why the
        host's own decode ran) as the node's text."""
        budget_bytes = node_vram_budget(vram_budget, self.DISPLAY_NAME)
        budget_gb = None if budget_bytes is None else budget_bytes / (1 << 30)
        if mode not in ("exact", "fast"):
            raise ValueError(f'{self.DISPLAY_NAME}: input mode must be "exact" or "fast", not {mode!r}.')
        latent = self._checked_latent(samples, vae)
        device = torch.device(vae.device)
        options = DecodeOptions(
            device=device,
            dtype=vae.vae_dtype,
            exact=mode == "exact",
            stats="auto" if mode == "exact" else "merge",
            pin=device.type == "cuda",
            park_ram_bytes=park_ram_allowance(),
            act=host_vae.vae_nonlinearity(),
            check_interrupt=host_vae.check_interrupted,
            oom_types=host_vae.vae_oom_errors(),
            on_oom=host_vae.device_empty_cache,
        )
        model = getattr(vae, "first_stage_model", None)
        try:
            if not isinstance(model, torch.nn.Module):
                raise Unsupported("the VAE has no first_stage_model module")
            engine = make_tiled_decoder(model, options)
        except Unsupported as exc:
            log.info("Headroom Tiled VAE Decode: using the host's own decode for this VAE (%s)", exc)
            return {
                "ui": {"text": [host_decode_text(str(exc))]},
                "result": (_stock_layout(vae.decode(latent)),),
            }

        dtype_bytes = torch.empty((), dtype=options.dtype).element_size()
        shape = tuple(latent.shape)
        weights = host_vae.vae_weight_bytes(vae)
        options.budget_bytes = activation_budget(budget_gb, weights, None, on_gpu=False)
        limit, source = self._activation_limit(vae, shape, vram_budget, budget_gb, weights, options)
        # what sizes the tiles, said on the node with the decode's figures (M19)
        sized_by = source if budget_gb is not None else "auto on the CPU: a fixed size per tile"
        minimum = engine.minimum_peak(shape, dtype_bytes)
        if minimum > limit:
            scale = host_vae.vae_output_size(vae, shape)
            largest = largest_latent(shape, lambda s: engine.minimum_peak(s, dtype_bytes), limit)
            frames = largest_clip(shape, lambda s: engine.minimum_peak(s, dtype_bytes), limit)
            clip = None
            if frames is not None:
                out = host_vae.vae_output_size(vae, (*shape[:2], frames, *shape[3:]))
                clip = (frames, out and out[1])
            head = engine.head_bytes(shape, dtype_bytes)
            raise ValueError(
                too_large_message(
                    self.DISPLAY_NAME, shape, minimum, head, limit, source, largest, scale and scale[0], clip
                )
            )
        if budget_gb is None and device.type != "cpu":
            host_vae.vae_load(vae, minimum)  # reserve the least, then give tiles what is really free
            free = host_vae.device_free_bytes(device)
            options.budget_bytes = max(minimum, activation_budget(None, weights, free, on_gpu=True))
            sized_by = f"auto: {GPU_AUTO_SHARE:.0%} of the VRAM free once the VAE is loaded"
            # The plan of the running prompt knows what it keeps loaded at this node: within that too.
            room = host_vae.planned_activation_room(unique_id)
            if room is not None and room < options.budget_bytes:
                options.budget_bytes = max(minimum, room)
                sized_by = "auto: the VRAM the running prompt's plan leaves this node"
                log.info(
                    "Headroom Tiled VAE Decode: tiles sized to the %s the plan leaves this node",
                    format_bytes(room, "GiB"),
                )
        if device.type == "cpu" and limit < options.budget_bytes:
            options.budget_bytes, sized_by = limit, source
        if options.budget_bytes < minimum:
            options.budget_bytes, sized_by = minimum, "the least this decode needs (the smallest tiles)"
        host_vae.vae_load(vae, engine.predicted_peak(shape, dtype_bytes))

        bar: dict[str, Any] = {}

        def progress(done: int, total: int) -> None:
            if "update" not in bar:
                bar["update"] = host_vae.progress_callback(total, unique_id)
            bar["update"](done, total)

        options.progress = progress
        raw, report = engine.decode(latent)
        log.info(
            "Headroom Tiled VAE Decode: %s VAE, %d tiles in %d stages%s, mode %s, predicted peak %.0f MiB%s",
            report.family,
            report.tiles_run,
            len(report.stages),
            f" ({len(report.chunks)} cut in time)" if report.chunks else "",
            mode,
            report.predicted_peak_bytes / (1 << 20),
            f", {report.oom_retries} OOM retries" if report.oom_retries else "",
        )
        if report.parks_on_disk:
            log.info(
                "Headroom Tiled VAE Decode: %d intermediate activations (%.1f GB) went to memory-mapped "
                "files: not enough free RAM to hold them",
                report.parks_on_disk,
                report.park_disk_bytes / (1 << 30),
            )
        images = vae.process_output(raw).movedim(1, -1).to(vae.output_device)
        text = decode_text(report, options.exact, options.budget_bytes, sized_by, tuple(images.shape))
        return {"ui": {"text": [text]}, "result": (_stock_layout(images),)}

    def _activation_limit(
        self,
        vae: VAE,
        shape: tuple[int, ...],
        vram_budget: Any,
        budget_gb: float | None,
        weights: int,
        options: DecodeOptions,
    ) -> tuple[int, str]:
        """The most the decode's activations may take, and what sets it: the budget, the RAM available
        (on a CPU the head and every tile run in RAM, beside the output image) or the GPU's memory."""
        device = options.device
        if budget_gb is not None:
            limit = options.budget_bytes
            source = (
                f"input vram_budget {vram_budget!r} less the VAE's weights ({format_bytes(weights, 'GiB')})"
            )
        else:
            limit, source = None, ""
        if device.type == "cpu":
            size = host_vae.vae_output_size(vae, shape)
            pixels = shape[0] * math.prod(shape[-2:]) * (size[0] ** 2 * size[1] if size else 1)
            ram = cpu_activation_limit(host_vae.device_free_bytes(device), 2 * 3 * 4 * pixels)
            if limit is None or ram < limit:
                limit, source = ram, "the RAM available (less the output image)"
        elif limit is None:
            total = host_vae.device_total_bytes(device)
            limit, source = total - weights, f"this GPU ({total / (1 << 30):.1f} GB, less the VAE's weights)"
        return limit, source

    def _checked_latent(self, samples: Any, vae: VAE) -> torch.Tensor:
        """The latent, refused with what to connect instead when this VAE cannot decode it."""
        latent = samples.get("samples") if isinstance(samples, dict) else None
        if not isinstance(latent, torch.Tensor):
            raise ValueError(f"{self.DISPLAY_NAME}: input samples: not a latent (no samples tensor)")
        channels, dims = lookups.vae_latent_spec(vae)
        problem = latent_problem(latent.shape, channels, dims)
        if problem:
            wanted = f"{channels}-channel " if channels else ""
            fix = (
                f"Connect the VAE of the model that made this latent (this one decodes {wanted}"
                f"{dims + 2}-D latents {'of video' if dims == 3 else 'of images'})."
            )
            raise ValueError(latent_error(self.DISPLAY_NAME, "samples", problem, fix))
        return latent


def _stock_layout(images: torch.Tensor) -> torch.Tensor:
    """As the stock VAEDecode returns it: video frames folded into the batch."""
    if images.ndim == 5:
        images = images.reshape(-1, images.shape[-3], images.shape[-2], images.shape[-1])
    return images


NODE_CLASS = HeadroomTiledVAEDecode
