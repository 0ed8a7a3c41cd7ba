"""memory.activations: ComfyUI's own memory formulas per family, and the measured text-encoder ones."""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from comfyui_headroom.cli import main as cli_main
from comfyui_headroom.memory.planning.activations import (
    BY_WIDTH,
    DIFFUSION,
    MARGIN,
    MEASURED,
    MEASURED_ALIAS,
    SCALED,
    TEXT_ENCODERS,
    TEXT_MEASURED,
    VAES,
    activation_bytes,
    host_reservation,
    latent_frames,
    measured_coefficients,
)
from comfyui_headroom.memory.planning.costmodel import Budget, Hardware
from comfyui_headroom.memory.planning.planner import minimum_vram, plan
from comfyui_headroom.memory.planning.workload import Component, Step, Workload

MIB = 1 << 20


def comfy_memory_required(area: int, dtype_bytes: int, factor: float) -> float:
    # comfy/model_base.py:374, the branch CUDA takes
    return area * dtype_bytes * 0.01 * factor * MIB


def test_host_reservation_is_comfyuis_formula_with_cond_and_uncond_batched() -> None:
    got = host_reservation("flux", width=1024, height=1024, cfg=True)
    assert got == pytest.approx(comfy_memory_required(2 * 128 * 128, 2, 3.1), abs=1)
    assert host_reservation("flux", width=1024, height=1024) == pytest.approx(got / 2, abs=1)
    assert host_reservation("flux", width=1024, height=1024, batch=3, cfg=True) == pytest.approx(
        3 * got, abs=3
    )
    fp32 = host_reservation("flux", width=1024, height=1024, cfg=True, dtype="fp32")
    assert fp32 == pytest.approx(2 * got, abs=2)
    kontext = host_reservation("flux", width=1024, height=1024, cfg=True, reference_images=1)
    assert kontext == pytest.approx(2 * got, abs=2)


def test_host_reservation_scales_with_latent_frames_and_wan_width() -> None:
    assert latent_frames(81, 4) == 21 and latent_frames(1, 4) == 1 and latent_frames(33, 8) == 5
    big = host_reservation("wan21", width=832, height=480, frames=81, cfg=True)
    assert big == pytest.approx(comfy_memory_required(2 * 21 * 60 * 104, 2, 5120 / 2222), abs=1)
    small = host_reservation("wan21", width=832, height=480, frames=81, cfg=True, dim=1536)
    assert small == pytest.approx(big * 1536 / 5120, rel=1e-9)
    vace = host_reservation("wan21", width=832, height=480, frames=81, cfg=True, vace=True)
    assert vace == pytest.approx(big * 1.2, rel=1e-9)
    # Wan 2.2 TI2V-5B works on a 16x latent
    five = host_reservation("wan22", width=1280, height=704, frames=121, cfg=True, dim=3072)
    assert five == pytest.approx(comfy_memory_required(2 * 31 * 44 * 80, 2, 3072 / 2222), abs=1)


def test_prediction_is_the_measured_peak_plus_the_margin() -> None:
    # bench/activations.py: Flux-dev at 1024x1024, bf16, batch 1 peaks at a * 16384 cells + b
    a, b = MEASURED["flux"]["bf16"]
    one = activation_bytes("flux", "diffusion_model", width=1024, height=1024, cfg=False)
    assert one == math.ceil((a * 128 * 128 + b) * (1 + MARGIN))
    assert 0.05 <= MARGIN <= 0.15
    fp32 = activation_bytes("flux", "diffusion_model", width=1024, height=1024, cfg=False, dtype="fp32")
    a32, b32 = MEASURED["flux"]["fp32"]
    assert fp32 == math.ceil((a32 * 128 * 128 + b32) * (1 + MARGIN))
    # fp8 weights compute in bf16: the bf16 coefficients
    assert activation_bytes("flux", "diffusion_model", width=1024, height=1024, cfg=False, dtype="fp8") == one
    # the measurement is well below ComfyUI's conservative formula for the same batch
    assert one < host_reservation("flux", width=1024, height=1024)


def test_cfg_doubles_the_batch_and_the_split_runs_cond_alone() -> None:
    kw = {"width": 640, "height": 640, "frames": 81}
    alone = activation_bytes("wan21", "diffusion_model", cfg=False, **kw)
    together = activation_bytes("wan21", "diffusion_model", cfg=True, **kw)
    split = activation_bytes("wan21", "diffusion_model", cfg=True, split=True, **kw)
    assert split == alone and together == pytest.approx(2 * alone, abs=2)
    # Wan 2.x 14B at 640x640x81 measured 3331.5 MiB per call (bf16); ComfyUI reserves 6194 MiB per call
    assert alone == pytest.approx(3331.5 * MIB * (1 + MARGIN), rel=1e-3)
    assert host_reservation("wan21", cfg=True, **kw) == pytest.approx(2 * 6194 * MIB, rel=1e-3)
    assert activation_bytes("wan21", "diffusion_model", batch=2, cfg=True, split=True, **kw) == pytest.approx(
        2 * alone, abs=2
    )


