"""memory.models.components: checkpoints, LoRAs, controlnets, dtypes, reading only the header, bad files.

The tiny files follow released layouts (headroom_testing.component_layouts); the families of each
architecture are in test_components.py.
"""

from __future__ import annotations

import io
import json
import struct
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from comfyui_headroom.memory.models.components import describe_file, describe_tensors
from comfyui_headroom.memory.models.header import ComponentError, TensorSpec, read_header
from comfyui_headroom.memory.models.info import KINDS, SOURCES
from headroom_testing.component_layouts import (
    BF16,
    F16,
    clip_text_layout,
    flux_layout,
    nbytes,
    one,
    t5_layout,
    unet_layout,
    wan_layout,
    write,
)

# --- checkpoints, LoRAs, controlnets, unknown layouts ------------------------------------------------


def sdxl_checkpoint() -> dict:
    lay = {f"model.diffusion_model.{k}": v for k, v in unet_layout(2048).items()}
    lay |= {f"conditioner.embedders.0.transformer.{k}": v for k, v in clip_text_layout(768).items()}
    lay |= {
        "conditioner.embedders.1.model.token_embedding.weight": (16, 2),
        "conditioner.embedders.1.model.ln_final.weight": (1280,),
        "conditioner.embedders.1.model.transformer.resblocks.0.attn.in_proj_weight": (6, 2),
        "conditioner.embedders.1.model.transformer.resblocks.1.attn.in_proj_weight": (6, 2),
        "first_stage_model.decoder.conv_in.weight": (8, 4, 3, 3),
        "first_stage_model.post_quant_conv.weight": (4, 4, 1, 1),
    }
    return lay


def test_single_file_checkpoint_yields_each_component(tmp_path: Path) -> None:
    lay = sdxl_checkpoint() | {"model_ema.decay": (), "alphas_cumprod": (4,)}
    infos = describe_file(write(tmp_path / "sd_xl_base_1.0.safetensors", lay, F16))
    assert isinstance(infos, list)
    assert [(i.kind, i.family) for i in infos] == [
        ("diffusion_model", "sdxl"),
        ("text_encoder", "clip_l"),
        ("text_encoder", "clip_g"),
        ("vae", "sd_vae"),
        ("other", None),
    ]
    assert sum(i.bytes for i in infos) == nbytes(lay, "")
    assert infos[2].blocks[0].name == "transformer.resblocks.0"  # OpenCLIP naming, as the file has it
    assert one(describe_file(tmp_path / "sd_xl_base_1.0.safetensors", kind="vae")).family == "sd_vae"
    both = describe_file(tmp_path / "sd_xl_base_1.0.safetensors", kind="text_encoder")
    assert isinstance(both, list) and len(both) == 2
    with pytest.raises(ComponentError, match="has no clip_vision"):
        describe_file(tmp_path / "sd_xl_base_1.0.safetensors", kind="clip_vision")


def test_flux_style_checkpoint_with_named_text_encoders(tmp_path: Path) -> None:
    lay = {f"model.diffusion_model.{k}": v for k, v in flux_layout().items()}
    lay |= {f"text_encoders.clip_l.transformer.{k}": v for k, v in clip_text_layout(768).items()}
    lay |= {f"text_encoders.t5xxl.transformer.{k}": v for k, v in t5_layout(4096, 32128).items()}
    lay |= {"vae.decoder.conv_in.weight": (8, 16, 3, 3)}
    infos = describe_file(write(tmp_path / "flux1-dev-fp8.safetensors", lay), kind="checkpoint")
    assert [i.family for i in infos] == ["flux", "clip_l", "t5xxl", "flux_vae"]


