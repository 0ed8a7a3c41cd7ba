"""memory/planning/remedies.py: "make it fit", each remedy planned again, on the official examples."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from comfyui_headroom.memory.planning.baselines import comfyui_reactive
from comfyui_headroom.memory.planning.costmodel import Budget, Hardware
from comfyui_headroom.memory.planning.pipeline import plan_workflow
from comfyui_headroom.memory.planning.planner import plan
from comfyui_headroom.memory.planning.remedies import (
    Change,
    Remedy,
    Replanner,
    apply_changes,
    make_it_fit,
    model_url,
    precision_stem,
    remedies_text,
    smaller_files,
)
from comfyui_headroom.memory.units import GiB

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "example_workflows"
WAN, SDXL = "Wan 2.2 14B text to video.json", "SDXL on an 8 GB card.json"


def _templates() -> Path | None:
    try:
        import comfyui_workflow_templates_json as package
    except ImportError:
        return None
    return Path(package.__file__).parent / "templates"


def _remedies(workflow: Any, card_gib: float, ram_gib: int = 32) -> tuple[Any, list[Remedy]]:
    budget = Budget.from_card(int(card_gib * GiB), ram_gib * GiB)
    planned = plan_workflow(workflow, budget, Hardware.pcie(4))
    assert planned.plan is not None
    return planned, make_it_fit(planned.graph, planned.workload, planned.plan)


def _replanned(planned: Any, remedy: Remedy) -> Any:
    """The remedy's changes made to the workflow and planned from scratch, as the user would after Apply."""
    graph = apply_changes(planned.graph, remedy.changes)
    workload = Replanner(graph, planned.plan.budget, planned.hardware).workload(graph)
    return plan(workload, planned.plan.budget, planned.hardware)


def _official() -> list[tuple[str, Any]]:
    cases: list[tuple[str, Any]] = []
    for name, card in ((WAN, 4.0), (SDXL, 1.4)):
        cases.append((name, (EXAMPLES / name, card)))
        cases.append((f"api/{name}", (json.loads((EXAMPLES / "api" / name).read_text()), card)))
    folder = _templates()
    if folder is not None:
        for name, card in (("video_wan2_2_14B_t2v.json", 4.0), ("image_sdxl_simple.json", 1.4)):
            cases.append((f"template {name}", (json.loads((folder / name).read_text()), card)))
    return cases


@pytest.mark.parametrize(("name", "case"), _official(), ids=[n for n, _ in _official()])
def test_the_official_examples_get_a_latent_that_the_plan_then_says_fits(name: str, case: Any) -> None:
    workflow, card = case
    planned, found = _remedies(workflow, card)
    assert not planned.plan.feasible, name  # the budget is one where they do not fit
    latent = found[0]
    assert latent.kind == "latent" and latent.fits
    assert {c.input for c in latent.changes} <= {"width", "height", "length", "batch_size"}
    after = _replanned(planned, latent)
    assert after.feasible
    assert latent.vram_peak == max(s.vram_peak for s in after.steps) <= planned.plan.budget.vram
    assert latent.wall_s == pytest.approx(after.wall_s)
    # the largest: one step of the node's size more does not fit
    width = next(c for c in latent.changes if c.input == "width")
    step = 16 if "Hunyuan" in latent.text else 8
    bigger = [
        Change(c.node, c.input, c.value + step) if c.input in ("width", "height") else c
        for c in latent.changes
    ]
    assert not Replanner(planned.graph, planned.plan.budget, planned.hardware).outcome(bigger).fits
    assert width.value % step == 0 and "now " in latent.text and "fits, peak" in latent.text


def test_wan_at_fp16_offers_the_fp8_files_with_size_and_link() -> None:
    workflow = json.loads((EXAMPLES / "api" / WAN).read_text())
    workflow["37"]["inputs"]["unet_name"] = "wan2.2_t2v_high_noise_14B_fp16.safetensors"
    workflow["56"]["inputs"]["unet_name"] = "wan2.2_t2v_low_noise_14B_fp16.safetensors"
    planned, found = _remedies(workflow, 5, ram_gib=64)
    assert not planned.plan.feasible
    precision = next(r for r in found if r.kind == "precision")
    assert {(c.node, c.value) for c in precision.changes} == {
        ("37", "wan2.2_t2v_high_noise_14B_fp8_scaled.safetensors"),
        ("56", "wan2.2_t2v_low_noise_14B_fp8_scaled.safetensors"),
    }
    assert (
        precision.url
        and precision.url.startswith("https://huggingface.co/")
        and precision.url in precision.text
    )
    assert precision.size and precision.size > 20 * GiB and "13.31 GiB" in precision.text
    assert _replanned(planned, precision).feasible


def test_sdxl_without_a_lower_precision_file_offers_none() -> None:
    assert smaller_files("sd_xl_base_1.0.safetensors", "diffusion_model", None) == []
    assert precision_stem("wan2.2_t2v_low_noise_14B_fp16.safetensors") == precision_stem(
        "Wan2.2_T2V_Low_Noise_14B_Q4_K_M.gguf"
    )
    assert model_url("no such file.safetensors") is None


