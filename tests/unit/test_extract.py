"""Workload extraction where the node table or the catalog knows nothing: loaders of new families,
nodes newer than the table, checkpoints and LoRAs nobody catalogued."""

from __future__ import annotations

import re
from typing import Any

import pytest

from comfyui_headroom.memory.models.catalog import lookup
from comfyui_headroom.memory.planning.extract import workload_from_graph
from comfyui_headroom.memory.planning.workload import Workload
from comfyui_headroom.memory.workflow.graph import Link, parse_workflow
from comfyui_headroom.memory.workflow.order import predict_order
from comfyui_headroom.memory.workflow.values import Evaluator
from headroom_testing.prompts import offload_t2i


def _ui(nodes: list[tuple[int, str, list[tuple[str, str, int | None]], list[str], list[Any]]]) -> dict:
    """A UI workflow from (id, type, [(input, type, link id)], [output types], widgets_values).

    Links are numbered by the caller; an output's links are found from the inputs that use them.
    """
    links, ui_nodes = [], []
    feeds: dict[int, tuple[int, int, str]] = {}
    for node_id, _, _, outputs, _ in nodes:
        for slot, out_type in enumerate(outputs):
            feeds[(node_id * 10 + slot)] = (node_id, slot, out_type)
    for node_id, kind, inputs, outputs, widgets in nodes:
        ui_inputs = []
        for slot, (name, in_type, link) in enumerate(inputs):
            widget = {"widget": {"name": name}} if link is None else {}  # a widget shown as a socket
            ui_inputs.append({"name": name, "type": in_type, "link": link} | widget)
            if link is not None:
                origin, origin_slot, out_type = feeds[link]
                links.append([link, origin, origin_slot, node_id, slot, out_type])
        ui_outputs = [
            {"name": t, "type": t, "links": [link for link in feeds if feeds[link][:2] == (node_id, s)]}
            for s, t in enumerate(outputs)
        ]
        ui_nodes.append(
            {
                "id": node_id,
                "type": kind,
                "mode": 0,
                "inputs": ui_inputs,
                "outputs": ui_outputs,
                "widgets_values": widgets,
            }
        )
    return {"last_node_id": max(n[0] for n in nodes), "nodes": ui_nodes, "links": links, "version": 0.4}


def _workload(data: dict) -> Workload:
    graph = parse_workflow(data)
    return workload_from_graph(graph, predict_order(graph))


def _uses(w: Workload) -> dict[str, set[str]]:
    labels = {c.id: c.label for c in w.components}
    return {s.node_id: {labels[c] for c in s.uses} for s in w.steps if s.uses}


def test_a_loader_newer_than_the_node_table_is_read_from_its_file_input() -> None:
    # a family's own CLIP loader (LTX-2's): the file names the text encoder, ckpt_name only a part
    w = _workload(
        _ui(
            [
                (
                    1,
                    "NewFamilyTextEncoderLoader",
                    [("text_encoder", "COMBO", None), ("ckpt_name", "COMBO", None)],
                    ["CLIP"],
                    ["gemma_3_12B_it.safetensors", "x.safetensors"],
                ),
                (2, "CLIPTextEncode", [("clip", "CLIP", 10)], ["CONDITIONING"], ["a cat"]),
                (3, "ConditioningZeroOut", [("conditioning", "CONDITIONING", 20)], ["CONDITIONING"], []),
                (4, "PreviewAny", [("source", "*", 30)], [], []),
            ]
        )
    )
    labels = [c.label for c in w.components]
    assert labels == ["gemma_3_12B_it.safetensors [text_encoder]"]
    assert _uses(w) == {"2": {"gemma_3_12B_it.safetensors [text_encoder]"}}


def test_an_unknown_node_passes_on_only_what_its_recorded_outputs_can_carry() -> None:
    # LTXVLatentUpsampler-like: VAE in, LATENT out -> it computes with the VAE and passes nothing on
    api_ckpt = "sd_xl_base_1.0.safetensors"
    w = _workload(
        _ui(
            [
                (1, "CheckpointLoaderSimple", [], ["MODEL", "CLIP", "VAE"], [api_ckpt]),
                (2, "EmptyLatentImage", [], ["LATENT"], [1024, 1024, 1]),
                (
                    3,
                    "BrandNewLatentUpsampler",
                    [("samples", "LATENT", 20), ("vae", "VAE", 12)],
                    ["LATENT"],
                    [],
                ),
                (6, "LatentUpscaleBy", [("samples", "LATENT", 30)], ["LATENT"], ["nearest-exact", 1.5]),
                (4, "VAEDecode", [("samples", "LATENT", 60), ("vae", "VAE", 12)], ["IMAGE"], []),
                (5, "SaveImage", [("images", "IMAGE", 40)], [], ["out"]),
            ]
        )
    )
    uses = _uses(w)
    assert uses["3"] == uses["4"] == {f"{api_ckpt} [vae]"}
    assert "6" not in uses, "a latent from the unknown node carries no weights"


