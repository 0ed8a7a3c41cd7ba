"""The calibration set of the predicted wall time: published run times, each with the workflow it ran.

Two kinds of case:

- a ComfyUI template whose own note times it on a named card (``TEMPLATE_CASES``): the template as the
  run was set up (``edits``), first run (models read from disk) or second run (models in RAM);
- a run published by a model's authors, a benchmark repository, a paper or an issue
  (``bench/data/published_runs.json``: each row quotes its source, the card, the settings and what the
  time includes), planned from the smallest stock ComfyUI workflow that runs that model at those
  settings (``published_prompt``).

Each case names its independent source (``source_id``: one author, organisation or repository), which
the held-out error leaves out as a whole. A row the time model cannot stand for (torch.compile, a
caching or step-skipping trick, several GPUs, a model file the catalog does not know) is kept and said
"not used", with why.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from comfyui_headroom.memory.planning.gpus import find_gpu

ROOT = Path(__file__).resolve().parents[1]
PUBLISHED = ROOT / "bench" / "data" / "published_runs.json"
KINDS = ("first run", "second run", "pipeline", "sampler", "step", "compute")


@dataclass(frozen=True)
class Case:
    name: str
    gpu: str
    measured_s: float
    kind: str  # KINDS: what the published time includes
    source: str
    source_id: str  # the independent source, left out as a whole by the held-out error
    family: str
    template: str = ""  # an official template (comfyui-workflow-templates-json), or
    prompt: dict[str, Any] = field(default_factory=dict)  # an API prompt built for the row
    edits: dict[str, Any] = field(default_factory=dict)  # template "node id:widget index" -> value
    setup: str = ""
    quote: str = ""
    skip: str = ""  # why the case is not used to fit or score ("" when it is)
    fp8_matmul: bool = False  # the run multiplied fp8 weights in fp8 (not cast to bf16)
    # a row whose settings the source does not state in full (the row assumed some): never fitted on,
    # scored apart as the wider set
    assumed: str = ""


_QWEN = "image_qwen_image: template note (GPU: RTX4090D 24GB table)"
_WAN22 = "{}: template note (GPU: RTX4090D 24GB table)"
_VACE = "{}: template note (RTX 4090, 720P, 81 frames)"
_LIGHTNING_QWEN = {"86:0": True}  # the template's "enable Lightning LoRA" toggle: 8 steps, cfg 1
_DISTILL = {"37:0": "qwen_image_distill_full_fp8_e4m3fn.safetensors", "84:0": 15, "85:0": 1.0}
_WAN_TOGGLE = {"video_wan2_2_14B_t2v": "129", "video_wan2_2_14B_i2v": "131"}
_TEMPLATES = "comfyui_templates"  # the templates' notes are one source: Comfy-Org's template authors


def _t(name: str, template: str, gpu: str, measured: float, kind: str, source: str, family: str,
       edits: dict[str, Any] | None = None, setup: str = "", skip: str = "") -> Case:  # fmt: skip
    return Case(
        name, gpu, measured, kind, source, _TEMPLATES, family, template, {}, edits or {}, setup, "", skip
    )


def _wan_cases() -> list[Case]:
    out = []
    measured = {"video_wan2_2_14B_t2v": (536, 513, 108, 71), "video_wan2_2_14B_i2v": (536, 513, 97, 71)}
    for template, (first, second, first4, second4) in measured.items():
        source = _WAN22.format(template)
        toggle = {f"{_WAN_TOGGLE[template]}:0": True}
        setup, setup4 = "640x640x81, 20 steps (10+10), cfg 3.5", "640x640x81, 4 steps (2+2), cfg 1"
        out += [
            _t(
                f"{template} fp8_scaled",
                template,
                "RTX 4090 D",
                first,
                "first run",
                source,
                "wan22",
                setup=setup,
            ),
            _t(
                f"{template} fp8_scaled",
                template,
                "RTX 4090 D",
                second,
                "second run",
                source,
                "wan22",
                setup=setup,
            ),
            _t(
                f"{template} + 4-step LoRA",
                template,
                "RTX 4090 D",
                first4,
                "first run",
                source,
                "wan22",
                toggle,
                setup4,
            ),
            _t(
                f"{template} + 4-step LoRA",
                template,
                "RTX 4090 D",
                second4,
                "second run",
                source,
                "wan22",
                toggle,
                setup4,
            ),
        ]
    return out


TEMPLATE_CASES: list[Case] = [
    _t("qwen_image fp8_e4m3fn", "image_qwen_image", "RTX 4090 D", 94, "first run", _QWEN, "qwen_image",
       setup="1328x1328, 20 steps, cfg 4"),
    _t("qwen_image fp8_e4m3fn", "image_qwen_image", "RTX 4090 D", 71, "second run", _QWEN, "qwen_image",
       setup="1328x1328, 20 steps, cfg 4"),
    _t("qwen_image + 8-step LoRA", "image_qwen_image", "RTX 4090 D", 55, "first run", _QWEN, "qwen_image",
       _LIGHTNING_QWEN, "1328x1328, 8 steps, cfg 1"),
    _t("qwen_image + 8-step LoRA", "image_qwen_image", "RTX 4090 D", 34, "second run", _QWEN, "qwen_image",
       _LIGHTNING_QWEN, "1328x1328, 8 steps, cfg 1"),
    _t("qwen_image distill fp8", "image_qwen_image", "RTX 4090 D", 69, "first run", _QWEN, "qwen_image",
       _DISTILL, "1328x1328, 15 steps, cfg 1 (the distilled model's settings)"),
    _t("qwen_image distill fp8", "image_qwen_image", "RTX 4090 D", 36, "second run", _QWEN, "qwen_image",
       _DISTILL, "1328x1328, 15 steps, cfg 1 (the distilled model's settings)"),
    *_wan_cases(),
    _t("wan_ati 14B fp8", "video_wan_ati", "RTX 4090 D", 500, "first run",
       "video_wan_ati: template note (4090D 24GB)", "wan21", setup="720x480x81, 20 steps, cfg 3"),
    _t("wan_ati 14B fp8", "video_wan_ati", "RTX 4090 D", 463, "second run",
       "video_wan_ati: template note (4090D 24GB)", "wan21", setup="720x480x81, 20 steps, cfg 3"),
    _t("wan_vace 14B fp16 + CausVid", "video_wan_vace_14B_ref2v", "RTX 4090", 240, "first run",
       _VACE.format("video_wan_vace_14B_ref2v"), "wan21", {"158:0": 1280, "159:0": 720},
       "1280x720x81, 4 steps, cfg 1 (\"about 4 minutes\")"),
    _t("wan_vace 14B fp16", "video_wan_vace_14B_ref2v", "RTX 4090", 2400, "first run",
       _VACE.format("video_wan_vace_14B_ref2v"), "wan21",
       {"158:0": 1280, "159:0": 720, "115:1": 0.0, "108:2": 20, "108:3": 6.0},
       "1280x720x81, 20 steps, cfg 6 (\"about 40 minutes\" without CausVid)"),
    _t("mage_flow turbo int8", "image_mage_flow_t2i_int8", "A100", 0.6, "compute",
       "image_mage_flow_t2i_int8: template note (Turbo row)", "other", {"6:2": 4, "6:3": 1.0},
       "1024x1024, 4 steps, cfg 1 (\"~0.6 s/image\")", skip="a family whose FLOPs are not counted"),
]  # fmt: skip


# --- published runs: the stock ComfyUI workflow of each family ---------------------------------------
# family -> (diffusion model loader and file by precision, text encoder loader, its files and type,
# VAE file, empty-latent node). A checkpoint family names its checkpoint for the model and no encoder.
@dataclass(frozen=True)
class Stack:
    model: dict[str, str]  # precision ("bf16", "fp8") -> file
    checkpoint: bool = False
    clip: tuple[str, ...] = ()
    clip_type: str = ""
    vae: str = ""
    latent: str = "EmptySD3LatentImage"


# the Wan stacks' encoder, VAE and latent (the 5B's own VAE and latent aside)
_WAN21: dict[str, Any] = {
    "clip": ("umt5_xxl_fp16.safetensors",),
    "clip_type": "wan",
    "vae": "wan_2.1_vae.safetensors",
    "latent": "EmptyHunyuanLatentVideo",
}
STACKS: dict[str, Stack] = {
    "flux": Stack(
        {"bf16": "flux1-dev.safetensors", "fp8": "flux1-dev-fp8.safetensors"},
        clip=("clip_l.safetensors", "t5xxl_fp16.safetensors"),
        clip_type="flux",
        vae="ae.safetensors",
    ),
    "flux_schnell": Stack(
        {"bf16": "flux1-schnell.safetensors", "fp8": "flux1-schnell-fp8.safetensors"},
        clip=("clip_l.safetensors", "t5xxl_fp16.safetensors"),
        clip_type="flux",
        vae="ae.safetensors",
    ),
    "sdxl": Stack({"bf16": "sd_xl_base_1.0.safetensors"}, checkpoint=True, latent="EmptyLatentImage"),
    "sd15": Stack(
        {"bf16": "v1-5-pruned-emaonly-fp16.safetensors"}, checkpoint=True, latent="EmptyLatentImage"
    ),
    "sd35_large": Stack(
        {"bf16": "sd3.5_large.safetensors", "fp8": "sd3.5_large_fp8_scaled.safetensors"}, checkpoint=True
    ),
    "hunyuan_video": Stack(
        {"bf16": "hunyuan_video_t2v_720p_bf16.safetensors"},
        clip=("clip_l.safetensors", "llava_llama3_fp16.safetensors"),
        clip_type="hunyuan_video",
        vae="hunyuan_video_vae_bf16.safetensors",
        latent="EmptyHunyuanLatentVideo",
    ),
    "hunyuan_video15": Stack(
        {"bf16": "hunyuanvideo1.5_720p_t2v_fp16.safetensors"},
        clip=("qwen_2.5_vl_7b.safetensors", "byt5_small_glyphxl_fp16.safetensors"),
        clip_type="hunyuan_video_15",
        vae="hunyuanvideo15_vae_fp16.safetensors",
        latent="EmptyHunyuanVideo15Latent",
    ),
    "wan21_14b": Stack(
        {"bf16": "wan2.1_t2v_14B_bf16.safetensors", "fp8": "wan2.1_t2v_14B_fp8_scaled.safetensors"},
        **_WAN21,
    ),
    "wan21_1.3b": Stack(
        {"bf16": "wan2.1_t2v_1.3B_bf16.safetensors"},
        **_WAN21,
    ),
    "wan22_14b": Stack(
        {
            "bf16": "wan2.2_t2v_high_noise_14B_fp16.safetensors",
            "fp8": "wan2.2_t2v_high_noise_14B_fp8_scaled.safetensors",
        },
        **_WAN21,
    ),
    "wan22_5b": Stack(
        {"bf16": "wan2.2_ti2v_5B_fp16.safetensors"},
        clip=("umt5_xxl_fp16.safetensors",),
        clip_type="wan",
        vae="wan2.2_vae.safetensors",
        latent="Wan22ImageToVideoLatent",
    ),
    "qwen_image": Stack(
        {"bf16": "qwen_image_bf16.safetensors", "fp8": "qwen_image_fp8_e4m3fn.safetensors"},
        clip=("qwen_2.5_vl_7b.safetensors",),
        clip_type="qwen_image",
        vae="qwen_image_vae.safetensors",
    ),
    "ltxv": Stack(
        {"bf16": "ltx-video-2b-v0.9.5.safetensors"},
        checkpoint=True,
        clip=("t5xxl_fp16.safetensors",),
        clip_type="ltxv",
        latent="EmptyLTXVLatentVideo",
    ),
    "z_image": Stack(
        {"bf16": "z_image_turbo_bf16.safetensors"},
        clip=("qwen_3_4b.safetensors",),
        clip_type="lumina2",
        vae="ae.safetensors",
    ),
}


def stack_of(row: dict[str, Any]) -> str | None:
    """Which STACKS entry runs the row's model, or None for a model the catalog does not know."""
    family, model = row.get("family", ""), str(row.get("model", "")).lower()
    if family == "flux":
        return (
            "flux_schnell"
            if "schnell" in model
            else "flux"
            if "flux.1" in model or "flux1" in model
            else None
        )
    if family in ("wan21", "wan22"):
        size = "1.3b" if "1.3b" in model else "5b" if "5b" in model else "14b" if "14b" in model else None
        if size is None or (family, size) in (("wan21", "5b"), ("wan22", "1.3b")):
            return None
        return f"{family}_{size}"
    if family == "sd3":
        return "sd35_large" if "large" in model and "turbo" not in model else None
    if family == "hunyuan_video15" or (family == "hunyuan_video" and "1.5" in model):
        return "hunyuan_video15"
    if family == "ltxv":  # the catalog has the 2B files only
        return None if "13b" in model or re.search(r"0\.9\.[7-9]", model) else "ltxv"
    return family if family in STACKS else None


