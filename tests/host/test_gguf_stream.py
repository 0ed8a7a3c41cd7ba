"""GGUF models (city96/ComfyUI-GGUF) stream through Stream Model: a tiny Wan 2.1 DiT quantized to Q8_0
and Q4_K, loaded by the real pack's UnetLoaderGGUF in the host's executor, samples through Stream
Model to the latent of the pack's own unstreamed sampling, bit for bit (fp32 compute, CPU). The
streamed blocks compute from the streamer's ring with their GGML bytes moved as they are (still
quantized: the pack's layers dequantize them in forward), and afterwards every weight is back, its
quant type and shape with it. LoRA patches, which the pack applies in forward from its weights'
``patches``, stream with them; a GGUF UMT5 text encoder read by the pack's own loader streams through
Stream CLIP to the pack's own conditioning.

The pack is a public repository the tests get the way they get the host, never committed:
``HEADROOM_GGUF_PACK`` names its folder (default ``../packs/ComfyUI-GGUF`` beside the repository);
without it these tests skip saying so. It needs the ``gguf`` package (``pip install gguf``).
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from headroom_testing import fixture_nodes as fx
from headroom_testing.harness import Host
from headroom_testing.stream_spy import StreamSpy, assert_streamed, budget_gb
from headroom_testing.tiny_gguf import build_tiny_wan_gguf
from headroom_testing.tiny_models import tiny_wan_conditioning

pytestmark = pytest.mark.host

STEPS = 2
REPO = Path(__file__).resolve().parents[2]
DEFAULT_PACK = REPO.parent / "packs" / "ComfyUI-GGUF"


def gguf_pack_dir() -> Path | None:
    """``$HEADROOM_GGUF_PACK``, else ``../packs/ComfyUI-GGUF`` beside the repository, if it is the pack."""
    env = os.environ.get("HEADROOM_GGUF_PACK")
    path = Path(env).expanduser() if env else DEFAULT_PACK
    return path if (path / "nodes.py").is_file() and (path / "ops.py").is_file() else None


@pytest.fixture(scope="module")
def gguf_host(host: Host) -> Iterator[Host]:
    """The host with ComfyUI-GGUF loaded as the host loads any pack (``nodes.load_custom_node``)."""
    if host.legacy:
        pytest.skip("the 2024 host has no Wan model class, which the tiny GGUF model is (current hosts only)")
    if importlib.util.find_spec("gguf") is None:
        pytest.skip("ComfyUI-GGUF needs the gguf package: pip install gguf")
    pack = gguf_pack_dir()
    if pack is None:
        pytest.skip(
            "ComfyUI-GGUF not found: git clone https://github.com/city96/ComfyUI-GGUF and set "
            f"HEADROOM_GGUF_PACK to it (default {DEFAULT_PACK})"
        )
    if "UnetLoaderGGUF" not in host.nodes.NODE_CLASS_MAPPINGS:
        link = host.pack_dir.parent / "ComfyUI-GGUF"
        if not link.exists():
            link.symlink_to(pack.resolve(), target_is_directory=True)
        loaded = host.nodes.load_custom_node(str(link))
        loaded = asyncio.run(loaded) if asyncio.iscoroutine(loaded) else loaded
        assert loaded and "UnetLoaderGGUF" in host.nodes.NODE_CLASS_MAPPINGS, "ComfyUI-GGUF did not load"
    fx.install(host)
    yield host
    fx.VALUES.clear()  # release the models before the interpreter's shutdown (their __del__ needs the host)


def _prompt(file: str, keys: dict[str, str], budget: str | None) -> dict:
    """UnetLoaderGGUF (or a MODEL source for ``file`` "value-...") -> (Stream Model) -> KSampler, cfg on
    (cond and uncond)."""
    model = ["u", 0] if budget is None else ["x", 0]
    loader = {"class_type": "UnetLoaderGGUF", "inputs": {"unet_name": file}}
    nodes = {
        "u": fx.source("MODEL", file) if file.startswith("value-") else loader,
        "p": fx.source("CONDITIONING", keys["p"]),
        "n": fx.source("CONDITIONING", keys["n"]),
        "l": fx.source("LATENT", keys["l"]),
        "o": {
            "class_type": "KSampler",
            "inputs": {
                "model": model,
                "seed": 5,
                "steps": STEPS,
                "cfg": 4.0,
                "sampler_name": "euler",
                "scheduler": "simple",
                "positive": ["p", 0],
                "negative": ["n", 0],
                "latent_image": ["l", 0],
                "denoise": 1.0,
            },
        },  # fmt: skip
        "keep": fx.sink(["o", 0]),
    }
    if budget is not None:
        nodes["x"] = {
            "class_type": "HeadroomStreamModel",
            "inputs": {"model": ["u", 0], "vram_budget": budget},
        }
    return nodes


def _ggml_state(diffusion: torch.nn.Module) -> dict[str, tuple[Any, tuple[int, ...], torch.Tensor]]:
    """Each parameter's GGML type, logical shape and stored bytes (a copy: GGMLTensor.clone is itself)."""
    return {
        name: (getattr(p, "tensor_type", None), tuple(p.shape), p.as_subclass(torch.Tensor).detach().clone())
        for name, p in diffusion.named_parameters()
    }


