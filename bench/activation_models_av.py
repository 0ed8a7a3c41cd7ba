"""More 2026 cases for ``bench/activations.py`` (#26): MiniMax H3 (audio-video), HiDream-O1 (pixel space)
and Stable Video Diffusion, each the ComfyUI 0.33 host's own class at its released size on the meta device.

Their forwards read a few values as Python numbers (the sampling timestep, the text prompt's token ids),
which a meta tensor cannot give: those inputs are built on the CPU (a timestep, token ids, position ids:
kilobytes, outside the meter's count of activations only where noted), everything else on the meta
device. Import after ``activations.import_host`` has set the host up.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import torch
from activation_models import Case, rnd

# MiniMax H3 latent rates (comfy_extras/nodes_minimax_h3.py, 0.33): 24 fps; 5 latent frames per 17 video
# frames (17k + 5); stereo audio latents [B, 32, 2, T] at 40 per second
H3_FPS, H3_AUDIO_FPS = 24, 40


def h3_latent_t(frames: int) -> int:
    return 2 if frames <= 5 else ((frames - 5) // 17) * 5 + 2


def _built(config: dict) -> Callable[..., torch.nn.Module]:
    """The host's class as it loads the released file: in bf16 through the host's own dtype setting, so
    the parameters the class pins in fp32 (MiniMax H3's time table and patch projections) stay fp32."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    from catalog_archs import diffusion, native

    def build(dt, dev, small):
        if small:
            raise NotImplementedError("no reduced-width copy of these cases")
        if dt == torch.bfloat16:
            return native(config)(Path("."))
        with torch.device(dev):
            return diffusion(config).to(dt)

    return build


def minimax_h3_case() -> Case:
    """The released curve-form DiT (50 x 5376); the video latent at 16x with the host's frame rule,
    the audio of the same duration, 256 Qwen3-VL-32B context tokens (5120 wide, through the token
    refiner as the host does). Cells are counted as the planner counts them: 16x, one per 4 frames."""
    from catalog_archs import MINIMAX_H3_CURVE

    def call(m, c, s, dt, dev, b):
        w, h, f = s
        video = rnd((b, 24, h3_latent_t(f), h // 16, w // 16), dt, dev)
        audio = rnd((b, 32, 2, round(f / H3_FPS * H3_AUDIO_FPS)), dt, dev)
        timestep = torch.full((b,), 500.0)  # read as a number (sigma shift): a CPU tensor
        return m([video, audio], timestep, rnd((b, 256, 5120), dt, dev), transformer_options={})

    sizes = ((512, 320, 49), (832, 480, 97), (1344, 768, 121))
    return Case("minimax_h3", "MiniMax H3 (curve form)", _built(MINIMAX_H3_CURVE), call, sizes, 16, 4)


def hidream_o1_case() -> Case:
    """HiDream-O1 (8B, pixel space, 32-pixel patches): the prompt's token ids and MRoPE positions built
    by the host's own ``build_extra_conds`` on the CPU (a 128-token prompt), then moved to meta."""

    def call(m, c, s, dt, dev, b):
        from comfy.ldm.hidream_o1.conditioning import build_extra_conds

        w, h, _ = s
        ids = torch.randint(1000, 2000, (1, 128))
        conds = build_extra_conds(ids, torch.zeros(b, 3, h, w), target_patch_size=32)
        extra = {k: (v.to(dev) if isinstance(v, torch.Tensor) else v) for k, v in conds.items()}
        # the output rows are picked with a boolean mask (model.py:294): a meta nonzero() must assume
        # every row is picked, so that one temporary counts the prompt's 128 rows too (< 1% here)
        with torch.fx.experimental._config.patch(meta_nonzero_assume_all_nonzero=True):
            return m(rnd((b, 3, h, w), dt, dev), torch.full((b,), 500.0, device=dev), None, {}, **extra)

    sizes = ((512, 512, 1), (1024, 1024, 1), (1536, 1536, 1))  # multiples of the 32-pixel patch
    return Case("hidream_o1", "HiDream-O1 (pixel space)", _built({"image_model": "hidream_o1"}), call,
                sizes, spatial=1)  # fmt: skip


def svd_case() -> Case:
    """SVD-XT's UNet (supported_models.SVD_img2vid): the frames are the batch of one call, 8-channel
    input (noise + the image latent), CLIP-H image embedding as one context token, 768-wide vector."""
    config = {
        "use_checkpoint": False,
        "image_size": 32,
        "out_channels": 4,
        "use_spatial_transformer": True,
        "legacy": False,
        "num_classes": "sequential",
        "num_res_blocks": [2, 2, 2, 2],
        "channel_mult": [1, 2, 4, 4],
        "transformer_depth_middle": 1,
        "num_head_channels": 64,
        "transformer_depth_output": [1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0],
        "model_channels": 320,
        "in_channels": 8,
        "use_linear_in_transformer": True,
        "transformer_depth": [1, 1, 1, 1, 1, 1, 0, 0],
        "context_dim": 1024,
        "adm_in_channels": 768,
        "use_temporal_attention": True,
        "use_temporal_resblock": True,
        "extra_ff_mix_layer": True,
        "use_spatial_context": True,
        "merge_strategy": "learned_with_images",
        "merge_factor": 0.0,
        "video_kernel_size": [3, 1, 1],
        "disable_temporal_crossattention": False,
    }  # fmt: skip  (comfy/model_detection.py:1255-1263 for a video UNet)

    def call(m, c, s, dt, dev, b):
        w, h, f = s
        n = b * f
        x = rnd((n, 8, h // 8, w // 8), dt, dev)
        return m(
            x, torch.full((n,), 500.0, dtype=dt, device=dev), rnd((n, 1, 1024), dt, dev),
            y=rnd((n, 768), dt, dev), num_video_frames=f, image_only_indicator=torch.zeros(b, f, device=dev),
        )  # fmt: skip

    sizes = ((512, 320, 14), (1024, 576, 14), (1024, 576, 25))
    return Case("svd", "Stable Video Diffusion XT", _built(config), call, sizes, 8, 1)


def cases_av() -> list[Case]:
    return [minimax_h3_case(), hidream_o1_case(), svd_case()]
