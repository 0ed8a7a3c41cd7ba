"""Streaming KSampler (VRAM offload): KSampler whose model streams its blocks through VRAM."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..memory.names import NODE_IDS
from ..memory.streaming import BudgetExceeded
from ..memory.units import format_bytes
from .common import CATEGORY, node_vram_budget, streaming_inputs, validate_vram_budget
from .host import lookups, sampling
from .input_checks import conditioning_error, latent_error, latent_problem

if TYPE_CHECKING:
    from .host.host_types import ModelPatcher


class HeadroomStreamingSampler:
    NODE_ID = NODE_IDS["streaming_sampler"]
    DISPLAY_NAME = "Streaming KSampler (VRAM offload)"
    CATEGORY = f"{CATEGORY}/sampling"
    DESCRIPTION = (
        "The stock KSampler, same seed and same result, for diffusion models (DiT or UNet) bigger than "
        "your VRAM: the blocks that do not fit are offloaded to pinned RAM and streamed in while the "
        "previous ones compute."
    )
    RETURN_TYPES = ("LATENT",)
    OUTPUT_TOOLTIPS = ("The denoised latent, as the stock KSampler returns it: connect it to a VAE decode",)
    FUNCTION = "sample"

    @classmethod
    def INPUT_TYPES(cls) -> dict[str, Any]:
        return {
            "required": lookups.ksampler_required_inputs(),
            "optional": streaming_inputs(),
        }

    @classmethod
    def VALIDATE_INPUTS(cls, vram_budget: Any = "auto") -> bool | str:
        """A bad vram_budget fails when the prompt is queued, before any node runs."""
        return validate_vram_budget(vram_budget, cls.DISPLAY_NAME)

    def sample(
        self,
        model: ModelPatcher,
        seed: int,
        steps: int,
        cfg: float,
        sampler_name: str,
        scheduler: str,
        positive: Any,
        negative: Any,
        latent_image: dict[str, Any],
        denoise: float = 1.0,
        vram_budget: str = "auto",
        prefetch: int = -1,
        resident_blocks: int = -1,
        pin_memory: bool = True,
    ) -> dict[str, Any]:
        budget = node_vram_budget(vram_budget, self.DISPLAY_NAME)
        self._check_latent(model, latent_image)
        try:
            latent, run = sampling.streaming_ksample(
                model,
                (seed, steps, cfg, sampler_name, scheduler, positive, negative, latent_image, denoise),
                budget=budget,
                prefetch=None if prefetch < 0 else prefetch,
                resident_blocks=None if resident_blocks < 0 else resident_blocks,
                pin=pin_memory,
            )
        except BudgetExceeded as exc:
            raise ValueError(
                f"{self.DISPLAY_NAME}: input vram_budget {vram_budget!r}: {exc}. Raise vram_budget, use "
                "auto, or lower prefetch."
            ) from None
        except RuntimeError as exc:
            if "mat1 and mat2" not in str(exc):
                raise
            raise ValueError(conditioning_error(self.DISPLAY_NAME, model, positive, exc)) from exc
        return {"ui": {"text": [describe_run(run.summary, run.note)]}, "result": (latent,)}

    def _check_latent(self, model: ModelPatcher, latent_image: Any) -> None:
        samples = latent_image.get("samples") if isinstance(latent_image, dict) else None
        if samples is None or not hasattr(samples, "shape"):
            raise ValueError(f"{self.DISPLAY_NAME}: input latent_image: not a latent (no samples tensor)")
        channels, dims, four_d_ok, zeros_ok = lookups.sampler_latent_spec(model)
        if zeros_ok and samples.ndim >= 2 and samples.numel() and not bool(samples.any()):
            channels = None  # an empty latent: the host gives it the model's channels
        problem = latent_problem(samples.shape, channels, dims, four_d_ok=four_d_ok)
        if problem:
            fix = (
                "Use a latent made for this model: the Empty Latent node of its family, or its VAE's "
                "encode; a latent from another model family does not fit."
            )
            raise ValueError(latent_error(self.DISPLAY_NAME, "latent_image", problem, fix))


def describe_run(summary: dict[str, Any], note: str = "") -> str:
    """One line for the node: K, d, streamed GB, achieved step time against the bound."""
    if not summary or not summary.get("streamed_bytes"):
        return note or "nothing streamed: the model fits the budget"
    prefetch = f"prefetch {summary['prefetch']}"
    asked = summary.get("prefetch_requested")
    if asked is not None and asked > summary["prefetch"]:
        streamed = summary["blocks"] - summary["resident_blocks"]
        prefetch += f" (capped from {asked}: {streamed} blocks stream and the budget holds this ring)"
    text = (
        f"{summary['family']}: {summary['resident_blocks']}/{summary['blocks']} blocks resident, "
        f"{prefetch}, {format_bytes(summary['streamed_bytes'])} streamed per step"
    )
    if summary.get("generic_layout"):
        text += " (blocks found by the generic rule)"
    if summary.get("shared_steps"):
        text += "; the host's separate cond/uncond calls share each upload"
    if summary.get("step_s") and summary.get("bound_s"):
        text += f"; {summary['step_s']:.3f} s/step vs bound {summary['bound_s']:.3f} s"
        if summary.get("bound_kind"):
            text += f" ({summary['bound_kind']})"
    return text


NODE_CLASS = HeadroomStreamingSampler