def _inputs() -> dict[str, str]:
    return {
        "p": fx.put(tiny_wan_conditioning(seed=1)),
        "n": fx.put(tiny_wan_conditioning(seed=2)),
        "l": fx.put({"samples": torch.zeros(1, 16, 1, 8, 8)}),
    }


@pytest.mark.parametrize("qtype", ["Q8_0", "Q4_K"])
def test_a_gguf_model_streams_to_the_packs_own_latent(
    gguf_host: Host, monkeypatch: pytest.MonkeyPatch, qtype: str
) -> None:
    host = gguf_host
    file = f"tiny_wan21_stream_{qtype.lower()}.gguf"
    build_tiny_wan_gguf(host.models_dir, qtype, name=file, seed=7)
    host.register_models_dir(host.models_dir)
    keys = _inputs()
    stock = host.run(_prompt(file, keys, None)).outputs["o"][0][0]["samples"]
    model = host.output("u")[0][0]  # output 0, its only value
    diffusion = model.model.diffusion_model
    quantized = [p for p in diffusion.parameters() if getattr(p, "tensor_type", None) is not None]
    assert any(getattr(p.tensor_type, "name", "") == qtype for p in quantized), "the pack loaded GGML weights"
    before = _ggml_state(diffusion)
    spy = StreamSpy(host, monkeypatch)
    streamed = host.run(_prompt(file, keys, budget_gb(diffusion))).outputs["o"][0][0]["samples"]

    assert torch.isfinite(stock).all() and stock.std() > 0
    assert torch.equal(streamed, stock)
    (watched,) = spy.watched
    assert watched.streamer.model is diffusion
    assert_streamed(watched, STEPS)
    moved = sum(e.nbytes for entries in watched.streamer._entries.values() for e in entries)
    assert moved == watched.streamer.stats.streamed_bytes > 0
    # the GGML bytes moved as they are: the host buffer holds the quantized size, not a dequantized one
    streamed_params = {
        id(p) for i in watched.streamer.streamed for p in watched.streamer.layout.blocks[i][1].parameters()
    }
    stored = sum(
        p.as_subclass(torch.Tensor).nbytes for p in diffusion.parameters() if id(p) in streamed_params
    )
    assert moved == stored
    assert not watched.streamer.attached
    assert not any(m._forward_pre_hooks or m._forward_hooks for m in diffusion.modules()), "unhooked"
    after = _ggml_state(diffusion)
    assert after.keys() == before.keys()
    for name, (qt, shape, data) in before.items():
        assert after[name][0] == qt and after[name][1] == shape, name
        assert torch.equal(after[name][2], data), f"{name} changed"


