"""The models ``bench/activations.py`` and ``bench/activations_gpu.py`` measure: the ComfyUI host's own
classes at their released configurations (``small``: a reduced-width copy for the CPU-vs-meta check),
and one call's inputs. Import after ``activations.import_host`` has set the host up."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch


@dataclass
class Case:
    """One model: ``build(dtype, device, small)`` and ``call(model, size, dtype, device, batch)``."""

    family: str  # key in memory/planning/activations.py
    label: str
    build: Callable[..., torch.nn.Module]
    call: Callable[..., Any]
    sizes: tuple[tuple[int, int, int], ...]  # (width, height, frames) in pixels
    spatial: int = 8
    temporal: int = 0
    text: bool = False  # a text encoder: sizes are (tokens, 1, 1)


def cells(case: Case, size: tuple[int, int, int]) -> int:
    w, h, f = size
    if case.text:
        return w
    t = 1 if case.temporal <= 0 or f <= 1 else (f - 1) // case.temporal + 1
    return math.ceil(h / case.spatial) * math.ceil(w / case.spatial) * t


def rnd(shape: tuple[int, ...], dtype: torch.dtype, device: str) -> torch.Tensor:
    return torch.randn(shape, dtype=dtype, device=device)


def latent(case: Case, size: tuple[int, int, int], ch: int, dt: torch.dtype, dev: str, batch: int):
    w, h, f = size
    hw = (math.ceil(h / case.spatial), math.ceil(w / case.spatial))
    if case.temporal:
        return rnd((batch, ch, (f - 1) // case.temporal + 1, *hw), dt, dev)
    return rnd((batch, ch, *hw), dt, dev)


def cases(ops: Any) -> list[Case]:
    from comfy.ldm.flux.model import Flux
    from comfy.ldm.hidream.model import HiDreamImageTransformer2DModel
    from comfy.ldm.hunyuan_video.model import HunyuanVideo
    from comfy.ldm.lightricks.model import LTXVModel
    from comfy.ldm.modules.diffusionmodules.mmdit import MMDiT
    from comfy.ldm.modules.diffusionmodules.openaimodel import UNetModel
    from comfy.ldm.qwen_image.model import QwenImageTransformer2DModel
    from comfy.ldm.wan.model import WanModel

    def t(n: int, dt: torch.dtype, dev: str, b: int) -> torch.Tensor:
        return torch.full((b,), 0.5, dtype=dt, device=dev)

    from comfy.ldm.flux.model import FluxParams
    from comfy.ldm.hunyuan_video.model import HunyuanVideoParams

    def newer(params: type, **values: Any) -> dict[str, Any]:
        """Fields a later host made required, with the values its model_detection sets for the model
        measured here; a host without them gets none."""
        return {k: v for k, v in values.items() if k in params.__dataclass_fields__}

    flux_extra = newer(FluxParams, txt_ids_dims=[])  # 0.33: Flux.1 has no text-id axes
    hunyuan_extra = newer(
        HunyuanVideoParams, use_cond_type_embedding=False, vision_in_dim=None, meanflow_sum=False
    )  # 0.33: HunyuanVideo 1.0's values

    def flux(dt, dev, small):
        return Flux(
            **flux_extra,
            image_model=None,
            in_channels=16,
            out_channels=16,
            vec_in_dim=768,
            context_in_dim=4096,
            hidden_size=384 if small else 3072,
            mlp_ratio=4.0,
            num_heads=3 if small else 24,
            depth=2 if small else 19,
            depth_single_blocks=2 if small else 38,
            axes_dim=[16, 56, 56],
            theta=10000,
            patch_size=2,
            qkv_bias=True,
            guidance_embed=True,
            dtype=dt,
            device=dev,
            operations=ops,
        )

    def flux_call(m, c, s, dt, dev, b):
        return m(
            latent(c, s, 16, dt, dev, b),
            t(0, dt, dev, b),
            rnd((b, 512, 4096), dt, dev),
            rnd((b, 768), dt, dev),
            guidance=t(0, dt, dev, b),
        )

    def wan(dim, ffn, heads, layers, ch):
        def build(dt, dev, small):
            return WanModel(
                model_type="t2v",
                patch_size=(1, 2, 2),
                text_len=512,
                in_dim=ch,
                out_dim=ch,
                dim=dim // 8 if small else dim,
                ffn_dim=ffn // 8 if small else ffn,
                num_heads=max(heads // 8, 1) if small else heads,
                num_layers=2 if small else layers,
                text_dim=4096,
                dtype=dt,
                device=dev,
                operations=ops,
            )

        def call(m, c, s, dt, dev, b):
            return m(latent(c, s, ch, dt, dev, b), t(0, dt, dev, b), rnd((b, 512, 4096), dt, dev))

        return build, call

    def qwen(dt, dev, small):
        return QwenImageTransformer2DModel(
            num_layers=2 if small else 60,
            num_attention_heads=3 if small else 24,
            joint_attention_dim=3584,
            in_channels=64,
            out_channels=16,
            dtype=dt,
            device=dev,
            operations=ops,
        )

    def qwen_call(m, c, s, dt, dev, b):
        return m(latent(c, s, 16, dt, dev, b).unsqueeze(2), t(0, dt, dev, b), rnd((b, 256, 3584), dt, dev))

    def hunyuan(dt, dev, small):
        return HunyuanVideo(
            **hunyuan_extra,
            image_model="hunyuan_video",
            in_channels=16,
            out_channels=16,
            patch_size=[1, 2, 2],
            vec_in_dim=768,
            context_in_dim=4096,
            hidden_size=384 if small else 3072,
            mlp_ratio=4.0,
            num_heads=3 if small else 24,
            depth=2 if small else 20,
            depth_single_blocks=2 if small else 40,
            axes_dim=[16, 56, 56],
            theta=256,
            qkv_bias=True,
            guidance_embed=True,
            meanflow=False,
            byt5=False,
            dtype=dt,
            device=dev,
            operations=ops,
        )

    def hunyuan_call(m, c, s, dt, dev, b):
        return m(
            latent(c, s, 16, dt, dev, b),
            t(0, dt, dev, b),
            rnd((b, 256, 4096), dt, dev),
            y=rnd((b, 768), dt, dev),
            guidance=t(0, dt, dev, b),
        )

    def sd35(dt, dev, small):
        depth = 6 if small else 38  # SD3.5 Large: hidden 64 * depth = 2432
        return MMDiT(
            input_size=None,
            patch_size=2,
            in_channels=16,
            out_channels=16,
            depth=depth,
            adm_in_channels=2048,
            context_embedder_config={
                "target": "torch.nn.Linear",
                "params": {"in_features": 4096, "out_features": 64 * depth},
            },
            pos_embed_max_size=192,
            num_patches=192 * 192,
            qk_norm="rms",
            pos_embed_scaling_factor=None,
            dtype=dt,
            device=dev,
            operations=ops,
        )

    def sd35_call(m, c, s, dt, dev, b):
        return m(
            latent(c, s, 16, dt, dev, b),
            t(0, dt, dev, b),
            context=rnd((b, 333, 4096), dt, dev),
            y=rnd((b, 2048), dt, dev),
        )

    def unet(xl):
        def build(dt, dev, small):
            mc = 32 if small else 320
            common = dict(
                image_size=32,
                in_channels=4,
                out_channels=4,
                model_channels=mc,
                dtype=dt,
                device=dev,
                operations=ops,
                use_spatial_transformer=True,
                legacy=False,
                use_linear_in_transformer=xl,
            )
            if xl:
                return UNetModel(
                    **common,
                    num_res_blocks=[2, 2, 2],
                    channel_mult=[1, 2, 4],
                    num_head_channels=64 if not small else 8,
                    transformer_depth=[0, 0, 2, 2, 10, 10],
                    transformer_depth_output=[0, 0, 0, 2, 2, 2, 10, 10, 10],
                    transformer_depth_middle=10,
                    context_dim=2048,
                    adm_in_channels=2816,
                    num_classes="sequential",
                )
            return UNetModel(
                **common,
                num_res_blocks=[2, 2, 2, 2],
                channel_mult=[1, 2, 4, 4],
                num_heads=8,
                transformer_depth=[1, 1, 1, 1, 1, 1, 0, 0],
                transformer_depth_output=[1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0],
                transformer_depth_middle=1,
                context_dim=768,
            )

        def call(m, c, s, dt, dev, b):
            ctx = rnd((b, 77, 2048 if xl else 768), dt, dev)
            y = rnd((b, 2816), dt, dev) if xl else None
            return m(latent(c, s, 4, dt, dev, b), t(0, dt, dev, b), context=ctx, y=y)

        return build, call

    def ltxv(cross, head, layers):
        def build(dt, dev, small):
            return LTXVModel(
                in_channels=128,
                cross_attention_dim=cross // 8 if small else cross,
                attention_head_dim=head // 8 if small else head,
                num_attention_heads=32,
                caption_channels=4096,
                num_layers=2 if small else layers,
                dtype=dt,
                device=dev,
                operations=ops,
            )

        def call(m, c, s, dt, dev, b):
            return m(
                latent(c, s, 128, dt, dev, b),
                t(0, dt, dev, b),
                rnd((b, 128, 4096), dt, dev),
                attention_mask=None,
                frame_rate=25,
            )

        return build, call

    def hidream(dt, dev, small):
        return HiDreamImageTransformer2DModel(
            patch_size=2,
            in_channels=16,
            out_channels=16,
            num_layers=1 if small else 16,
            num_single_layers=1 if small else 32,
            attention_head_dim=128,
            num_attention_heads=20,
            caption_channels=[4096, 4096],
            text_emb_dim=2048,
            num_routed_experts=4,
            num_activated_experts=2,
            axes_dims_rope=(64, 32, 32),
            max_resolution=(128, 128),
            llama_layers=[0, 31] if small else list(range(32)) + [31] * 16,  # one per block
            dtype=dt,
            device=dev,
            operations=ops,
        )

    def hidream_routed(dt, dev, small):
        return worst_case_routing(hidream(dt, dev, small), dev)

    def hidream_call(m, c, s, dt, dev, b):
        # pooled CLIP-L+G (2048), T5 tokens, and the 32 Llama layers' hidden states
        llama = rnd((b, 32, 128, 4096), dt, dev)
        y, ctx = rnd((b, 2048), dt, dev), rnd((b, 128, 4096), dt, dev)
        return m(latent(c, s, 16, dt, dev, b), t(0, dt, dev, b), y, ctx, encoder_hidden_states_llama3=llama)

    wan14 = wan(5120, 13824, 40, 40, 16)
    wan5 = wan(3072, 14336, 24, 30, 48)
    wan1 = wan(1536, 8960, 12, 30, 16)
    img = ((512, 512, 1), (768, 768, 1), (1024, 1024, 1), (1328, 1328, 1))
    return [
        Case("flux", "Flux-dev", flux, flux_call, img),
        Case(
            "wan21",
            "Wan 2.1/2.2 14B",
            *wan14,
            ((480, 480, 33), (640, 640, 81), (832, 480, 81), (1280, 720, 81)),
            temporal=4,
        ),
        Case("wan21_1.3b", "Wan 2.1 1.3B", *wan1, ((480, 480, 33), (832, 480, 81)), temporal=4),
        Case("wan22", "Wan 2.2 5B", *wan5, ((640, 640, 33), (640, 640, 81), (1280, 704, 121)), 16, 4),
        Case("qwen_image", "Qwen-Image", qwen, qwen_call, img),
        Case(
            "hunyuan_video",
            "HunyuanVideo",
            hunyuan,
            hunyuan_call,
            ((480, 320, 33), (848, 480, 65), (1280, 720, 129)),
            temporal=4,
        ),
        Case("sd3", "SD3.5 Large", sd35, sd35_call, img),
        Case("sdxl", "SDXL", *unet(True), ((768, 768, 1), (1024, 1024, 1), (1536, 1536, 1))),
        Case("sd15", "SD1.5", *unet(False), ((512, 512, 1), (768, 768, 1), (1024, 1024, 1))),
        Case(
            "ltxv", "LTXV 2B", *ltxv(2048, 64, 28), ((512, 512, 33), (768, 512, 97), (1216, 704, 121)), 32, 8
        ),
        Case("hidream", "HiDream-I1", hidream_routed, hidream_call, img[:3]),
    ] + text_cases(ops)


def cases_2026() -> list[Case]:
    """The 2026 families, built as ComfyUI 0.33 builds the released files: the configs of
    scripts/catalog_archs.py through the host's own model detection (comfy.model_detection), cast to the
    measured dtype. ``small`` copies are not offered (no CPU-vs-meta check for these)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    from catalog_archs import (
        HUNYUAN_VIDEO_15,
        KANDINSKY5_IMAGE,
        KANDINSKY5_VIDEO,
        LTXAV_19B,
        Z_IMAGE,
        diffusion,
        flux2,
    )

    def built(config: dict) -> Callable[..., torch.nn.Module]:
        def build(dt, dev, small):
            if small:
                raise NotImplementedError("no reduced-width copy of the 2026 cases")
            with torch.device(dev):
                return diffusion(config).to(dt)

        return build

    def t(dt, dev, b):
        return torch.full((b,), 0.5, dtype=dt, device=dev)

    def flux2_case(hidden: int, depth: int, single: int, context: int) -> Case:
        def call(m, c, s, dt, dev, b):
            guidance = t(dt, dev, b) if hidden == 6144 else None  # dev is guidance-distilled
            return m(
                latent(c, s, 128, dt, dev, b),
                t(dt, dev, b),
                rnd((b, 512, context), dt, dev),
                guidance=guidance,
            )

        label = {3072: "Flux.2 Klein 4B", 4096: "Flux.2 Klein 9B", 6144: "Flux.2 dev"}[hidden]
        build = built(flux2(hidden, depth, single, context))
        return Case(f"flux2_{hidden}", label, build, call, IMAGE_SIZES, spatial=16)

    def hunyuan15_call(m, c, s, dt, dev, b):
        x = latent(c, s, 65, dt, dev, b)  # 32 noise + 32 image condition + 1 mask channels
        return m(x, t(dt, dev, b), rnd((b, 256, 3584), dt, dev), txt_byt5=rnd((b, 256, 1472), dt, dev))

    def z_image_call(m, c, s, dt, dev, b):
        return m(latent(c, s, 16, dt, dev, b), t(dt, dev, b), rnd((b, 256, 2560), dt, dev), 256)

    def kandinsky5_call(channels: int):
        def call(m, c, s, dt, dev, b):
            x = latent(c, s, channels, dt, dev, b)
            return m(x, t(dt, dev, b), rnd((b, 256, 3584), dt, dev), rnd((b, 768), dt, dev))

        return call

    def ltxav_call(m, c, s, dt, dev, b):
        # [video latent, audio latent]: 128 channels at 32x/8x; the audio of 5 s (126 latents x 16 bins)
        # in every call, so it sits in the intercept; the context is Gemma's video + audio halves
        audio = rnd((b, m.num_audio_channels, 126, m.audio_frequency_bins), dt, dev)
        x = [latent(c, s, 128, dt, dev, b), audio]
        return m(x, t(dt, dev, b), rnd((b, 256, 7680), dt, dev), frame_rate=25, transformer_options={})

    video = ((480, 320, 33), (848, 480, 65), (1280, 720, 121))
    k5_video = ((512, 512, 25), (768, 512, 121), (1024, 768, 121))
    return [
        flux2_case(3072, 5, 20, 7680),
        flux2_case(4096, 8, 24, 12288),
        flux2_case(6144, 8, 48, 15360),
        Case("hunyuan_video15", "HunyuanVideo 1.5", built(HUNYUAN_VIDEO_15), hunyuan15_call, video, 16, 4),
        Case("z_image", "Z-Image", built(Z_IMAGE), z_image_call, IMAGE_SIZES),
        Case(
            "ltxv_4096",
            "LTX-2 19B (audio-video)",
            built(LTXAV_19B),
            ltxav_call,
            ((512, 512, 33), (768, 512, 97), (1216, 704, 121)),
            32,
            8,
        ),
        # Kandinsky 5 Lite: video (1792 wide, HunyuanVideo latent + image and mask: 33 channels), image
        Case(
            "kandinsky5_1792",
            "Kandinsky 5 Video Lite",
            built(KANDINSKY5_VIDEO),
            kandinsky5_call(33),
            k5_video,
            8,
            4,
        ),
        Case(
            "kandinsky5_2560",
            "Kandinsky 5 Image Lite",
            built(KANDINSKY5_IMAGE),
            kandinsky5_call(16),
            IMAGE_SIZES,
        ),
    ]