def test_loras_are_grouped_by_the_base_block_they_patch(tmp_path: Path) -> None:
    wan = {}
    for i in (0, 1, 10):
        for part in ("self_attn.q", "cross_attn.k"):
            wan[f"diffusion_model.blocks.{i}.{part}.lora_down.weight"] = (64, 5120)
            wan[f"diffusion_model.blocks.{i}.{part}.lora_up.weight"] = (5120, 64)
    info = one(describe_file(write(tmp_path / "lightx2v.safetensors", wan)))
    assert (info.kind, info.family, info.note) == ("lora", "wan21", "rank 64")
    assert [b.name for b in info.blocks] == ["blocks.0", "blocks.1", "blocks.10"]
    flux = {
        "lora_unet_double_blocks_0_img_attn_qkv.lora_down.weight": (16, 8),
        "lora_unet_double_blocks_0_img_attn_qkv.alpha": (),
        "lora_unet_single_blocks_3_linear1.lora_up.weight": (8, 16),
        "lora_te1_text_model_encoder_layers_0_mlp_fc1.lora_up.weight": (8, 16),
    }
    info = one(describe_file(write(tmp_path / "flux_lora.safetensors", flux)))
    assert info.family == "flux" and [b.name for b in info.blocks] == ["double_blocks.0", "single_blocks.3"]
    assert "text encoder" in info.note


def test_controlnet_and_the_generic_rule(tmp_path: Path) -> None:
    cn = {"input_hint_block.0.weight": (8, 3, 3, 3)} | {
        f"zero_convs.{i}.0.weight": (8, 8, 1, 1) for i in range(3)
    }
    info = one(describe_file(write(tmp_path / "cn.safetensors", cn)))
    assert (info.kind, info.family) == ("controlnet", "sd")
    unknown = (
        {"embed.weight": (4, 4)}
        | {f"trunk.stages.{i}.w": (64,) for i in range(4)}
        | {f"tiny.{i}.w": (1,) for i in range(3)}
    )
    info = one(describe_file(write(tmp_path / "mystery.safetensors", unknown), kind="model_patch"))
    assert (info.kind, info.family) == ("model_patch", None)
    assert [b.name for b in info.blocks] == [f"trunk.stages.{i}" for i in range(4)]
    assert "generic rule" in info.note and "trunk.stages x4" in info.note


def test_caller_kind_wins_but_the_layout_is_noted(tmp_path: Path) -> None:
    info = one(describe_file(write(tmp_path / "p.safetensors", wan_layout()), kind="model_patch"))
    assert (info.kind, info.family) == ("model_patch", "wan21") and "layout of a diffusion_model" in info.note


# --- dtypes --------------------------------------------------------------------------------------------


def test_scaled_fp8_and_mixed_dtypes(tmp_path: Path) -> None:
    lay = wan_layout()
    tensors = {k: torch.randn(v).to(torch.float8_e4m3fn if len(v) == 2 else BF16) for k, v in lay.items()}
    tensors |= {
        "scaled_fp8": torch.zeros(0, dtype=torch.float8_e4m3fn),
        "blocks.0.ffn.0.scale_weight": torch.tensor(1.0),
    }
    save_file(tensors, str(tmp_path / "scaled.safetensors"))
    info = one(describe_file(tmp_path / "scaled.safetensors"))
    assert info.dtype == "fp8_e4m3fn_scaled" and "dtypes by bytes" in info.note
    save_file(
        {k: v.to(torch.float8_e5m2) for k, v in tensors.items() if "scale" not in k},
        str(tmp_path / "e5m2.safetensors"),
    )
    assert one(describe_file(tmp_path / "e5m2.safetensors")).dtype == "fp8_e5m2"


def test_tensor_spec_bytes_cover_sub_byte_dtypes() -> None:
    assert TensorSpec("F4", (3, 5)).nbytes == 8 and TensorSpec("BF16", (2, 3)).nbytes == 12
    assert TensorSpec("F8_E4M3", ()).nbytes == 1


def test_describe_tensors_without_a_file_matches_the_header_path(tmp_path: Path) -> None:
    lay = flux_layout()
    from_file = one(describe_file(write(tmp_path / "x.safetensors", lay)))
    specs = {k: TensorSpec("BF16", v) for k, v in lay.items()}
    assert one(describe_tensors(specs, file="x.safetensors")) == from_file


# --- reading only the header, and bad files ------------------------------------------------------------


def test_header_parse_agrees_with_safetensors(tmp_path: Path) -> None:
    path = write(tmp_path / "m.safetensors", flux_layout() | {"x.scale": ()})
    tensors, _ = read_header(path)
    with safe_open(str(path), "pt") as f:
        expected = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
        dtypes = {k: f.get_slice(k).get_dtype() for k in f.keys()}
    assert {k: t.shape for k, t in tensors.items()} == expected
    assert {k: t.dtype for k, t in tensors.items()} == dtypes