def test_wan_coefficients_follow_the_model_width() -> None:
    kw = {"width": 832, "height": 480, "frames": 81, "cfg": False}
    sizes = [activation_bytes("wan21", "diffusion_model", dim=d, **kw) for d in (1536, 3072, 5120)]
    assert sizes == sorted(sizes) and len(set(sizes)) == 3
    assert activation_bytes("wan21", "diffusion_model", **kw) == sizes[-1]  # unknown size: the 14B
    wider = activation_bytes("wan21", "diffusion_model", dim=6144, **kw)
    assert wider == pytest.approx(sizes[-1] * 6144 / 5120, rel=1e-6)
    vace = activation_bytes("wan21", "diffusion_model", vace=True, **kw)
    assert vace == pytest.approx(sizes[-1] * 1.2, rel=1e-6)


def test_unmeasured_families_keep_comfyuis_formula() -> None:
    for family in (
        set(DIFFUSION) - set(MEASURED) - set(MEASURED_ALIAS) - {"wan22"} - set(BY_WIDTH) - set(SCALED)
    ):
        got = activation_bytes(family, "diffusion_model", width=1024, height=1024, cfg=False)
        assert got == host_reservation(family, width=1024, height=1024), family


def test_the_coefficients_are_those_of_the_results_file() -> None:
    text = (Path(__file__).resolve().parents[2] / "bench" / "results" / "activations.md").read_text()
    fitted: dict = {}
    for block in re.findall(r"```\n(\{.*\})\n```", text):  # a later run (e.g. --only) updates earlier ones
        fitted |= json.loads(block)
    for family, per in MEASURED.items():
        for dtype, (a, b) in per.items():
            assert fitted[family][dtype] == [a, b], (family, dtype)
    for family, per in TEXT_MEASURED.items():
        for dtype, (a, c) in per.items():
            assert fitted[family][dtype] == [a, c], (family, dtype)


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


def test_text_encoders_are_their_measured_peak_plus_the_margin() -> None:
    t5 = activation_bytes("t5xxl", "text_encoder", width=1024, height=1024)  # 512 tokens by default
    a, c = TEXT_MEASURED["t5xxl"]["bf16"]
    assert t5 == math.ceil((a * 512 + c * 512 * 512) * (1 + MARGIN))
    half = activation_bytes("t5xxl", "text_encoder", width=1, height=1, tokens=256)
    assert half == math.ceil((a * 256 + c * 256 * 256) * (1 + MARGIN)) and half < t5 / 2  # the bias is t^2
    # T5-base: the XXL's figure scaled by hidden size
    base = activation_bytes("t5base", "text_encoder", width=1, height=1)
    assert base == math.ceil((a * 512 + c * 512 * 512) * 768 / 4096 * (1 + MARGIN))
    assert activation_bytes("clip_l", "text_encoder", width=1, height=1) < t5
    fp32 = activation_bytes("llama3_8b", "text_encoder", width=1, height=1, dtype="fp32")
    assert fp32 > activation_bytes("llama3_8b", "text_encoder", width=1, height=1)
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
    """Each VAE's cited lines, on the host version it cites (no version: 0.3.64, "0.33 sd.py:..."
    for a family 0.3.64 lacks); the other version's citations are checked with that host."""
    root = Path(os.environ.get("COMFYUI_ROOT", "/work/comfyui"))
    found = re.search(r'"([\d.]+)"', (root / "comfyui_version.py").read_text()) if root.is_dir() else None
    if found is None:
        pytest.skip("the cited lines are those of ComfyUI 0.3.64 and 0.33; set COMFYUI_ROOT to either")
    lines = (root / "comfy" / "sd.py").read_text().splitlines()
    checked = []
    for family, spec in VAES.items():
        version, first, last = re.fullmatch(r"(?:(\S+) )?sd\.py:(\d+)-(\d+)", spec.source).groups()
        if found.group(1) != {None: "0.3.64", "0.33": "0.33.0"}.get(version, version):
            continue
        text = "\n".join(lines[int(first) - 1 : int(last)])
        assert "memory_used_encode" in text and "memory_used_decode" in text, family
        checked.append(family)
    if not checked:
        pytest.skip(f"no VAE formula cites ComfyUI {found.group(1)}: set COMFYUI_ROOT to 0.3.64 or 0.33")


def test_a_step_without_a_split_figure_uses_its_activation() -> None:
    step = Step("3", "KSampler", (), activation=5 * MIB)
    assert step.activation_min == 5 * MIB and step.reservation == 5 * MIB
    with pytest.raises(ValueError, match="activation_min"):
        Step("3", "KSampler", (), activation=MIB, activation_min=2 * MIB)


def test_the_minimum_vram_is_set_by_the_cond_alone() -> None:
    dit = Component("dm", "dit.safetensors", 4 << 30, blocks=tuple([100 * MIB] * 40), kind="diffusion_model")
    both, alone = 6 << 30, 3 << 30
    w = Workload((dit,), (Step("3", "KSampler", ("dm",), 20, both, activation_min=alone),))
    need, where = minimum_vram(w, 1)
    assert need == (4 << 30) - 40 * 100 * MIB + 2 * 100 * MIB + alone  # rest + ring of 2 + cond alone
    assert "3.00 GiB of activations" in where
    hw = Hardware.pcie(4)
    budget = Budget(vram=need, ram=64 << 30, pinned=32 << 30, prefetch_depth=1)
    assert plan(w, budget, hw).feasible  # the host splits cond and uncond: this VRAM suffices
    tight = Budget(vram=need - 64 * MIB, ram=64 << 30, pinned=32 << 30, prefetch_depth=1)
    assert not plan(w, tight, hw).feasible


