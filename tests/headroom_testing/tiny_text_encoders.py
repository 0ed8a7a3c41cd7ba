"""Tiny text encoders of the host's own classes, as CLIP objects the way its loaders build them.

The hosts build every text encoder from a fixed config (a json file or a dataclass), so small ones are
made by shrinking that config while the host builds the model (``tiny_text_configs``): widths drop to a
few dozen, vocabularies stay (the tokenizers' ids must fit). Weights are deterministic random
(``tiny_common``), written as .safetensors and loaded by the host:

- CLIP-L through the stock CLIPLoader, CLIP-L + CLIP-G through the stock DualCLIPLoader (type sdxl);
  CLIP-G keeps its 32 layers, which is what the loader detects it by.
- T5-XXL (Flux, with CLIP-L), UMT5 (Wan), Llama (HunyuanVideo, with CLIP-L) and Qwen2.5-VL (Qwen-Image):
  the loaders detect these by their full widths (T5's d_model 4096, ...), so the CLIP is built as
  ``comfy.sd.load_text_encoder_state_dicts`` builds it for that type (the same target function and
  tokenizer) and the file is loaded with the CLIP's own ``load_sd``.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from .tiny_common import _init_state_dict, _on_meta, _save

TINY_CLIP = {"hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 2, "projection_dim": 32}
TINY_T5 = {"d_model": 32, "d_ff": 64, "num_heads": 2, "d_kv": 16, "num_layers": 4}
TINY_LLAMA = {
    "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 4, "num_attention_heads": 2,
    "num_key_value_heads": 1,
}  # fmt: skip
TINY_VISION = {"hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "num_layers": 2}

# kind -> (module of comfy.text_encoders, target function, tokenizer class); None: the stock loaders
TARGETS: dict[str, tuple[str, str, str] | None] = {
    "clip_l": None,
    "sdxl": None,
    "flux": ("flux", "flux_clip", "FluxTokenizer"),
    "wan": ("wan", "te", "WanT5Tokenizer"),
    "hunyuan_video": ("hunyuan_video", "hunyuan_video_clip", "HunyuanVideoTokenizer"),
    "qwen_image": ("qwen_image", "te", "QwenImageTokenizer"),
}


def _shrink(config: dict, model_class: Any) -> dict:
    name = getattr(model_class, "__name__", "")
    module = getattr(model_class, "__module__", "")
    if name == "CLIPTextModel":
        return {**config, **TINY_CLIP}
    if name in ("T5", "UMT5") or "d_model" in config:
        return {**config, **TINY_T5}
    if module.endswith("text_encoders.llama"):
        return {**config, **TINY_LLAMA}
    return config


@contextlib.contextmanager
def tiny_text_configs() -> Iterator[None]:
    """While inside, every text encoder the host builds (``sd1_clip.SDClipModel`` and the encoders
    derived from it) is built from its config shrunk to tiny widths."""
    import comfy.sd1_clip as sd1_clip

    original = sd1_clip.SDClipModel.__init__
    signature = inspect.signature(original)

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        model_class = bound.arguments["model_class"]
        bound.arguments["model_class"] = lambda config, *a, **k: model_class(
            _shrink(config, model_class), *a, **k
        )
        original(*bound.args, **bound.kwargs)

    restore: list[tuple[Any, str, Any]] = [(sd1_clip.SDClipModel, "__init__", original)]
    sd1_clip.SDClipModel.__init__ = init
    try:
        qwen_vl = importlib.import_module("comfy.text_encoders.qwen_vl")
    except ImportError:
        qwen_vl = None
    if qwen_vl is not None:
        vision = qwen_vl.Qwen2VLVisionTransformer
        restore.append((qwen_vl, "Qwen2VLVisionTransformer", vision))
        qwen_vl.Qwen2VLVisionTransformer = lambda *a, **k: vision(*a, **{**k, **TINY_VISION})
    try:
        yield
    finally:
        for owner, name, value in restore:
            setattr(owner, name, value)


def available(kind: str) -> str:
    """Why this host cannot build ``kind``, or "" when it can."""
    target = TARGETS[kind]
    if target is None:
        return ""
    try:
        module = importlib.import_module(f"comfy.text_encoders.{target[0]}")
    except ImportError:
        return f"this host has no comfy.text_encoders.{target[0]} (no {kind} text encoder)"
    missing = [name for name in target[1:] if not hasattr(module, name)]
    if missing:
        return f"comfy.text_encoders.{target[0]} has no {', '.join(missing)}"
    return _tokenizer_files(module, target[2])


@functools.cache
def _tokenizer_files(module: Any, tokenizer: str) -> str:
    """Why the host's own tokenizer for a kind cannot load (a snapshot without its tokenizer files, such as
    0.33's ``llama_tokenizer/tokenizer.json``), or "". Printed, as the module placeholders' reasons are."""
    kwargs = (
        {"tokenizer_data": {"spiece_model": tiny_spiece_model()}} if tokenizer == "WanT5Tokenizer" else {}
    )
    try:
        getattr(module, tokenizer)(embedding_directory=None, **kwargs)
    except Exception as exc:
        detail = f"{type(exc).__name__}: {str(exc)[:160]}"
        reason = f"this host's {tokenizer} does not load ({detail}): its tokenizer files are absent"
        print(f"headroom harness: {reason}", file=sys.stderr)
        return reason
    return ""


def tiny_spiece_model() -> torch.Tensor:
    """A small sentencepiece model (UMT5's ids: pad 0, eos 1, unk 2), as the uint8 tensor real UMT5 files
    carry under ``spiece_model``: the host's UMT5 tokenizer has no model of its own."""
    import io

    import sentencepiece

    words = "a photograph of an astronaut riding horse the streamed text encoder layers on moon"
    corpus = [" ".join(words.split()[i:] + words.split()[:i]) for i in range(len(words.split()))] * 20
    proto = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus), model_writer=proto, vocab_size=48, model_type="bpe",
        pad_id=0, eos_id=1, unk_id=2, bos_id=-1, minloglevel=2,
    )  # fmt: skip
    return torch.frombuffer(bytearray(proto.getvalue()), dtype=torch.uint8)


