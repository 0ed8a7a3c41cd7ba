"""Issue #26: the wall time counts matmuls and attention per sampler evaluation, at the precision the
weights run at, on the card the user names (--gpu) or the host reports."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from comfyui_headroom.cli import main
from comfyui_headroom.memory.models.info import ComponentInfo
from comfyui_headroom.memory.planning.compute import call_work, diffusion_work, seconds
from comfyui_headroom.memory.planning.costmodel import Budget, Hardware
from comfyui_headroom.memory.planning.gpus import GPUS, PROCESS, find_gpu, measured_efficiency, nearest_gpus
from comfyui_headroom.memory.planning.pipeline import plan_workflow
from comfyui_headroom.memory.units import GB, GiB

ROOT = Path(__file__).resolve().parents[2]
FLUX = ROOT / "example_workflows" / "api" / "Flux Dev text to image.json"


@pytest.mark.parametrize(
    ("reported", "card"),
    [
        ("NVIDIA GeForce RTX 4090", "RTX 4090"),
        ("NVIDIA GeForce RTX 4090 D", "RTX 4090 D"),
        ("4090D", "RTX 4090 D"),
        ("NVIDIA GeForce RTX 4060 Ti", "RTX 4060 Ti"),
        ("rtx 4060", "RTX 4060"),
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA A100-SXM4-80GB", "A100"),
        ("NVIDIA A100-SXM4-40GB", "A100 40GB"),
        ("AMD Radeon RX 7900 XTX", "RX 7900 XTX"),
        ("l40s", "L40S"),
        ("NVIDIA L40", "L40"),  # not the L4 its name contains
        ("NVIDIA L4", "L4"),
        ("NVIDIA GeForce RTX 4090 Laptop GPU", "RTX 4090 Laptop"),
        ("NVIDIA A100 80GB PCIe", "A100"),
        ("NVIDIA A100-PCIE-40GB", "A100 40GB"),
        ("NVIDIA H800", "H800"),
        ("RTX 4090 24GB FE", "RTX 4090"),
        ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "RTX PRO 6000 Blackwell"),
    ],
)
def test_a_card_is_found_by_the_name_the_host_or_the_user_gives(reported: str, card: str) -> None:
    found = find_gpu(reported)
    assert found is not None and found.name == card


def test_an_unknown_card_is_not_guessed() -> None:
    assert find_gpu("Voodoo 3 3000") is None and find_gpu("") is None


@pytest.mark.parametrize(
    ("name", "not_this"),
    [("RTX A1000", "A100"), ("RTX 4090 Laptop Max-Q", "RTX 4090"), ("GeForce RTX 4090 Ti", "RTX 4090"),
     ("A100 PCIe", "A100"), ("L40 Super", "L40"), ("RTX 5090 D v2", "RTX 5090")],
)  # fmt: skip
def test_a_card_is_never_another_card_whose_name_it_contains(name: str, not_this: str) -> None:
    """Issue #43: "RTX A1000" (8 GB) was planned as an 80 GB A100, "RTX 4090 Laptop" as the desktop card;
    a laptop part is its own row, and a name the table does not have is refused with the nearest ones."""
    assert find_gpu(name) is None
    assert nearest_gpus(name)  # the error names what the user may have meant
    laptop = find_gpu("RTX 4090 Laptop")
    assert laptop is not None and laptop.vram_gib == 16 and laptop.bf16 < find_gpu("RTX 4090").bf16


def test_the_table_is_consistent() -> None:
    names = [g.name for g in GPUS]
    assert len(names) == len(set(names))
    for g in GPUS:
        assert g.bf16 > g.fp32 > 0 and g.memory_gbs > 0 and g.vram_gib >= 8 and g.watts > 0
        assert g.fp8 is None or g.fp8 == pytest.approx(2 * g.bf16, rel=0.02)
        assert find_gpu(g.name) is not None and find_gpu(g.name).name == g.name
        assert g.arch in PROCESS and g.spec in ("consumer", "full_rate")
        shares = g.shares
        assert all(0 < getattr(shares, k) <= 1 for k in ("matmul", "attention", "conv", "memory"))
        for alias in g.aliases:
            assert find_gpu(alias).name == g.name


def _wan14(dtype: str = "bf16") -> ComponentInfo:
    size = 14.3e9 * (1 if dtype.startswith("fp8") else 2)
    return ComponentInfo("diffusion_model", "wan.safetensors", "wan21", dtype, int(size), (), "catalog")


def test_attention_grows_with_the_square_of_the_tokens_and_dominates_720p_video() -> None:
    small = diffusion_work("wan21", 14.3e9, width=832, height=480, frames=33, samples=1)
    big = diffusion_work("wan21", 14.3e9, width=1280, height=720, frames=81, samples=1)
    tokens = (1280 // 16) * (720 // 16) * 21 / ((832 // 16) * (480 // 16) * 9)
    assert big.matmul / small.matmul == pytest.approx(tokens, rel=0.01)
    assert big.attention / small.attention == pytest.approx(tokens**2, rel=0.05)
    assert 0.5 < big.attention / (big.attention + big.matmul) < 0.75  # the issue measured ~64%


def test_cfg_doubles_the_work_and_fp8_runs_at_the_bf16_rate_unless_the_host_multiplies_in_fp8() -> None:
    shape = {"width": 832, "height": 480, "frames": 81, "batch": 1}
    one = call_work(_wan14(), **shape, cfg=False)
    two = call_work(_wan14(), **shape, cfg=True)
    assert two.matmul == pytest.approx(2 * one.matmul) and two.attention == pytest.approx(2 * one.attention)
    ada, ampere = find_gpu("RTX 4090"), find_gpu("RTX 3090")
    fp8 = call_work(_wan14("fp8_e4m3fn"), **shape, cfg=True)
    assert seconds(fp8, ada) == pytest.approx(seconds(two, ada))  # the host casts to bf16
    fast = call_work(_wan14("fp8_e4m3fn"), **shape, cfg=True, fp8_matmul=True)
    eff = ada.shares.matmul
    halved = two.matmul / (ada.bf16 * 1e12 * eff) - two.matmul / (ada.fp8 * 1e12 * eff)
    assert seconds(two, ada) - seconds(fast, ada) == pytest.approx(halved)
    assert seconds(fast, ampere) == pytest.approx(seconds(two, ampere))  # no fp8 tensor cores


def test_a_small_call_is_never_faster_than_reading_its_weights() -> None:
    te = ComponentInfo("text_encoder", "t5.safetensors", "t5xxl", "bf16", int(9.5 * GB), (), "catalog")
    work = call_work(te, width=1024, height=1024, frames=1, batch=1, cfg=False)
    card = find_gpu("RTX 3060")
    assert seconds(work, card) >= te.bytes / (card.memory_gbs * 1e9)


def test_the_card_sets_compute_bus_and_wall_time() -> None:
    budget = Budget.from_card(24 * GiB, 64 * GiB)
    walls = {}
    for name in ("RTX 3090", "RTX 4090", "H100"):
        planned = plan_workflow(FLUX, budget, Hardware.for_gpu(name))
        walls[name] = sum(s.compute_s for s in planned.workload.steps)
    assert walls["RTX 3090"] > walls["RTX 4090"] > walls["H100"]
    # between the two cards' memory-bandwidth ratio (the memory-bound ops, the per-call overhead) and their
    # bf16 peak ratio (the matmuls and attention): neither card is power-limited
    assert 1008 / 936 < walls["RTX 3090"] / walls["RTX 4090"] <= 165.2 / 71.0
    x8 = Hardware.for_gpu("RTX 4060 Ti")
    assert x8.h2d_pinned == pytest.approx(Hardware.pcie(4).h2d_pinned / 2) and not x8.gpu_assumed
    assert Hardware.for_gpu("RTX 5090").h2d_pinned == Hardware.pcie(5).h2d_pinned
    assert Hardware.for_device("NVIDIA GeForce RTX 3060").gpu == "RTX 3060"
    assert Hardware.for_device("Some New Card").gpu_assumed
    with pytest.raises(ValueError, match="unknown GPU"):
        Hardware.for_gpu("Voodoo 3")


def test_steps_scale_the_sampler_compute_in_proportion() -> None:
    prompt = json.loads(FLUX.read_text())
    sampler = next(k for k, n in prompt.items() if n["class_type"] == "KSampler")
    budget = Budget.from_card(24 * GiB, 64 * GiB)
    hw = Hardware.for_gpu("RTX 4090")
    times = []
    for steps in (10, 40):
        prompt[sampler]["inputs"]["steps"] = steps
        planned = plan_workflow(prompt, budget, hw)
        times.append(next(s.compute_s for s in planned.workload.steps if s.node_id == sampler))
    assert times[1] == pytest.approx(4 * times[0])


def test_cli_gpu_names_the_card_and_without_it_a_note_says_which_was_assumed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["plan", str(FLUX), "--gpu", "RTX 4090", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["budget"]["vram"] == 24 * GiB - GiB // 2  # the card's VRAM, less the reserve
    assert not any("assumes" in n for n in out["notes"])
    assert main(["plan", str(FLUX), "--vram", "24GB"]) == 0
    text = capsys.readouterr().out
    assert "note: wall time assumes an RTX 4090 (no --gpu given)" in text
    assert main(["plan", str(FLUX), "--gpu", "Voodoo 3"]) == 2
    err = capsys.readouterr().err
    assert "--gpu 'Voodoo 3' is not a card Headroom knows" in err and "RTX 4060 Ti" in err
    assert main(["plan", str(FLUX)]) == 2
    assert "give --vram" in capsys.readouterr().err


def test_counted_coefficients_agree_with_the_attention_formula_they_replace() -> None:
    """bench/flops.py counted Wan 14B's attention on the host's class: 4 x tokens^2 x hidden x layers."""
    counted = diffusion_work("wan21", 14.3e9, width=1280, height=720, frames=81, samples=1)
    tokens = (1280 // 16) * (720 // 16) * 21
    assert counted.attention == pytest.approx(4 * tokens**2 * 5120 * 40, rel=0.02)
    # a size the bench did not count takes the formula with the family's counted share of parameters
    shape = {"width": 1280, "height": 720, "frames": 121, "samples": 1}
    big, small = diffusion_work("ltxv", 19e9, **shape), diffusion_work("ltxv", 1.9e9, **shape)
    assert big.matmul > 5 * small.matmul and big.attention > 2 * small.attention


def test_a_video_decode_costs_its_counted_flops_per_pixel() -> None:
    vae = ComponentInfo("vae", "wan_2.1_vae.safetensors", "wan21_vae", "bf16", 254 << 20, (), "catalog")
    work = call_work(vae, width=832, height=480, frames=81, batch=1, cfg=False)
    assert work.conv == pytest.approx(8.6e6 * 832 * 480 * 81) and work.matmul == 0  # convolutions
    encode = call_work(vae, width=832, height=480, frames=81, batch=1, cfg=False, encode=True)
    assert encode.conv == pytest.approx(work.conv / 2) and encode.memory == pytest.approx(work.memory / 2)


def _load(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_gpu_runbook_measures_at_diffusion_shapes_and_its_figures_feed_the_table(tmp_path: Path) -> None:
    """The runbook step runs the same code on a CPU at tiny shapes (a dry run); on an H100 its figures
    become the card's shares in memory/data/gpu_efficiency.json, which find_gpu reads first."""
    bench = _load(ROOT / "bench" / "gpu_throughput_gpu.py")
    out = tmp_path / "gpu_throughput.json"
    assert bench.main(["--device", "cpu", "--quick", "--repeat", "1", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert [len(result["measured"][k]) for k in ("bf16_matmul", "bf16_attention")] == [2, 2]
    assert all(r["tflops"] > 0 for r in result["measured"]["bf16_matmul"])
    h100 = {"device": "NVIDIA H100 80GB HBM3", "best_tflops": {"bf16_matmul": 700.0, "bf16_attention": 450.0}}
    data = tmp_path / "gpu_efficiency.json"
    _load(ROOT / "scripts" / "gpu_efficiency.py").merge(h100, data)
    measured = measured_efficiency(data)["H100"]
    # the kernels' measured share of the card's peak, as they ran (power limit included)
    assert measured.matmul == pytest.approx(700 / 989, abs=1e-3)
    assert measured.attention == pytest.approx(450 / 989, abs=1e-3)
    assert "bench/gpu_throughput_gpu.py on NVIDIA H100" in measured.source
    # a kernel that outran the spec sheet (a boost clock above it) is held to the card's peak
    fast = {
        "device": "NVIDIA GeForce RTX 4090",
        "best_tflops": {"bf16_matmul": 179.0, "bf16_attention": 120.0},
    }
    _load(ROOT / "scripts" / "gpu_efficiency.py").merge(fast, data)
    measured_efficiency.cache_clear()
    assert measured_efficiency(data)["RTX 4090"].matmul == 1.0
