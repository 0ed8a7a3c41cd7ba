"""Which architecture a state dict is, and which of its numbered module lists are the streamable blocks.

Each detector looks at the key set (wrapper prefix stripped) and a few shapes, as comfy/model_detection.py
does, and returns a Layout: the kind, the family, and the lists whose entries are the blocks, in the
order the model's forward() runs them. An unknown layout falls back to ``generic_layout``.
"""

from __future__ import annotations

import functools
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from .header import TensorEntry


@dataclass(frozen=True)
class Layout:
    kind: str
    family: str | None
    # In forward order: a numbered module list gives one block per index; "=name" is one whole module
    # streamed as a single block (the UNet's middle_block).
    lists: tuple[str, ...] = ()
    note: str = ""
    order: tuple[str, ...] | None = None  # explicit block order when lists interleave (Wan VACE)


@functools.lru_cache(maxsize=1 << 16)
def _split_numbered(key: str) -> tuple[str, int] | None:
    """``double_blocks.3.img_attn.qkv.weight`` -> (``double_blocks``, 3): the first numeric component."""
    parts = key.split(".")
    for i, part in enumerate(parts[:-1]):
        if part.isdigit():
            return ".".join(parts[:i]), int(part)
    return None


def block_sizes(tensors: Mapping[str, TensorEntry], whole: list[str]) -> dict[str, int]:
    """Bytes per numbered entry (``blocks.3``) and per whole module named in ``whole``."""
    sizes: dict[str, int] = defaultdict(int)
    wanted = tuple(w + "." for w in whole)
    for key, spec in tensors.items():
        numbered = _split_numbered(key)
        if numbered is not None:
            sizes[f"{numbered[0]}.{numbered[1]}"] += spec.nbytes
        if wanted and key.startswith(wanted):
            sizes[key.split(".", 1)[0]] += spec.nbytes
    return sizes


@functools.lru_cache(maxsize=16)
def _list_indices(keys: frozenset[str]) -> dict[str, frozenset[int]]:
    """Numbered module lists and their indices; cached per key set (detectors ask many times)."""
    found: dict[str, set[int]] = defaultdict(set)
    for key in keys:
        numbered = _split_numbered(key)
        if numbered is not None:
            found[numbered[0]].add(numbered[1])
    return {name: frozenset(idx) for name, idx in found.items()}


def block_names(tensors: Mapping[str, TensorEntry], layout: Layout) -> list[str]:
    """The layout's blocks present in ``tensors``, in forward order."""
    if layout.order is not None:
        return list(layout.order)
    indices = _list_indices(frozenset(tensors))
    names: list[str] = []
    for name in layout.lists:
        if name.startswith("="):
            if any(k.startswith(name[1:] + ".") for k in tensors):
                names.append(name[1:])
        else:
            names += [f"{name}.{i}" for i in sorted(indices.get(name, ()))]
    return names


def generic_layout(tensors: Mapping[str, TensorEntry], kind: str) -> Layout:
    """Unknown layout: numbered module lists holding >= 10% of the bytes each are the blocks."""
    total = sum(t.nbytes for t in tensors.values()) or 1
    per_list: Counter[str] = Counter()
    counts: dict[str, set[int]] = defaultdict(set)
    for key, spec in tensors.items():
        numbered = _split_numbered(key)
        if numbered is not None:
            per_list[numbered[0]] += spec.nbytes
            counts[numbered[0]].add(numbered[1])
    lists = sorted(n for n, b in per_list.items() if b >= 0.1 * total and len(counts[n]) >= 2)
    if kind in ("vae", "upscale_model"):
        lists = []
    desc = ", ".join(f"{n} x{len(counts[n])}" for n in lists) or "none"
    return Layout(
        kind, None, tuple(lists), note=f"unknown layout; generic rule (numbered lists >=10% of bytes): {desc}"
    )


# --- family detectors ------------------------------------------------------------------------------

Detector = Callable[[frozenset[str], Mapping[str, TensorEntry]], "Layout | None"]


def _shape(t: Mapping[str, TensorEntry], key: str, dim: int) -> int | None:
    spec = t.get(key)
    return spec.shape[dim] if spec is not None and len(spec.shape) > dim else None


def _count(keys: frozenset[str], name: str) -> int:
    """How many entries the numbered list ``name`` has (``encoder.block`` -> 24)."""
    return len(_list_indices(keys).get(name, ()))