def _clip_g() -> torch.nn.Module:
    import comfy.sdxl_clip

    return _on_meta(lambda: comfy.sdxl_clip.SDXLClipG(device="meta"))


def load_tiny_clip(host: Any, kind: str, models_dir: Path, seed: int = 0) -> Any:
    """The host's CLIP object for ``kind`` (see ``TARGETS``), tiny, fp32 files, random weights."""
    from .tiny_stock import build_clip_l

    with tiny_text_configs(), torch.inference_mode():  # as the host's executor runs its loaders
        target = TARGETS[kind]
        if kind == "clip_l":
            build_clip_l(models_dir, f"tiny_te_{kind}.safetensors", seed, torch.float32)
            return host.node_class("CLIPLoader")().load_clip(
                f"tiny_te_{kind}.safetensors", "stable_diffusion"
            )[0]
        if kind == "sdxl":
            build_clip_l(models_dir, "tiny_te_sdxl_l.safetensors", seed, torch.float32)
            g = _init_state_dict(_clip_g().transformer, seed + 1, torch.float32)
            _save(g, models_dir, "text_encoders", "tiny_te_sdxl_g.safetensors", "clip_g")
            loader = host.node_class("DualCLIPLoader")()
            names = ("tiny_te_sdxl_l.safetensors", "tiny_te_sdxl_g.safetensors")
            if "type" in inspect.signature(loader.load_clip).parameters:  # the 2024 loader is SDXL only
                return loader.load_clip(*names, "sdxl")[0]
            return loader.load_clip(*names)[0]
        assert target is not None
        import comfy.sd
        import comfy.utils

        module = importlib.import_module(f"comfy.text_encoders.{target[0]}")

        class Target:
            params: dict = {}
            clip = getattr(module, target[1])()
            tokenizer = getattr(module, target[2])

        if kind == "wan":  # the tokenizer model travels in the file, as in real UMT5 files
            clip = comfy.sd.CLIP(
                Target, embedding_directory=None, tokenizer_data={"spiece_model": tiny_spiece_model()}
            )
        else:
            clip = comfy.sd.CLIP(Target, embedding_directory=None)
        state = _init_state_dict(clip.cond_stage_model, seed, torch.float32)
        path = _save(state, models_dir, "text_encoders", f"tiny_te_{kind}.safetensors", kind)
        missing, _ = clip.load_sd(comfy.utils.load_torch_file(str(path), safe_load=True), full_model=True)
        assert not missing, missing
        return clip
