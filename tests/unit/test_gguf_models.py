"""GGUF model files (city96/ComfyUI-GGUF's format) are planned from their header: family, blocks and the
quantized bytes the pack's loaders hold, read with the ``gguf`` package; without it they are sized
from the disk, saying how to fix it. Files are written here as the pack's convert.py writes them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from comfyui_headroom.memory.models import catalog
from comfyui_headroom.memory.models.gguf import describe_gguf, read_gguf
from comfyui_headroom.memory.models.header import ComponentError
from comfyui_headroom.memory.optional import optional_module
from headroom_testing.component_layouts import t5_layout, wan_layout

gguf = pytest.importorskip("gguf", reason="the gguf package is not installed (pip install gguf)")
from headroom_testing.tiny_gguf import quantize_q4_k, write_gguf  # noqa: E402  (needs gguf)


def _values(layout: dict[str, tuple[int, ...]], seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {k: rng.standard_normal(shape).astype(np.float32) for k, shape in layout.items()}


def _ggml_bytes(shape: tuple[int, ...], qtype: str) -> int:
    block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[qtype]]
    return int(np.prod(shape)) // block * size


@pytest.mark.parametrize("qtype", ["Q8_0", "Q4_K"])
def test_a_quantized_wan_is_described_from_its_header(tmp_path: Path, qtype: str) -> None:
    layout = wan_layout(blocks=3, dim=256)
    path = write_gguf(tmp_path / "wan.gguf", _values(layout), "wan", qtype)
    tensors, metadata = read_gguf(path)
    assert metadata["general.architecture"] == "wan"
    assert tensors.keys() == layout.keys()
    for key, shape in layout.items():  # torch order, the original shape of reshaped tensors
        assert tensors[key].shape == shape, key
    q = tensors["blocks.0.ffn.0.weight"]
    assert (q.qtype, q.dtype, q.nbytes) == (qtype, f"gguf_{qtype.lower()}", _ggml_bytes((256, 256), qtype))
    assert tensors["patch_embedding.weight"].qtype == "F16"  # 5-D: kept unquantized, its shape recorded
    assert tensors["blocks.0.modulation"].qtype == "F32"

    info = describe_gguf(path)
    assert (info.kind, info.family, info.source) == ("diffusion_model", "wan21", "header")
    assert info.dtype == f"gguf_{qtype.lower()}" and f"GGUF wan; bytes by type: {qtype}" in info.note
    assert info.bytes == sum(t.nbytes for t in tensors.values()) < path.stat().st_size
    assert [b.name for b in info.blocks] == ["blocks.0", "blocks.1", "blocks.2"]
    block0 = sum(t.nbytes for k, t in tensors.items() if k.startswith("blocks.0."))
    assert all(b.bytes == block0 for b in info.blocks)
    # quantized: a Q4_K block is about half the Q8_0 one, a quarter of fp16
    fp16 = sum(2 * int(np.prod(s)) for k, s in layout.items() if k.startswith("blocks.0."))
    assert block0 < (0.6 if qtype == "Q4_K" else 1.1) * fp16 / 2


def test_the_checkpoint_prefix_is_dropped_as_the_loader_drops_it(tmp_path: Path) -> None:
    layout = wan_layout(blocks=2, dim=64)
    values = {f"model.diffusion_model.{k}": v for k, v in _values(layout).items()}
    values["first_stage_model.decoder.conv_in.weight"] = np.ones((4, 4, 3, 3), np.float32)  # not loaded
    info = describe_gguf(write_gguf(tmp_path / "prefixed.gguf", values, "wan", "Q8_0"))
    assert info.family == "wan21" and [b.name for b in info.blocks] == ["blocks.0", "blocks.1"]
    assert info.bytes == sum(t.nbytes for t in read_gguf(tmp_path / "prefixed.gguf")[0].values())


# llama.cpp's names for the T5 tensors of t5_layout (the pack maps them back; loader.py T5_SD_MAP)
_T5_GGUF = {
    "shared.weight": "token_embd.weight",
    "encoder.final_layer_norm.weight": "enc.output_norm.weight",
    "layer.0.SelfAttention.q.weight": "attn_q.weight",
    "layer.1.DenseReluDense.wi_0.weight": "ffn_gate.weight",
    "layer.0.SelfAttention.relative_attention_bias.weight": "attn_rel_b.weight",
}


def _llama_cpp_t5(layout: dict[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    out = {}
    for key, shape in layout.items():
        if key in _T5_GGUF:
            out[_T5_GGUF[key]] = shape
            continue
        _, _, n, rest = key.split(".", 3)  # encoder.block.N.<rest>
        out[f"enc.blk.{n}.{_T5_GGUF[rest]}"] = shape
    return out


def test_a_llama_cpp_t5_encoder_is_mapped_to_its_blocks(tmp_path: Path) -> None:
    layout = t5_layout(d_model=64, vocab=512, layers=3, umt5=True)
    path = write_gguf(tmp_path / "umt5-Q8_0.gguf", _values(_llama_cpp_t5(layout)), "t5encoder", "Q8_0")
    info = catalog.lookup("umt5-Q8_0.gguf", "text_encoder", _models(tmp_path, path, "text_encoders"))
    assert (info.kind, info.family, info.source) == ("text_encoder", "umt564", "header")
    assert [b.name for b in info.blocks] == ["encoder.block.0", "encoder.block.1", "encoder.block.2"]


def test_a_large_vocabulary_counts_as_the_fp16_the_loader_dequantizes_it_to(tmp_path: Path) -> None:
    vocab, hidden = 64 * 1024, 32
    values = {
        "token_embd.weight": np.zeros((vocab, hidden), np.float32),
        "blk.0.attn_q.weight": np.zeros((hidden, hidden), np.float32),
        "blk.0.ffn_gate.weight": np.zeros((64, hidden), np.float32),
        "blk.1.attn_q.weight": np.zeros((hidden, hidden), np.float32),
        "blk.1.ffn_gate.weight": np.zeros((64, hidden), np.float32),
        "output_norm.weight": np.ones((hidden,), np.float32),
    }
    tensors, _ = read_gguf(write_gguf(tmp_path / "llm.gguf", values, "llama", "Q8_0"))
    embed = tensors["model.embed_tokens.weight"]
    assert (embed.qtype, embed.dtype, embed.nbytes) == ("Q8_0", "fp16", 2 * vocab * hidden)
    assert tensors["model.layers.1.mlp.gate_proj.weight"].nbytes == _ggml_bytes((64, hidden), "Q8_0")


def _models(tmp_path: Path, path: Path, folder: str) -> Path:
    root = tmp_path / "models"
    (root / folder).mkdir(parents=True, exist_ok=True)
    path.rename(root / folder / path.name)
    return root


def test_without_the_gguf_package_the_file_is_sized_from_the_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_gguf(tmp_path / "flux1-dev-Q4_K.gguf", _values(wan_layout(blocks=2, dim=64)), "wan", "Q4_K")
    root = _models(tmp_path, path, "diffusion_models")
    monkeypatch.setitem(sys.modules, "gguf", None)  # makes `import gguf` fail, as if not installed
    optional_module.cache_clear()
    try:
        info = catalog.lookup("flux1-dev-Q4_K.gguf", "diffusion_model", root)
        with pytest.raises(ComponentError, match=r"needs the gguf package \(pip install gguf\)"):
            read_gguf(root / "diffusion_models" / path.name)
    finally:
        optional_module.cache_clear()
    assert info.source == "estimate" and info.bytes == (root / "diffusion_models" / path.name).stat().st_size
    assert "pip install gguf" in info.note and info.dtype == "gguf_q4"


def test_a_broken_gguf_file_is_a_component_error_naming_it(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "wan.gguf", _values(wan_layout(blocks=2, dim=64)), "wan", "Q8_0")
    whole = path.read_bytes()
    path.write_bytes(whole[:-100])  # a download cut in the weights
    with pytest.raises(
        ComponentError, match=r"wan.gguf: tensor .* of a \d+-byte file \(truncated download\?\)"
    ):
        describe_gguf(path)
    path.write_bytes(whole[:200])  # cut in the header
    with pytest.raises(ComponentError, match="wan.gguf: truncated header"):
        describe_gguf(path)
    path.write_bytes(whole[:24] + (77).to_bytes(8, "little") + whole[32:])  # the first field's key: 77 bytes
    with pytest.raises(ComponentError, match="wan.gguf: "):
        describe_gguf(path)
    (tmp_path / "other.gguf").write_bytes(b"not a gguf file at all")
    with pytest.raises(ComponentError, match="other.gguf: not a GGUF file"):
        describe_gguf(tmp_path / "other.gguf")


def test_q4_k_quantizer_round_trips_through_ggufs_own_dequantize() -> None:
    x = np.random.default_rng(3).standard_normal((6, 512)).astype(np.float32) * 0.05
    q = quantize_q4_k(x)
    assert q.shape == (6, 2 * 144) and q.dtype == np.uint8
    y = gguf.quants.dequantize(q, gguf.GGMLQuantizationType.Q4_K)
    # 4-bit codes over each 32-value range: error within about a code step
    steps = (x.reshape(-1, 32).max(1) - np.minimum(x.reshape(-1, 32).min(1), 0)) / 15
    assert np.all(np.abs(y - x).reshape(-1, 32).max(1) <= 1.2 * steps + 1e-4)


def test_the_cli_plans_a_gguf_workflow_with_its_header_sizes(tmp_path: Path) -> None:
    path = write_gguf(
        tmp_path / "wan2.1-t2v-Q4_K.gguf", _values(wan_layout(blocks=4, dim=256)), "wan", "Q4_K"
    )
    root = _models(tmp_path, path, "diffusion_models")
    expected = describe_gguf(root / "diffusion_models" / path.name)
    sampler = {
        "model": ["1", 0],
        "positive": ["3", 0],
        "negative": ["3", 0],
        "latent_image": ["4", 0],
        "seed": 1,
        "steps": 20,
        "cfg": 5.0,
        "sampler_name": "euler",
        "scheduler": "simple",
        "denoise": 1.0,
    }
    clip = {"clip_name": "umt5-xxl-encoder-Q8_0.gguf", "type": "wan"}
    prompt = {
        "1": {"class_type": "UnetLoaderGGUF", "inputs": {"unet_name": path.name}},
        "2": {"class_type": "CLIPLoaderGGUF", "inputs": clip},
        "3": {"class_type": "CLIPTextEncode", "inputs": {"clip": ["2", 0], "text": "a fox"}},
        "4": {"class_type": "EmptyHunyuanLatentVideo",
              "inputs": {"width": 832, "height": 480, "length": 33, "batch_size": 1}},
        "5": {"class_type": "KSampler", "inputs": sampler},
        "6": {"class_type": "VAELoader", "inputs": {"vae_name": "wan_2.1_vae.safetensors"}},
        "7": {"class_type": "VAEDecode", "inputs": {"samples": ["5", 0], "vae": ["6", 0]}},
        "8": {"class_type": "SaveImage", "inputs": {"images": ["7", 0], "filename_prefix": "x"}},
    }  # fmt: skip
    (tmp_path / "wf.json").write_text(json.dumps(prompt))
    command = [sys.executable, "-m", "comfyui_headroom", "plan", "wf.json", "--vram", "8GB", "--ram", "32GB"]
    out = subprocess.run(
        [*command, "--models-dir", str(root), "--json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    components = {c["id"]: c for c in json.loads(out.stdout)["components"]}
    unet = components["1:unet_name:diffusion_model"]
    assert (unet["bytes"], unet["blocks"], unet["source"]) == (expected.bytes, 4, "header")
    assert components["2:clip_name:text_encoder"]["kind"] == "text_encoder"  # absent file: estimated


def test_a_quantized_models_compute_counts_its_parameters_not_its_bytes() -> None:
    from comfyui_headroom.memory.models.info import ComponentInfo
    from comfyui_headroom.memory.planning.compute import params_of

    def flops(dtype: str) -> float:  # the compute model's matmuls scale with these parameters
        return params_of(ComponentInfo("diffusion_model", "x", "wan21", dtype, 9 * 2**30, (), "header"))

    assert flops("gguf_q4_k") == pytest.approx(flops("bf16") * 2 / (144 / 256))
    assert flops("gguf_q8_0") == pytest.approx(flops("bf16") * 2 / (34 / 32))
    assert flops("gguf_q4") == flops("gguf_q4_0")  # the dtype a name gives ("...-Q4_K_M.gguf" -> gguf_q4)


def test_an_architecture_the_pack_does_not_load_is_said(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "odd.gguf", _values(wan_layout(blocks=2, dim=64)), "mystery", "Q8_0")
    info = describe_gguf(path)
    assert info.family == "wan21" and "GGUF mystery (an architecture ComfyUI-GGUF does not load)" in info.note
