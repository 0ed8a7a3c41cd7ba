"""memory.activations: ComfyUI's own memory formulas per family, and the measured text-encoder ones."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from comfyui_headroom.memory.activations import (
    DIFFUSION,
    TEXT_ENCODERS,
    VAES,
    activation_bytes,
    latent_frames,
)

MIB = 1 << 20


def comfy_memory_required(area: int, dtype_size: int, factor: float) -> float:
    # comfy/model_base.py:374, the branch CUDA takes
    return area * dtype_size * 0.01 * factor * MIB


def test_flux_step_is_comfyuis_formula_with_cond_and_uncond_batched() -> None:
    got = activation_bytes("flux", "diffusion_model", width=1024, height=1024)
    assert got == pytest.approx(comfy_memory_required(2 * 128 * 128, 2, 3.1), abs=1)
    assert activation_bytes("flux", "diffusion_model", width=1024, height=1024, cfg=False) == pytest.approx(
        got / 2, abs=1
    )
    assert activation_bytes("flux", "diffusion_model", width=1024, height=1024, batch=3) == pytest.approx(
        3 * got, abs=3
    )
    fp32 = activation_bytes("flux", "diffusion_model", width=1024, height=1024, dtype="fp32")
    assert fp32 == pytest.approx(2 * got, abs=2)
    kontext = activation_bytes("flux", "diffusion_model", width=1024, height=1024, reference_images=1)
    assert kontext == pytest.approx(2 * got, abs=2)


def test_wan_scales_with_latent_frames_and_model_width() -> None:
    assert latent_frames(81, 4) == 21 and latent_frames(1, 4) == 1 and latent_frames(33, 8) == 5
    big = activation_bytes("wan21", "diffusion_model", width=832, height=480, frames=81)
    assert big == pytest.approx(comfy_memory_required(2 * 21 * 60 * 104, 2, 5120 / 2222), abs=1)
    small = activation_bytes("wan21", "diffusion_model", width=832, height=480, frames=81, dim=1536)
    assert small == pytest.approx(big * 1536 / 5120, rel=1e-9)
    vace = activation_bytes("wan21", "diffusion_model", width=832, height=480, frames=81, vace=True)
    assert vace == pytest.approx(big * 1.2, rel=1e-9)
    # Wan 2.2 TI2V-5B works on a 16x latent
    five = activation_bytes("wan22", "diffusion_model", width=1280, height=704, frames=121, dim=3072)
    assert five == pytest.approx(comfy_memory_required(2 * 31 * 44 * 80, 2, 3072 / 2222), abs=1)


def test_vae_decode_is_one_sample_of_comfyuis_formula() -> None:
    kl = activation_bytes("flux_vae", "vae", width=1024, height=1024, batch=4)
    assert kl == 2178 * 128 * 128 * 64 * 2  # comfy/sd.py:280
    assert activation_bytes("sd_vae", "vae", width=1024, height=1024, encode=True) == 1767 * 1024 * 1024 * 2
    wan = activation_bytes("wan21_vae", "vae", width=832, height=480, frames=81)
    assert wan == 7000 * 60 * 104 * 64 * 2  # causal: frame count does not matter
    assert activation_bytes("wan21_vae", "vae", width=832, height=480, frames=5) == wan
    ltxv = activation_bytes("ltxv_vae", "vae", width=768, height=512, frames=97)
    assert ltxv == 900 * 13 * 16 * 24 * 512 * 2
    assert (
        activation_bytes("wan22_vae", "vae", width=1280, height=704, frames=121) == 8000 * 44 * 80 * 256 * 2
    )


def test_text_encoders_scale_with_tokens() -> None:
    t5 = activation_bytes("t5xxl", "text_encoder", width=1024, height=1024)
    assert t5 == pytest.approx(28.3 * 512 * 4096 * 2, abs=1)
    assert activation_bytes("t5xxl", "text_encoder", width=1, height=1, tokens=256) == pytest.approx(
        t5 / 2, abs=1
    )
    assert activation_bytes("clip_l", "text_encoder", width=1, height=1) < t5
    unknown = activation_bytes("some_new_llm", "text_encoder", width=1, height=1)
    assert unknown >= max(activation_bytes(f, "text_encoder", width=1, height=1) for f in TEXT_ENCODERS)


def test_other_kinds() -> None:
    assert activation_bytes("esrgan", "upscale_model", width=512, height=512) == 512 * 512 * 3 * 2 * 4 * 384
    assert activation_bytes("wan21", "lora", width=512, height=512) == 0
    assert activation_bytes("clip_vision_h", "clip_vision", width=512, height=512) > 0


def test_unknown_families_are_conservative() -> None:
    for family in DIFFUSION:
        known = activation_bytes(family, "diffusion_model", width=1024, height=1024, dim=1536)
        assert activation_bytes("brand_new_dit", "diffusion_model", width=1024, height=1024) >= known


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="unknown dtype"):
        activation_bytes("flux", "diffusion_model", width=64, height=64, dtype="int3")
    with pytest.raises(ValueError, match="must be positive"):
        activation_bytes("flux", "diffusion_model", width=0, height=64)
    with pytest.raises(ValueError, match="no activation estimate"):
        activation_bytes("flux", "spaceship", width=64, height=64)


@settings(suppress_health_check=[HealthCheck.too_slow])  # a shared 2-core CI machine draws slowly
@given(
    family=st.sampled_from(sorted(DIFFUSION) + sorted(VAES)),
    w=st.integers(8, 4096),
    h=st.integers(8, 4096),
    frames=st.integers(1, 200),
    grow=st.integers(0, 512),
)
def test_more_pixels_never_need_less_memory(family: str, w: int, h: int, frames: int, grow: int) -> None:
    kind = "vae" if family in VAES else "diffusion_model"
    small = activation_bytes(family, kind, width=w, height=h, frames=frames)
    assert activation_bytes(family, kind, width=w + grow, height=h, frames=frames) >= small
    assert activation_bytes(family, kind, width=w, height=h, frames=frames + grow) >= small


def host_file(relative: str) -> Path:
    root = Path(os.environ.get("COMFYUI_ROOT", "/work/comfyui"))
    version = root / "comfyui_version.py"
    if not version.is_file() or '"0.3.64"' not in version.read_text():
        pytest.skip("the cited lines are those of ComfyUI v0.3.64; set COMFYUI_ROOT to such a checkout")
    return root / "comfy" / relative


def test_the_cited_factors_are_the_hosts() -> None:
    lines = host_file("supported_models.py").read_text().splitlines()
    for family, spec in DIFFUSION.items():
        match = re.match(r"supported_models\.py:(\d+)", spec.source)
        if match is None:
            continue
        line = lines[int(match.group(1)) - 1]
        assert "memory_usage_factor" in line, (family, line)
        if not spec.scales_with:
            assert float(re.search(r"=\s*([\d.]+)", line).group(1)) == spec.factor, (family, line)


def test_the_cited_vae_formulas_are_the_hosts() -> None:
    lines = host_file("sd.py").read_text().splitlines()
    for family, spec in VAES.items():
        first, last = (int(n) for n in re.match(r"sd\.py:(\d+)-(\d+)", spec.source).groups())
        text = "\n".join(lines[first - 1 : last])
        assert "memory_used_encode" in text and "memory_used_decode" in text, family