def published_prompt(row: dict[str, Any]) -> dict[str, Any]:
    """The API prompt of a stock ComfyUI workflow running ``row``'s model at its settings: loaders, a
    positive and a negative prompt, the empty latent, one KSampler (cfg 1 when the run had no
    classifier-free guidance, so one model call a step), the decode."""
    name = stack_of(row)
    if name is None:
        raise ValueError(f"no stock workflow for {row.get('model')!r} ({row.get('family')})")
    stack = STACKS[name]
    precision = (
        "fp8" if str(row.get("precision") or "").startswith("fp8") and "fp8" in stack.model else "bf16"
    )
    p: dict[str, Any] = {}
    if stack.checkpoint:
        p["1"] = {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": stack.model[precision]}}
        model, clip, vae = ["1", 0], ["1", 1], ["1", 2]
    else:
        p["1"] = {
            "class_type": "UNETLoader",
            "inputs": {"unet_name": stack.model[precision], "weight_dtype": "default"},
        }
        model = ["1", 0]
    if stack.clip:
        if len(stack.clip) == 1:
            p["2"] = {
                "class_type": "CLIPLoader",
                "inputs": {"clip_name": stack.clip[0], "type": stack.clip_type},
            }
        else:
            p["2"] = {
                "class_type": "DualCLIPLoader",
                "inputs": {"clip_name1": stack.clip[0], "clip_name2": stack.clip[1], "type": stack.clip_type},
            }
        clip = ["2", 0]
    if stack.vae:
        p["3"] = {"class_type": "VAELoader", "inputs": {"vae_name": stack.vae}}
        vae = ["3", 0]
    for key, text in (("4", "a photo"), ("5", "")):
        p[key] = {"class_type": "CLIPTextEncode", "inputs": {"text": text, "clip": clip}}
    size = {
        "width": int(row["width"]),
        "height": int(row["height"]),
        "batch_size": int(row.get("batch") or 1),
    }
    if stack.latent != "EmptyLatentImage" and stack.latent != "EmptySD3LatentImage":
        size["length"] = int(row.get("frames") or 1)
    if stack.latent == "Wan22ImageToVideoLatent":
        size["vae"] = vae
    p["6"] = {"class_type": stack.latent, "inputs": size}
    p["7"] = {
        "class_type": "KSampler",
        "inputs": {
            "model": model,
            "seed": 0,
            "steps": int(row.get("steps") or 20),
            "cfg": 5.0 if row.get("cfg") else 1.0,
            "sampler_name": "euler",
            "scheduler": "simple",
            "positive": ["4", 0],
            "negative": ["5", 0],
            "latent_image": ["6", 0],
            "denoise": 1.0,
        },
    }
    p["8"] = {"class_type": "VAEDecode", "inputs": {"samples": ["7", 0], "vae": vae}}
    p["9"] = {"class_type": "SaveImage", "inputs": {"images": ["8", 0], "filename_prefix": "x"}}
    return p  # fmt: skip


_KIND = {"pipeline": "pipeline", "sampler": "sampler", "step": "step", "first_run": "first run",
         "second_run": "second run"}  # fmt: skip
# What the time model does not stand for: a faster path than the stock host's
_NOT_STOCK = re.compile(
    r"teacache|fbcache|first.block|cache-dit|magcache|step.?distill|sparse|sage|fp4|int4|int8|nunchaku|tensorrt|"
    r"xdit|usp|ring|ulysses|context.parallel|cpu.offload|offload|fa3|flashattention.?3|flash.?attn.?3",
    re.I,
)


def card_name(text: str) -> str:
    """The card a row names ("A100 (80GB)", "H100/H800", "A100 80GB 400W"): the name before any bracket,
    slash or power figure, for the table's exact lookup."""
    return re.sub(r"\b\d+\s*W\b.*", "", re.split(r"[(/]", text)[0]).strip()


def skip_reason(row: dict[str, Any]) -> str:
    """Why a published row cannot calibrate the time model ("" when it can)."""
    notes = str(row.get("notes") or "")
    if row.get("compile") or re.search(r"compile\s*=|reduce-overhead|torch\.compile", notes):
        return "torch.compile"
    if str(row.get("precision") or "").lower().startswith("fp32"):
        return "fp32 compute (the stock host runs these models in fp16/bf16)"
    for hit in re.finditer(r"offload", notes, re.I):
        if not re.search(
            r"\b(no|without|disabled?|not)\b[^.;]{0,14}$", notes[max(0, hit.start() - 24) : hit.start()], re.I
        ):
            return "weights offloaded to the CPU during the run (a transfer the row does not size)"
    text = " ".join(str(row.get(k) or "") for k in ("attention", "notes", "model", "precision"))
    if row.get("gpus", 1) not in (1, None) or re.search(r"\b[2-8]\s*x?\s*gpus?\b|multi.?gpu", text, re.I):
        return "several GPUs"
    found = _NOT_STOCK.search(" ".join(str(row.get(k) or "") for k in ("attention", "model", "precision")))
    if found:
        return f"not the stock path ({found.group(0)})"
    if find_gpu(card_name(str(row.get("gpu")))) is None:
        return f"a card the table does not have ({row.get('gpu')})"
    if stack_of(row) is None:
        return "a model the catalog does not know (its size would be estimated)"
    if _KIND.get(str(row.get("includes"))) is None:
        return f"unknown span {row.get('includes')!r}"
    return ""


def _fp8_matmul(row: dict[str, Any]) -> bool:
    text = " ".join(str(row.get(k) or "") for k in ("precision", "model"))
    return bool(re.search(r"fp8.{0,12}(matmul|compute|gemm|dynamic)|float8.?(dq|dynamic)", text, re.I))


def assumed_reason(row: dict[str, Any]) -> str:
    """Why a usable row is not fitted on: settings it had to assume, or a doubt its notes give."""
    if re.search(r"\b(not stated|assumed|inferred)\b", str(row.get("notes") or ""), re.I):
        return "settings the source does not state in full (the row assumed some)"
    return ""


def published_cases(path: Path = PUBLISHED) -> list[Case]:
    rows = json.loads(path.read_text(encoding="utf-8")) if path.exists() else []
    out = []
    for row in rows:
        skip = skip_reason(row)
        prompt = {} if skip else published_prompt(row)
        frames = int(row.get("frames") or 1)
        size = f"{row.get('width')}x{row.get('height')}" + (f"x{frames}" if frames > 1 else "")
        setup = f"{size}, {row.get('steps')} steps, {'cfg' if row.get('cfg') else 'no cfg'}"
        if (row.get("batch") or 1) > 1:
            setup += f", batch {row['batch']}"
        out.append(
            Case(
                f"{row.get('model')} {row.get('precision') or ''}".strip(),
                str(row["gpu"]),
                float(row["measured_s"]),
                _KIND.get(str(row.get("includes")), str(row.get("includes"))),
                str(row["source"]),
                str(row["source_id"]),
                str(row.get("family")),
                prompt=prompt,
                setup=setup,
                quote=str(row.get("quote") or ""),
                skip=skip,
                fp8_matmul=_fp8_matmul(row),
                assumed="" if skip else assumed_reason(row),
            )
        )
    return out


def all_cases() -> list[Case]:
    return TEMPLATE_CASES + published_cases()