def test_lora_patches_on_gguf_weights_stream_with_them(
    gguf_host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ComfyUI-GGUF applies a LoRA in each layer's forward from the ``patches`` its weights carry: the
    streamed blocks' weights carry them too."""
    host = gguf_host
    file = "tiny_wan21_stream_lora.gguf"
    build_tiny_wan_gguf(host.models_dir, "Q8_0", name=file, seed=9)
    host.register_models_dir(host.models_dir)
    with torch.inference_mode():
        (base,) = host.node_class("UnetLoaderGGUF")().load_unet(file)
    patched = base.clone()
    gen = torch.Generator().manual_seed(4)
    targets = [f"diffusion_model.blocks.{i}.self_attn.q.weight" for i in range(4)]
    added = patched.add_patches({k: (torch.randn(256, 256, generator=gen) * 0.05,) for k in targets}, 1.0)
    assert sorted(added) == sorted(targets)
    keys = _inputs()
    plain = host.run(_prompt(fx.put(base), keys, None)).outputs["o"][0][0]["samples"]
    stock = host.run(_prompt(fx.put(patched), keys, None)).outputs["o"][0][0]["samples"]
    spy = StreamSpy(host, monkeypatch)
    budget = budget_gb(patched.model.diffusion_model)
    streamed = host.run(_prompt(fx.put(patched), keys, budget)).outputs["o"][0][0]["samples"]
    assert not torch.equal(stock, plain), "the patches change the result"
    assert torch.equal(streamed, stock)
    (watched,) = spy.watched
    assert_streamed(watched, STEPS)


# llama.cpp's T5 names, the reverse of ComfyUI-GGUF's loader.py T5_SD_MAP (longest first)
_T5_TO_GGUF = (
    ("encoder.block.", "enc.blk."), ("encoder.final_layer_norm", "enc.output_norm"),
    ("shared.", "token_embd."),
    ("layer.0.SelfAttention.relative_attention_bias", "attn_rel_b"), ("layer.0.SelfAttention.q", "attn_q"),
    ("layer.0.SelfAttention.k", "attn_k"), ("layer.0.SelfAttention.v", "attn_v"),
    ("layer.0.SelfAttention.o", "attn_o"), ("layer.0.layer_norm", "attn_norm"),
    ("layer.1.DenseReluDense.wi_0", "ffn_gate"), ("layer.1.DenseReluDense.wi_1", "ffn_up"),
    ("layer.1.DenseReluDense.wo", "ffn_down"), ("layer.1.layer_norm", "ffn_norm"),
)  # fmt: skip


def _pack_module(name: str) -> Any:
    return next(m for n, m in sys.modules.items() if n.endswith(f"ComfyUI-GGUF.{name}"))


def _gguf_umt5(host: Host) -> Any:
    """A tiny UMT5 (Wan's text encoder) written as a llama.cpp-named GGUF and read back the way
    CLIPLoaderGGUF reads it: the pack's ``gguf_clip_loader``, its GGMLOps, its GGUFModelPatcher. The
    stock detection wants UMT5's full width, so the CLIP is built for type "wan" directly (as
    tiny_text_encoders.load_tiny_clip does)."""
    import comfy.model_management
    import comfy.sd

    from headroom_testing.tiny_common import _init_state_dict
    from headroom_testing.tiny_gguf import write_gguf
    from headroom_testing.tiny_text_encoders import tiny_spiece_model, tiny_text_configs

    wan = importlib.import_module("comfy.text_encoders.wan")

    class Target:
        params: dict = {}
        clip = wan.te()
        tokenizer = wan.WanT5Tokenizer

    def build(options: dict) -> Any:
        return comfy.sd.CLIP(
            Target, embedding_directory=None, tokenizer_data={"spiece_model": tiny_spiece_model()},
            model_options=options,
        )  # fmt: skip

    with tiny_text_configs(), torch.inference_mode():
        state = _init_state_dict(build({}).cond_stage_model, 3, torch.float32)
        prefix = "umt5xxl.transformer."
        names = {}
        for key in (k for k in state if k.startswith(prefix)):
            new = key[len(prefix) :]
            for a, b in _T5_TO_GGUF:
                new = new.replace(a, b)
            names[new] = state[key]
        path = write_gguf(
            host.models_dir / "text_encoders" / "tiny-umt5-Q8_0.gguf", names, "t5encoder", "Q8_0"
        )
        options = {
            "custom_operations": _pack_module("ops").GGMLOps,
            "initial_device": comfy.model_management.text_encoder_offload_device(),
        }
        clip = build(options)
        missing, _ = clip.load_sd(_pack_module("loader").gguf_clip_loader(str(path)))
        assert not [k for k in missing if "logit_scale" not in k], missing
        clip.patcher = _pack_module("nodes").GGUFModelPatcher.clone(clip.patcher)
    return clip


def test_a_gguf_text_encoder_streams_to_the_packs_own_conditioning(
    gguf_host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = gguf_host
    if "HeadroomStreamCLIP" not in host.nodes.NODE_CLASS_MAPPINGS:
        pytest.skip("this pack has no Stream CLIP node")
    clip = _gguf_umt5(host)
    encoder = clip.cond_stage_model
    quantized = [
        p for p in encoder.parameters() if getattr(getattr(p, "tensor_type", None), "name", "") == "Q8_0"
    ]
    assert len(quantized) >= 8, "the pack loaded GGML weights"
    before = _ggml_state(encoder)
    encode = host.node_class("CLIPTextEncode")().encode
    with torch.inference_mode():
        (stock,) = encode(clip, "a photograph of an astronaut riding a horse")
    layers = host.pack_module("memory.streaming.text_layouts").discover_text_blocks(encoder).block_bytes()
    rest = host.pack_module("memory.streaming.discovery").module_bytes(encoder) - sum(layers)
    budget = f"{(rest + 0.3 * sum(layers) + 2 * max(layers) + 1) / 2**30:.12f}"
    spy = StreamSpy(host, monkeypatch)
    with torch.inference_mode():
        (streamed_clip,) = host.node_class("HeadroomStreamCLIP")().stream(clip, vram_budget=budget)["result"]
        (streamed,) = encode(streamed_clip, "a photograph of an astronaut riding a horse")
    assert torch.equal(streamed[0][0], stock[0][0]) and stock[0][0].std() > 0
    (streamer,) = spy.streamers()
    assert streamer.model is encoder and len(streamer.streamed) >= 2 and streamer.stats.uploads > 0
    assert not streamer.attached
    after = _ggml_state(encoder)
    for name, (qt, shape, data) in before.items():
        assert after[name][0] == qt and after[name][1] == shape, name
        assert torch.equal(after[name][2], data), f"{name} changed"