def test_an_uncatalogued_checkpoint_reaches_the_sampler_through_a_guider() -> None:
    prompt = {
        "1": {
            "class_type": "CheckpointLoaderSimple",
            "inputs": {"ckpt_name": "brandnew-19b-fp8.safetensors"},
        },
        "2": {"class_type": "CLIPTextEncode", "inputs": {"text": "a", "clip": ["1", 1]}},
        "3": {
            "class_type": "CFGGuider",
            "inputs": {"model": ["1", 0], "positive": ["2", 0], "negative": ["2", 0], "cfg": 4.0},
        },
        "4": {"class_type": "RandomNoise", "inputs": {"noise_seed": 1}},
        "5": {"class_type": "KSamplerSelect", "inputs": {"sampler_name": "euler"}},
        "6": {
            "class_type": "BasicScheduler",
            "inputs": {"model": ["1", 0], "scheduler": "simple", "steps": 20, "denoise": 1.0},
        },
        "7": {"class_type": "EmptyLatentImage", "inputs": {"width": 512, "height": 512, "batch_size": 1}},
        "8": {
            "class_type": "SamplerCustomAdvanced",
            "inputs": {
                "noise": ["4", 0],
                "guider": ["3", 0],
                "sampler": ["5", 0],
                "sigmas": ["6", 0],
                "latent_image": ["7", 0],
            },
        },
        "9": {"class_type": "VAEDecode", "inputs": {"samples": ["8", 0], "vae": ["1", 2]}},
        "10": {"class_type": "SaveImage", "inputs": {"images": ["9", 0], "filename_prefix": "x"}},
    }
    w = _workload(prompt)
    (ckpt,) = w.components
    assert ckpt.kind == "checkpoint" and ckpt.source == "estimate" and ckpt.streamable
    uses = _uses(w)
    assert set(uses) == {"2", "8", "9"}, "the guider passes the model on; the sampler computes with it"
    assert any("unknown model file" in note for note in w.notes)


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("llama_3.1_8b_instruct_unknown.safetensors", 8e9),
        ("gemma_3_12B_it_unknown.safetensors", 12e9),
        ("wan2.1_t2v_1.3B_unknown.safetensors", 1.3e9),
        ("brandnew_14B_bf16.safetensors", 14e9),
    ],
)
def test_parameter_counts_in_names(name: str, params: float) -> None:
    info = lookup(name, "diffusion_model")
    assert info.source == "estimate"
    assert re.search(rf"(?<![\d.]){params / 1e9:g}B", info.note), info.note


def test_a_lora_named_after_its_base_model_is_sized_by_its_rank() -> None:
    big = lookup("brandnew-19b-distilled-lora-384.safetensors", "lora")
    small = lookup("brandnew-19b-style-lora-rank16.safetensors", "lora")
    # rank 384 of a 19B model: ~2*384/3072 = 25% of the base, never the base's own size
    assert 0.2 * 19e9 * 2 < big.bytes < 0.3 * 19e9 * 2
    assert small.bytes == pytest.approx(big.bytes * 16 / 384, rel=0.01)
    assert big.blocks, "a LoRA patches every block, so it streams with them"


def _offload_prompt(**inputs: Any) -> dict:
    return offload_t2i(**({"clip_type": "flux"} | inputs))


def test_the_offload_loader_takes_a_part_from_its_own_file_over_the_checkpoint() -> None:
    whole = _workload(_offload_prompt(checkpoint="flux1-dev-fp8.safetensors"))
    assert {c.kind for c in whole.components} == {"diffusion_model", "text_encoder", "vae"}
    split = _workload(
        _offload_prompt(
            checkpoint="flux1-dev-fp8.safetensors",
            vae="ae.safetensors",
            text_encoder_1="clip_l.safetensors",
            text_encoder_2="t5xxl_fp16.safetensors",
        )
    )
    by_input = {c.id.split(":")[1]: c for c in split.components}
    # the checkpoint still gives the diffusion model; encoders and VAE come from their own files, and
    # the two encoders are one component, as the loader builds them into one CLIP
    assert set(by_input) == {"checkpoint", "vae", "text_encoder_1"}
    assert by_input["checkpoint"].kind == "diffusion_model"
    encoders = by_input["text_encoder_1"]
    assert encoders.label == "clip_l.safetensors + t5xxl_fp16.safetensors [text_encoder]"
    sizes = [lookup(f, "text_encoder").bytes for f in ("clip_l.safetensors", "t5xxl_fp16.safetensors")]
    assert encoders.bytes == sum(sizes)


def test_the_offload_loader_residency_inputs_pin_its_components() -> None:
    w = _workload(
        _offload_prompt(
            diffusion_model="flux1-dev.safetensors",
            text_encoder_1="clip_l.safetensors",
            text_encoder_2="t5xxl_fp16.safetensors",
            vae="ae.safetensors",
            model_residency="disk",
            text_encoder_residency="ram",
        )
    )
    pins = {c.kind: {x.pin for x in w.components if x.kind == c.kind} for c in w.components}
    assert pins == {"diffusion_model": {"disk"}, "text_encoder": {"ram"}, "vae": {""}}