def _flux_like(keys: frozenset[str], t: Mapping[str, TensorEntry]) -> Layout | None:
    if (
        "txt_in.individual_token_refiner.blocks.0.norm1.weight" in keys
        or "double_blocks.0.img_attn_qkv.weight" in keys
    ):
        # HunyuanVideo: released files say img_attn_qkv, ComfyUI's module img_attn.qkv; the lists match
        nd, ns = _count(keys, "double_blocks"), _count(keys, "single_blocks")
        hidden = _shape(t, "img_in.proj.weight", 0)
        fam = "hunyuan_image" if "byt5_in.fc1.weight" in keys else "hunyuan_video"
        if "cond_type_embedding.weight" in keys or "vision_in.proj.0.weight" in keys:
            fam = "hunyuan_video15"  # 1.5: typed conditions, SigLIP image tokens (model_detection.py, 0.33)
        note = f"{nd} double + {ns} single blocks, hidden {hidden}"
        return Layout("diffusion_model", fam, ("double_blocks", "single_blocks"), note=note)
    if "latent_in.weight" in keys and "double_blocks.0.img_attn.qkv.weight" in keys:
        return Layout("diffusion_model", "hunyuan3d2", ("double_blocks", "single_blocks"))
    if "double_blocks.0.img_attn.qkv.weight" in keys and "single_blocks.0.linear1.weight" in keys:
        nd, ns = _count(keys, "double_blocks"), _count(keys, "single_blocks")
        hidden = _shape(t, "double_blocks.0.img_attn.qkv.weight", 1)
        shape = f"{nd} double + {ns} single blocks, hidden {hidden}"
        if any(k.startswith("distilled_guidance_layer.") for k in keys):
            if any(k.startswith("nerf_blocks.") for k in keys):
                return Layout(
                    "diffusion_model",
                    "chroma_radiance",
                    ("double_blocks", "single_blocks", "nerf_blocks"),
                    note=shape,
                )
            return Layout("diffusion_model", "chroma", ("double_blocks", "single_blocks"), note=shape)
        if "double_stream_modulation_img.lin.weight" in keys:  # Flux.2 (dev, Klein): shared modulation
            note = f"Flux.2: {shape}"
            return Layout("diffusion_model", "flux2", ("double_blocks", "single_blocks"), note=note)
        in_ch = (_shape(t, "img_in.weight", 1) or 64) // 4
        variant = {16: "", 32: ", canny/depth (32 in-channels)", 96: ", fill/inpaint (96 in-channels)"}.get(
            in_ch, f", {in_ch} in-channels"
        )
        guidance = (
            "guidance-distilled (dev)"
            if "guidance_in.in_layer.weight" in keys
            else "no guidance embed (schnell)"
        )
        return Layout(
            "diffusion_model",
            "flux",
            ("double_blocks", "single_blocks"),
            note=f"{shape}; {guidance}{variant}",
        )
    return None


_WAN_TYPES = (
    ("vace_patch_embedding.weight", "VACE"),
    ("control_adapter.conv.weight", "camera control"),
    ("casual_audio_encoder.encoder.final_linear.weight", "S2V"),
    ("audio_proj.audio_proj_glob_1.layer.bias", "HuMo"),
    ("face_adapter.fuser_blocks.0.k_norm.weight", "Animate"),
    ("img_emb.emb_pos", "FLF2V"),
    ("img_emb.proj.0.bias", "I2V (CLIP-vision image embedding)"),
)