IMAGE_SIZES = ((512, 512, 1), (1024, 1024, 1), (1328, 1328, 1))


def worst_case_routing(model: torch.nn.Module, device: str) -> torch.nn.Module:
    """HiDream's MoE feed-forward routes each token to its top-2 of 4 experts and runs each expert on the
    rows picked by a boolean mask (comfy/ldm/hidream/model.py:307-325): data-dependent shapes, which meta
    cannot run, and a peak that grows with the rows the busiest expert gets. Fix the routing to its worst
    case: every token to experts 0 and 1, so each of them gets all N tokens (the most a top-2 router can
    give one expert; a balanced router gives N/2). On the CPU only the gate is patched and the host's own
    forward runs; on meta ``_moe_forward`` replays it with strided slices where the host uses masks, which
    allocates the same tensors (the CPU-vs-meta check compares the two)."""
    from comfy.ldm.hidream.model import MOEFeedForwardSwiGLU, MoEGate

    for m in model.modules():
        if isinstance(m, MoEGate):
            m.forward = _worst_gate.__get__(m)
        elif isinstance(m, MOEFeedForwardSwiGLU) and device == "meta":
            m.forward = _moe_forward.__get__(m)
    return model


def _worst_gate(self: Any, hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:
    idx, weight, aux = type(self).forward(self, hidden_states)  # the host's gate: scores and top-k
    worst = torch.arange(self.top_k, device=idx.device, dtype=idx.dtype).expand_as(idx).contiguous()
    return worst, weight, aux


def _moe_forward(self: Any, x: torch.Tensor) -> torch.Tensor:
    """``MOEFeedForwardSwiGLU.forward`` (host lines 307-325) with the routing of ``_worst_gate``: token j's
    k-th choice is expert k, i.e. rows k, k+K, k+2K... of the repeated input: a strided slice. The host's
    ``x[mask]`` copies those rows (``.contiguous()`` here), ``y[mask] = out`` writes in place."""
    wtype, identity, orig_shape, k = x.dtype, x, x.shape, self.num_activated_experts
    topk_idx, topk_weight, _ = self.gate(x)
    flat_topk_idx = topk_idx.view(-1)
    x = x.view(-1, x.shape[-1]).repeat_interleave(k, dim=0)
    y = torch.empty_like(x, dtype=wtype)
    for i, expert in enumerate(self.experts):
        mask = flat_topk_idx == i  # the host's mask, alive while it indexes
        rows = x[i::k].contiguous() if i < k else x[:0].contiguous()
        del mask
        out = expert(rows).to(dtype=wtype)
        del rows
        mask = flat_topk_idx == i
        if i < k:
            y[i::k] = out
        del mask, out
    y = (y.view(*topk_weight.shape, -1) * topk_weight.unsqueeze(-1)).sum(dim=1)
    y = y.view(*orig_shape).to(dtype=wtype)
    return y + self.shared_experts(identity)


def text_cases(ops: Any) -> list[Case]:
    from comfy.clip_model import CLIPTextModel
    from comfy.text_encoders import llama
    from comfy.text_encoders.t5 import T5

    te = Path(sys.modules["comfy.text_encoders.t5"].__file__).parent

    def t5(name):
        def build(dt, dev, small):
            cfg = json.loads((te / f"{name}.json").read_text())
            if small:
                cfg |= {"d_model": 512, "d_ff": 1280, "num_heads": 8, "num_layers": 2}
            return T5(cfg, dt, dev, ops)

        return build

    def clip(hidden, heads, layers, inter, act):
        def build(dt, dev, small):
            return CLIPTextModel(
                {
                    "num_hidden_layers": 2 if small else layers,
                    "hidden_size": hidden,
                    "num_attention_heads": heads,
                    "intermediate_size": inter,
                    "hidden_act": act,
                    "projection_dim": hidden,
                    "vocab_size": 49408,
                    "max_position_embeddings": 77,
                    "eos_token_id": 49407,
                },
                dt,
                dev,
                ops,
            )

        return build

    def lm(cls, **cfg):
        def build(dt, dev, small):
            return cls(cfg | ({"num_hidden_layers": 2, "vocab_size": 1000} if small else {}), dt, dev, ops)

        return build

    def call(m, c, s, dt, dev, b):
        return m(torch.randint(0, 1000, (b, s[0]), device=dev), None)

    toks = ((77, 1, 1), (256, 1, 1), (512, 1, 1))
    return [
        Case("t5xxl", "T5-XXL", t5("t5_config_xxl"), call, toks, text=True),
        Case("umt5xxl", "UMT5-XXL", t5("umt5_config_xxl"), call, toks, text=True),
        Case("clip_l", "CLIP-L", clip(768, 12, 12, 3072, "quick_gelu"), call, ((77, 1, 1),), text=True),
        Case("clip_g", "CLIP-G", clip(1280, 20, 32, 5120, "gelu"), call, ((77, 1, 1),), text=True),
        Case("llama3_8b", "Llama-3.1-8B", lm(llama.Llama2), call, toks, text=True),
        Case("qwen25_vl_7b", "Qwen2.5-VL-7B", lm(llama.Qwen25_7BVLI), call, toks, text=True),
    ]