def test_steps_reach_a_sampler_from_a_frontend_primitive_through_a_backend_primitive_and_a_reroute() -> None:
    data = _ui(
        [
            (1, "PrimitiveNode", [], ["INT"], [12, "fixed"]),
            (2, "PrimitiveInt", [("value", "INT", 10)], ["INT"], [20, "fixed"]),
            (3, "Reroute", [("", "*", 20)], ["INT"], []),
            (
                4,
                "KSampler",
                [("steps", "INT", 30)],
                ["LATENT"],
                [1, "fixed", 20, 8.0, "euler", "normal", 1.0],
            ),
        ]
    )
    graph = parse_workflow(data)
    assert graph.nodes["4"].inputs["steps"] == Link("2", 0)  # the reroute is gone, the PrimitiveInt runs
    assert Evaluator(graph).input("4", "steps").value == 12  # the frontend primitive's value


def test_loaders_of_2026_model_types_give_components_their_consumers_compute_with() -> None:
    # MoGe (0.33's LoadMoGeModel -> MOGE_MODEL) and the LTX-2 latent upscaler: types no table names.
    prompt = {
        "1": {"class_type": "LoadMoGeModel", "inputs": {"model_name": "moge_2_vitl_normal_fp16.safetensors"}},
        "2": {"class_type": "LoadImage", "inputs": {"image": "room.png"}},
        "3": {"class_type": "MoGeInference", "inputs": {"moge_model": ["1", 0], "image": ["2", 0]}},
        "4": {"class_type": "PreviewAny", "inputs": {"source": ["3", 0]}},
    }
    workload = _workload(prompt)
    (moge,) = workload.components
    assert moge.kind == "other" and moge.bytes > 0 and not moge.streamable
    assert _uses(workload) == {"3": {moge.label}}


def test_the_ltx2_audio_vae_is_a_part_of_its_checkpoint_sized_by_its_released_twin() -> None:
    prompt = {
        "1": {"class_type": "LTXVAudioVAELoader", "inputs": {"ckpt_name": "ltx-2-19b-distilled.safetensors"}},
        "2": {"class_type": "LTXVEmptyLatentAudio",
              "inputs": {"frames_number": 121, "frame_rate": 25, "batch_size": 1, "audio_vae": ["1", 0]}},
        "3": {"class_type": "LTXVAudioVAEDecode", "inputs": {"samples": ["2", 0], "audio_vae": ["1", 0]}},
        "4": {"class_type": "PreviewAny", "inputs": {"source": ["3", 0]}},
    }  # fmt: skip
    workload = _workload(prompt)
    (vae,) = workload.components
    assert vae.label == "ltx-2-19b-distilled.safetensors [audio VAE]"
    assert vae.bytes == lookup("ltx-2.5-audio-vae-bf16.safetensors", "vae").bytes
    assert any("builds the audio VAE inside ltx-2-19b-distilled.safetensors" in n for n in workload.notes)
    # the empty audio latent only asks the VAE for a count: only the decode computes with it
    assert _uses(workload) == {"3": {vae.label}}


@pytest.mark.parametrize(
    ("file", "noted"),
    [
        ("ltx-2-19b-distilled.safetensors", True),  # sized from the templates' notes: the host reads its dims
        ("v1-5-pruned-emaonly-fp16.safetensors", False),  # built from the host's class
    ],
)
def test_a_size_taken_from_the_templates_is_a_note(file: str, noted: bool) -> None:
    info = lookup(file, "checkpoint", None)
    assert info.source == "catalog", "both files are catalogued"
    prompt = {
        "1": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": file}},
        "2": {"class_type": "EmptyLatentImage", "inputs": {"width": 512, "height": 512, "batch_size": 1}},
        "3": {"class_type": "CLIPTextEncode", "inputs": {"text": "x", "clip": ["1", 1]}},
        "4": {
            "class_type": "KSampler",
            "inputs": {
                "model": ["1", 0],
                "positive": ["3", 0],
                "negative": ["3", 0],
                "latent_image": ["2", 0],
                "seed": 1,
                "steps": 4,
                "cfg": 1.0,
                "sampler_name": "euler",
                "scheduler": "normal",
                "denoise": 1.0,
            },
        },  # fmt: skip
        "5": {"class_type": "VAEDecode", "inputs": {"samples": ["4", 0], "vae": ["1", 2]}},
        "6": {"class_type": "SaveImage", "inputs": {"images": ["5", 0], "filename_prefix": "x"}},
    }
    notes = [n for n in _workload(prompt).notes if "size as the official templates state it" in n]
    assert bool(notes) == noted, notes
    if noted:
        assert file in notes[0] and "blocks assumed equal" in notes[0]