def _wan(keys: frozenset[str], t: Mapping[str, TensorEntry]) -> Layout | None:
    if "head.modulation" not in keys or "blocks.0.self_attn.q.weight" not in keys:
        return None
    dim = _shape(t, "blocks.0.self_attn.q.weight", 0)
    out_dim = (_shape(t, "head.head.weight", 0) or 64) // 4
    in_dim = _shape(t, "patch_embedding.weight", 1)
    ffn = _shape(t, "blocks.0.ffn.0.weight", 0)
    n = _count(keys, "blocks")
    model_type = next((label for key, label in _WAN_TYPES if key in keys), "T2V")
    # Wan 2.2 TI2V-5B is the only one on the 48-channel Wan 2.2 VAE latent; the A14B experts are 2.1-shaped.
    family = "wan22" if out_dim == 48 else "wan21"
    note = f"{model_type}; {n} blocks dim {dim} ffn {ffn}, in_dim {in_dim}"
    nv = _count(keys, "vace_blocks")
    if nv:
        step = max(1, n // nv)  # comfy/ldm/wan/model.py VaceWanModel: vace block k runs after block k*step
        order: list[str] = []
        for i in range(n):
            order.append(f"blocks.{i}")
            if i % step == 0 and i // step < nv:
                order.append(f"vace_blocks.{i // step}")
        return Layout("diffusion_model", family, note=note + f", {nv} VACE blocks", order=tuple(order))
    # WanDancer's music injectors (0.33 comfy/ldm/wan: 8 cross-attention injectors beside the 40 blocks,
    # 0.8B parameters) stream like blocks
    return Layout("diffusion_model", family, ("blocks", "music_injector.injector"), note=note)


def _dit_families(keys: frozenset[str], t: Mapping[str, TensorEntry]) -> Layout | None:
    if "joint_blocks.0.context_block.attn.qkv.weight" in keys:
        n = _count(keys, "joint_blocks")
        return Layout("diffusion_model", "sd3", ("joint_blocks",), note=f"MMDiT, {n} joint blocks")
    if "txt_norm.weight" in keys and "img_in.weight" in keys:
        return Layout(
            "diffusion_model",
            "qwen_image",
            ("transformer_blocks",),
            note=f"{_count(keys, 'transformer_blocks')} blocks",
        )
    if "adaln_single.emb.timestep_embedder.linear_1.bias" in keys:
        if "pos_embed.proj.bias" in keys:
            return Layout("diffusion_model", "pixart", ("transformer_blocks",))
        return Layout(
            "diffusion_model",
            "ltxv",
            ("transformer_blocks",),
            note=f"{_count(keys, 'transformer_blocks')} blocks",
        )
    if "caption_projection.0.linear.weight" in keys:
        return Layout("diffusion_model", "hidream", ("double_stream_blocks", "single_stream_blocks"))
    if "cap_embedder.1.weight" in keys:
        dim = _shape(t, "cap_embedder.1.weight", 0)
        family = "z_image" if dim == 3840 else "lumina2"  # model_detection.py: dim 3840 is Z-Image
        note = f"{_count(keys, 'layers')} layers, dim {dim}"
        return Layout("diffusion_model", family, ("context_refiner", "noise_refiner", "layers"), note=note)
    if "time_caption_embed.timestep_embedder.linear_1.bias" in keys:
        # Boogu (0.33 supported_models.Boogu, an OmniGen2 subclass): 8 double- and 32 single-stream layers
        boogu = ("double_stream_layers", "single_stream_layers")
        return Layout(
            "diffusion_model",
            "omnigen2",
            ("context_refiner", "noise_refiner", "ref_image_refiner", "layers", *boogu),
        )
    if "t5_yproj.weight" in keys:
        return Layout("diffusion_model", "mochi", ("blocks",))
    if "genre_embedder.weight" in keys:
        return Layout("diffusion_model", "ace_step", ("transformer_blocks",))
    if "visual_transformer_blocks.0.cross_attention.key_norm.weight" in keys:  # model_detection.py (0.33)
        n, width = _count(keys, "visual_transformer_blocks"), _shape(t, "visual_embeddings.in_layer.bias", 0)
        note = f"Kandinsky 5: {n} visual blocks, width {width}"
        lists = ("text_transformer_blocks", "visual_transformer_blocks")
        return Layout("diffusion_model", "kandinsky5", lists, note=note)
    if "t_embedder1.mlp.0.weight" in keys and "x_embedder.proj1.weight" in keys:  # model_detection.py (0.33)
        note = f"HiDream-O1 (pixel space, 32 px patches): {_count(keys, 'language_model.layers')} LM layers"
        return Layout("diffusion_model", "hidream_o1", ("visual.blocks", "language_model.layers"), note=note)
    if "encoder.pan_blocks.1.cv4.conv.weight" in keys:
        # RT-DETR v4 (comfy/ldm/rt_detr, 0.33): a detector ComfyUI loads through UNETLoader
        return Layout("detector", "rt_detr", note="object detector (HGNet backbone, DETR decoder)")
    return None


_UNET_CONTEXT = {768: "sd15", 1024: "sd2", 2048: "sdxl", 1280: "sdxl_refiner"}


def _unet(keys: frozenset[str], t: Mapping[str, TensorEntry]) -> Layout | None:
    if "input_blocks.0.0.weight" not in keys or not any(k.startswith("middle_block.") for k in keys):
        return None
    context = next(
        (
            t[k].shape[1]
            for k in sorted(keys)
            if k.startswith("input_blocks.") and k.endswith("attn2.to_k.weight")
        ),
        None,
    )
    family = _UNET_CONTEXT.get(context or 0, "unet")
    if any(".time_stack." in k for k in keys):
        family = "svd"
    note = f"UNet, cross-attention dim {context}"
    return Layout("diffusion_model", family, ("input_blocks", "=middle_block", "output_blocks"), note=note)


def _controlnet(keys: frozenset[str], t: Mapping[str, TensorEntry]) -> Layout | None:
    markers = ("controlnet_blocks.0.weight", "input_hint_block.0.weight", "controlnet_x_embedder.weight")
    if not any(m in keys for m in markers) and not any(k.startswith("controlnet_blocks.") for k in keys):
        return None
    bases = (d(keys, t) for d in (_flux_like, _dit_families, _unet, _wan))
    base = next((b for b in bases if b is not None), None)
    if base is None:
        generic = generic_layout(t, "controlnet")
        family = "sd" if "input_hint_block.0.weight" in keys else None
        return Layout("controlnet", family, generic.lists, note=generic.note.replace("unknown layout; ", ""))
    return Layout("controlnet", base.family, base.lists, note=base.note, order=base.order)


_T5_SIZES = {4096: "xxl", 2048: "xl", 1024: "large", 768: "base", 512: "small", 1472: "byt5_small"}
_LLMS = {
    (152064, 3584): "qwen25_7b", (151936, 2048): "qwen25_3b", (151936, 2560): "qwen3_4b",
    (128256, 4096): "llama3_8b", (128320, 4096): "llama3_8b", (256000, 2304): "gemma2_2b",
    (262208, 2560): "gemma3_4b", (262208, 3840): "gemma3_12b", (151936, 4096): "qwen3_8b",
    (151936, 5120): "qwen3_32b", (131072, 5120): "mistral3_24b",
}  # fmt: skip


def _text_encoders(keys: frozenset[str], t: Mapping[str, TensorEntry]) -> Layout | None:
    if "encoder.block.0.layer.0.SelfAttention.q.weight" in keys:
        d_model = _shape(t, "encoder.block.0.layer.0.SelfAttention.q.weight", 1) or 0
        vocab = _shape(t, "shared.weight", 0)
        umt5 = "encoder.block.1.layer.0.SelfAttention.relative_attention_bias.weight" in keys
        size = _T5_SIZES.get(d_model, str(d_model))
        family = size if size.startswith("byt5") else ("umt5" if umt5 else "t5") + size
        n = _count(keys, "encoder.block")
        return Layout(
            "text_encoder", family, ("encoder.block",), note=f"{n} layers, d_model {d_model}, vocab {vocab}"
        )
    if "text_model.encoder.layers.0.self_attn.q_proj.weight" in keys:
        width = _shape(t, "text_model.encoder.layers.0.self_attn.q_proj.weight", 0)
        family = {768: "clip_l", 1024: "clip_h", 1280: "clip_g"}.get(width or 0, f"clip_{width}")
        positions = _shape(t, "text_model.embeddings.position_embedding.weight", 0)
        note = f"{_count(keys, 'text_model.encoder.layers')} layers, width {width}"
        if positions and positions != 77:
            note += f", long CLIP ({positions} positions)"
        return Layout("text_encoder", family, ("text_model.encoder.layers",), note=note)
    if "transformer.resblocks.0.attn.in_proj_weight" in keys and "token_embedding.weight" in keys:
        width = _shape(t, "ln_final.weight", 0) or _shape(t, "token_embedding.weight", 1)
        family = {1024: "clip_h", 1280: "clip_g", 768: "clip_l"}.get(width or 0, f"clip_{width}")
        return Layout(
            "text_encoder", family, ("transformer.resblocks",), note=f"OpenCLIP layout, width {width}"
        )
    if "model.embed_tokens.weight" in keys and any(k.startswith("model.layers.0.") for k in keys):
        vocab = _shape(t, "model.embed_tokens.weight", 0)
        hidden = _shape(t, "model.norm.weight", 0) or _shape(t, "model.embed_tokens.weight", 1)
        family = _LLMS.get((vocab or 0, hidden or 0), f"llm_{hidden}")
        vision = any(k.startswith("visual.blocks.") for k in keys)
        if vision and family.startswith("qwen25"):
            family = family.replace("qwen25", "qwen25_vl")
        elif vision and family.startswith("qwen3_"):  # Qwen3-VL: the Qwen3 LM with its vision tower
            family = family.replace("qwen3_", "qwen3vl_")
        note = f"{_count(keys, 'model.layers')} layers, hidden {hidden}, vocab {vocab}" + (
            ", with vision tower" if vision else ""
        )
        lists = ("visual.blocks", "model.layers") if vision else ("model.layers",)  # images are encoded first
        return Layout("text_encoder", family, lists, note=note)
    return None


def _vaes(keys: frozenset[str], t: Mapping[str, TensorEntry]) -> Layout | None:
    if "decoder.middle.0.residual.0.gamma" in keys:
        wan22 = "decoder.upsamples.0.upsamples.0.residual.2.weight" in keys
        return Layout("vae", "wan22_vae" if wan22 else "wan21_vae", note="causal 3D VAE (Wan/Qwen-Image)")
    if "decoder.up_blocks.0.res_blocks.0.conv1.conv.weight" in keys:
        return Layout("vae", "ltxv_vae")
    if "decoder.conv_in.conv.weight" in keys:
        z = _shape(t, "decoder.conv_in.conv.weight", 1)
        family = {16: "hunyuan_video_vae", 32: "hunyuan_video15_vae"}.get(z or 0, f"vae3d_{z}ch")
        return Layout("vae", family, note=f"{z} latent channels")
    for key in ("decoder.conv_in.weight", "decoder.conv_in.conv.weight"):
        if key in keys:
            z = _shape(t, key, 1)
            if "decoder.mid.block_1.mix_factor" in keys:
                return Layout("vae", "svd_vae")
            family = {4: "sd_vae", 16: "flux_vae"}.get(z or 0, f"vae_{z}ch")
            return Layout("vae", family, note=f"{z} latent channels")
    if "taesd_decoder.1.weight" in keys or "decoder.layers.1.layers.0.beta" in keys:
        return Layout("vae", "taesd" if "taesd_decoder.1.weight" in keys else "oobleck_vae")
    return None


def _vision_and_others(keys: frozenset[str], t: Mapping[str, TensorEntry]) -> Layout | None:
    if "vision_model.encoder.layers.0.self_attn.q_proj.weight" in keys:
        width = _shape(t, "vision_model.encoder.layers.0.self_attn.q_proj.weight", 0)
        if "vision_model.pre_layrnorm.weight" not in keys:
            family = "siglip_so400m" if width == 1152 else f"siglip_{width}"
        else:
            family = {1280: "clip_vision_h", 1024: "clip_vision_l", 1664: "clip_vision_g"}.get(
                width or 0, f"clip_vision_{width}"
            )
        return Layout("clip_vision", family, ("vision_model.encoder.layers",), note=f"width {width}")
    if (
        "conv_first.weight" in keys and "body.0.rdb1.conv1.weight" in keys
    ) or "model.1.sub.0.RDB1.conv1.0.weight" in keys:
        return Layout("upscale_model", "esrgan", note="RRDB (ESRGAN)")
    if "feature_extractor.conv_layers.0.conv.weight" in keys:
        return Layout("audio_encoder", "wav2vec2", ("encoder.layers",))
    return None


# Kinds a file is whatever loader reads it: ComfyUI 0.33 loads detectors through UNETLoader, yet they
# are no diffusion model (no sampler steps, no latent activations).
OWN_KINDS = frozenset({"detector"})

# Order matters: the more specific layouts first.
_DETECTORS: tuple[Detector, ...] = (
    _controlnet, _flux_like, _wan, _dit_families, _unet, _text_encoders, _vaes, _vision_and_others,
)  # fmt: skip


def detect(keys: frozenset[str], t: Mapping[str, TensorEntry], kind: str | None) -> Layout | None:
    """The first detector's layout, with ``kind`` (the caller's loader) overriding the detected kind."""
    for detector in _DETECTORS:
        layout = detector(keys, t)
        if layout is not None:
            if kind and kind != layout.kind and kind != "checkpoint" and layout.kind not in OWN_KINDS:
                # The caller's loader decides the kind (a model_patch may look like a controlnet).
                note = f"layout of a {layout.kind}" + (f"; {layout.note}" if layout.note else "")
                return Layout(kind, layout.family, layout.lists, note, layout.order)
            return layout
    return None