def test_wan22_14b_at_640x640x81_no_longer_needs_12_gib_of_activations(capsys: pytest.CaptureFixture) -> None:
    workflow = Path(__file__).resolve().parents[2] / "example_workflows" / "Wan 2.2 14B text to video.json"
    assert cli_main(["plan", str(workflow), "--vram", "12GB"]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("minimum VRAM for this workflow"))
    activations = float(re.search(r"([\d.]+) GiB of activations", line).group(1))
    # cfg 3.5: the host runs cond alone when both do not fit; one 14B call at 21x80x80 latent cells
    # measured 3331.5 MiB (bench/results/activations.md), +10%: 3.58 GiB, was ComfyUI's 12.10 GiB
    assert activations == pytest.approx(3331.5 * 1.1 / 1024, abs=0.01)
    assert "fits: yes" in out


def test_aliases_and_wider_ltxv_use_a_measured_model() -> None:
    kw = {"width": 1024, "height": 1024, "cfg": False}
    assert activation_bytes("chroma", "diffusion_model", **kw) == activation_bytes(
        "flux", "diffusion_model", **kw
    )
    video = {"width": 768, "height": 512, "frames": 97, "cfg": False}
    two_b = activation_bytes("ltxv", "diffusion_model", dim=2048, **video)
    a, b = MEASURED["ltxv"]["bf16"]
    assert two_b == math.ceil((a * 13 * 16 * 24 + b) * (1 + MARGIN))  # 13 latent frames of 16x24
    # LTX-2 (4096 wide) is measured on its own class; an LTX-V of unknown width is taken as that one
    a, b = MEASURED["ltxv_4096"]["bf16"]
    ltx2 = activation_bytes("ltxv", "diffusion_model", dim=4096, **video)
    assert ltx2 == math.ceil((a * 13 * 16 * 24 + b) * (1 + MARGIN))
    assert activation_bytes("ltxv", "diffusion_model", **video) == ltx2
    # within 10% of the 2B's figure scaled by width (the estimate it replaces)
    assert ltx2 == pytest.approx(2 * two_b, rel=0.1)


def test_hidream_uses_its_measured_worst_case_routing_row() -> None:
    # bench/results/activations.md: HiDream-I1 at 1024x1024, bf16, MoE routed to its worst case
    one = activation_bytes("hidream", "diffusion_model", width=1024, height=1024, cfg=False)
    assert one == pytest.approx(446.5 * MIB * (1 + MARGIN), rel=1e-3)
    assert one != host_reservation("hidream", width=1024, height=1024)  # no longer the host formula
    # the 48 caption states the host keeps for the whole call: the intercept outweighs 512x512's cells
    a, b = MEASURED["hidream"]["bf16"]
    assert b > a * 64 * 64


def test_flux2_is_measured_per_width() -> None:
    """Klein 4B (3072), Klein 9B (4096) and dev (6144) each have their measured coefficients; a Flux.2 of
    unknown width takes the dev's, the widest."""
    from comfyui_headroom.memory.planning.activations import BY_WIDTH, measured_coefficients

    FLUX2_BY_HIDDEN = BY_WIDTH["flux2"]

    per_cell = [measured_coefficients("flux2", "bf16", h)[0] for h in sorted(FLUX2_BY_HIDDEN)]
    assert per_cell == sorted(per_cell) and len(set(per_cell)) == 3
    assert measured_coefficients("flux2", "bf16") == measured_coefficients("flux2", "bf16", 6144)


def test_minimax_h3_hidream_o1_and_svd_use_their_measurement() -> None:
    """#26 measured these three on 0.33's classes: the planner uses the measurement, not a width scaling
    of Flux.2 (MiniMax H3) or the host's formula (HiDream-O1, SVD), and no family is scaled any more."""
    assert not SCALED
    for family, size in (
        ("minimax_h3", (1344, 768, 121)),
        ("hidream_o1", (1024, 1024, 1)),
        ("svd", (1024, 576, 25)),
    ):
        a, b = MEASURED[family]["bf16"]
        assert measured_coefficients(family, "bf16") == (a, b)
        w, h, f = size
        got = activation_bytes(family, "diffusion_model", width=w, height=h, frames=f, cfg=False)
        assert got != host_reservation(family, width=w, height=h, frames=f), family
    # H3 at 1344x768x121: 124,992 cells as the planner counts them (16x, one per 4 frames), ~4.1 GB + 10%
    got = activation_bytes("minimax_h3", "diffusion_model", width=1344, height=768, frames=121, cfg=False)
    assert got == pytest.approx((33883.37 * 124992 + 69294301) * 1.1, rel=1e-3)