def test_a_gguf_in_the_models_folder_is_offered_with_the_gguf_loader(tmp_path: Path) -> None:
    unet = tmp_path / "unet"
    unet.mkdir()
    (unet / "wan2.2_t2v_high_noise_14B_Q4_K_M.gguf").write_bytes(b"\0" * 1024)
    (unet / "other_model_Q4_K_M.gguf").write_bytes(b"\0" * 1024)
    found = smaller_files("wan2.2_t2v_high_noise_14B_fp16.safetensors", "diffusion_model", tmp_path)
    names = [f[0] for f in found]
    assert "wan2.2_t2v_high_noise_14B_Q4_K_M.gguf" in names and "other_model_Q4_K_M.gguf" not in names
    assert ("wan2.2_t2v_high_noise_14B_Q4_K_M.gguf", 1024, "folder") in found


def test_batch_comes_down_first() -> None:
    workflow = json.loads((EXAMPLES / "api" / SDXL).read_text())
    workflow["5"]["inputs"].update(width=4096, height=4096, batch_size=4)
    planned, found = _remedies(workflow, 8)
    assert not planned.plan.feasible
    assert found[0].changes == (Change("5", "batch_size", 2),)
    assert "batch 2" in found[0].text and "now 4096×4096, batch 4" in found[0].text


def test_when_only_comfyuis_loading_runs_out_the_headroom_node_comes_first() -> None:
    workflow = json.loads((EXAMPLES / "api" / SDXL).read_text())
    workflow["5"]["inputs"].update(width=2048, height=2048, batch_size=4)
    planned, found = _remedies(workflow, 4)
    assert planned.plan.feasible
    assert not comfyui_reactive(planned.workload, planned.plan.budget, planned.hardware).fits
    assert found[0].kind == "node" and found[0].changes == (
        Change("3", None, "HeadroomStreamingSampler", "replace"),
    )
    assert "Streaming KSampler" in found[0].text and found[0].vram_peak
    latent = next(r for r in found if r.kind == "latent")
    assert latent.vram_peak is None and "ComfyUI's own loading" in latent.text


def test_wan_gets_stream_model_on_both_samplers() -> None:
    planned, found = _remedies(json.loads((EXAMPLES / "api" / WAN).read_text()), 6)
    node = found[0]
    assert node.kind == "node" and [c.node for c in node.changes] == ["57", "58"]
    assert all(c.op == "insert" and c.value == "HeadroomStreamModel" for c in node.changes)
    graph = apply_changes(planned.graph, node.changes)
    assert graph.nodes["57"].inputs["model"].node.startswith("57.headroom")
    assert planned.graph.nodes["57"].inputs["model"].node == "54"  # the original is left as it was


def test_a_workflow_that_fits_gets_no_remedies() -> None:
    _, found = _remedies(EXAMPLES / SDXL, 24)
    assert found == [] and remedies_text(found) == []


def test_cli_prints_and_carries_the_remedies(tmp_path: Path) -> None:
    command = [
        sys.executable,
        "-m",
        "comfyui_headroom",
        "plan",
        str(EXAMPLES / WAN),
        "--vram",
        "4GB",
        "--ram",
        "32GB",
    ]
    out = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 1, out.stderr
    assert (
        "to make it fit:\n  1. Make the latent 576×576×81 frames at EmptyHunyuanLatentVideo (node 59)"
        in out.stdout
    )
    out = subprocess.run([*command, "--json"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    body = json.loads(out.stdout)
    remedy = body["remedies"][0]
    assert set(remedy) >= {"kind", "text", "changes", "vram_peak", "wall_s", "fits"}
    assert remedy["changes"] == [
        {"node": "59", "input": "width", "value": 576, "op": "set"},
        {"node": "59", "input": "height", "value": 576, "op": "set"},
    ]
    assert remedy["fits"] is True and remedy["vram_peak"] <= body["budget"]["vram"]


def test_m12_a_card_is_an_8_gib_card() -> None:
    from comfyui_headroom.memory.planning.preflight import article

    figures = ("8.00 GiB", "4.00 GiB", "11.00 GiB", "18.00 GiB", "16.00 GiB", "80.00 GiB")
    assert [article(f).split()[0] for f in figures] == ["an", "a", "an", "an", "a", "an"]


def test_cli_says_when_no_change_could_be_planned(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from comfyui_headroom.cli import main
    from comfyui_headroom.memory.planning import remedies

    def refuse(*args: Any, **kwargs: Any) -> list[Remedy]:
        raise ValueError("a variant that cannot be planned")

    monkeypatch.setattr(remedies, "make_it_fit", refuse)
    assert main(["plan", str(EXAMPLES / WAN), "--vram", "4GB", "--ram", "32GB"]) == 1
    out = capsys.readouterr()
    assert "note: no changes to make it fit could be planned: a variant that cannot be planned" in out.err
    assert "to make it fit:" not in out.out and "fits: NO" in out.out