def header_file(path: Path, header: object, data: bytes = b"", length: int | None = None) -> Path:
    raw = json.dumps(header).encode() if not isinstance(header, bytes) else header
    path.write_bytes(struct.pack("<Q", len(raw) if length is None else length) + raw + data)
    return path


def test_only_the_header_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    size = 1 << 30  # a 1 GiB tensor, left sparse on disk
    path = header_file(
        tmp_path / "big.safetensors", {"w": {"dtype": "U8", "shape": [size], "data_offsets": [0, size]}}
    )
    header_len = path.stat().st_size - 8
    with path.open("r+b") as f:
        f.truncate(8 + header_len + size)
    read = []
    real_open = Path.open

    class Counting(io.RawIOBase):
        def __init__(self, inner: io.RawIOBase) -> None:
            self.inner = inner

        def read(self, n: int = -1) -> bytes:
            chunk = self.inner.read(n)
            read.append(len(chunk))
            return chunk

        def close(self) -> None:
            self.inner.close()

    monkeypatch.setattr(Path, "open", lambda self, *a, **k: Counting(real_open(self, *a, **k)))
    tensors, _ = read_header(path)
    assert tensors["w"].nbytes == size
    assert sum(read) == 8 + header_len


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (b"", "too short"),
        (b"\x01\x02\x03", "too short"),
        (struct.pack("<Q", 10**12) + b"{}", "bad header length"),
        (struct.pack("<Q", 5) + b"{not", "bad header length"),
        (struct.pack("<Q", 6) + b"{oops}", "not JSON"),
        (struct.pack("<Q", 2) + b"[]", "not an object"),
        (b"PK\x03\x04" + b"\0" * 20, "pickle/zip"),
        (b"\x80\x02" + b"\0" * 20, "pickle/zip"),
    ],
)
def test_corrupt_files_raise_a_component_error_naming_the_file(
    tmp_path: Path, content: bytes, match: str
) -> None:
    path = tmp_path / "broken.safetensors"
    path.write_bytes(content)
    with pytest.raises(ComponentError, match=match) as err:
        describe_file(path)
    assert "broken.safetensors" in str(err.value)
    assert isinstance(err.value, ValueError)


def test_truncated_download_and_bad_entries(tmp_path: Path) -> None:
    good = write(tmp_path / "full.safetensors", flux_layout())
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(good.read_bytes()[:-100])
    with pytest.raises(ComponentError, match="truncated download"):
        describe_file(cut)
    entry = {"dtype": "F16", "shape": [4], "data_offsets": [0, 8]}
    with pytest.raises(ComponentError, match="offsets 0..6 do not match"):
        describe_file(
            header_file(tmp_path / "a.safetensors", {"w": entry | {"data_offsets": [0, 6]}}, b"\0" * 8)
        )
    with pytest.raises(ComponentError, match="unknown dtype"):
        describe_file(header_file(tmp_path / "b.safetensors", {"w": entry | {"dtype": "Q4"}}, b"\0" * 8))
    with pytest.raises(ComponentError, match="malformed header entry"):
        describe_file(header_file(tmp_path / "c.safetensors", {"w": {"dtype": "F16"}}, b"\0" * 8))
    with pytest.raises(ComponentError, match="holds no tensors"):
        describe_file(header_file(tmp_path / "d.safetensors", {"__metadata__": {"a": "b"}}))


@pytest.mark.parametrize("suffix", [".ckpt", ".pt", ".pth", ".bin"])
def test_pickle_files_are_refused_unopened(
    tmp_path: Path, suffix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / f"model{suffix}"
    path.write_bytes(b"\x80\x04anything")
    monkeypatch.setattr(Path, "open", lambda *a, **k: pytest.fail("a pickle file was opened"))
    with pytest.raises(ComponentError, match="never unpickles"):
        describe_file(path)


def test_missing_file_is_a_component_error(tmp_path: Path) -> None:
    with pytest.raises(ComponentError, match="cannot read"):
        describe_file(tmp_path / "absent.safetensors")


def test_kinds_and_sources_are_documented() -> None:
    assert {"diffusion_model", "text_encoder", "vae", "lora", "controlnet", "clip_vision"} <= KINDS
    assert SOURCES == {"header", "catalog", "estimate"}
