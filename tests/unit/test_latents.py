"""What a sampler works on, read along the links (memory/planning/latents.py): steps from sigma lists,
latent sizes and frames from where they are made, and what cannot be read named in a note."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import pytest

from comfyui_headroom.memory.planning.extract import _Extractor, workload_from_graph
from comfyui_headroom.memory.planning.gpus import MODEL
from comfyui_headroom.memory.planning.latents import AUDIO_SHAPE, Shape
from comfyui_headroom.memory.planning.loaders import node_io
from comfyui_headroom.memory.workflow.graph import Link, parse_workflow
from comfyui_headroom.memory.workflow.order import predict_order
from comfyui_headroom.memory.workflow.values import Evaluator
from headroom_testing.official_templates import official_template


def _prompt(**nodes: tuple[str, dict[str, Any]]) -> dict:
    return {key[1:]: {"class_type": kind, "inputs": inputs} for key, (kind, inputs) in nodes.items()}


def _extractor(data: dict) -> _Extractor:
    graph = parse_workflow(data)
    return _Extractor(graph, predict_order(graph), node_io, None)


def _sampler(sigmas: list, latent: list | None = None, **extra: tuple[str, dict[str, Any]]) -> dict:
    """A SamplerCustomAdvanced (node 9) fed by ``sigmas`` and an empty latent (node 1) or ``latent``."""
    return _prompt(
        n1=("EmptyLatentImage", {"width": 832, "height": 1216, "batch_size": 1}),
        n2=("UNETLoader", {"unet_name": "flux1-dev.safetensors", "weight_dtype": "default"}),
        n3=("BasicGuider", {"model": ["2", 0], "conditioning": ["4", 0]}),
        n4=("CLIPTextEncode", {"clip": ["16", 0], "text": "a cat"}),
        n16=("CLIPLoader", {"clip_name": "t5xxl_fp16.safetensors", "type": "flux", "device": "default"}),
        n5=("KSamplerSelect", {"sampler_name": "euler"}),
        n6=("RandomNoise", {"noise_seed": 1}),
        n9=(
            "SamplerCustomAdvanced",
            {
                "noise": ["6", 0],
                "guider": ["3", 0],
                "sampler": ["5", 0],
                "sigmas": sigmas,
                "latent_image": latent or ["1", 0],
            },
        ),  # fmt: skip
        n10=("PreviewAny", {"source": ["9", 0]}),
        **extra,
    )


@pytest.mark.parametrize(
    ("sigma_nodes", "output", "count"),
    [
        ({"n7": ("Flux2Scheduler", {"steps": 28, "width": 1024, "height": 1024})}, 0, 29),
        (
            {"n7": ("BasicScheduler", {"model": ["2", 0], "scheduler": "simple", "steps": 9, "denoise": 1})},
            0,
            10,
        ),
        ({"n7": ("ManualSigmas", {"sigmas": "1., 0.99375, 0.9875, 0.909375, 0.725, 0.4218, 0.0"})}, 0, 7),
        # SplitSigmas(step=3) of 21 sigmas: sigmas[:4] and sigmas[3:]
        (
            {
                "n7": (
                    "BasicScheduler",
                    {"model": ["2", 0], "scheduler": "simple", "steps": 20, "denoise": 1},
                ),
                "n8": ("SplitSigmas", {"sigmas": ["7", 0], "step": 3}),
            },
            0,
            4,
        ),  # fmt: skip
        (
            {
                "n7": (
                    "BasicScheduler",
                    {"model": ["2", 0], "scheduler": "simple", "steps": 20, "denoise": 1},
                ),
                "n8": ("SplitSigmas", {"sigmas": ["7", 0], "step": 3}),
            },
            1,
            18,
        ),  # fmt: skip
        # SplitSigmasDenoise(0.25) of 21 sigmas: total 5 steps -> sigmas[:-5] (16) and sigmas[-6:] (6)
        (
            {
                "n7": (
                    "BasicScheduler",
                    {"model": ["2", 0], "scheduler": "simple", "steps": 20, "denoise": 1},
                ),
                "n8": ("SplitSigmasDenoise", {"sigmas": ["7", 0], "denoise": 0.25}),
            },
            0,
            16,
        ),  # fmt: skip
        (
            {
                "n7": (
                    "BasicScheduler",
                    {"model": ["2", 0], "scheduler": "simple", "steps": 20, "denoise": 1},
                ),
                "n8": ("SplitSigmasDenoise", {"sigmas": ["7", 0], "denoise": 0.25}),
            },
            1,
            6,
        ),  # fmt: skip
        (
            {
                "n7": ("Flux2Scheduler", {"steps": 4, "width": 1024, "height": 1024}),
                "n8": ("FlipSigmas", {"sigmas": ["7", 0]}),
            },
            0,
            5,
        ),  # fmt: skip
    ],
)
def test_sigma_lists_are_counted_as_the_hosts_nodes_make_and_cut_them(
    sigma_nodes: dict, output: int, count: int
) -> None:
    source = "8" if "n8" in sigma_nodes else "7"
    data = _sampler([source, output], **sigma_nodes)
    ex = _extractor(data)
    assert ex.latents.sigma_count(ex.g.nodes["9"].inputs["sigmas"]).value == count
    assert ex._evaluations("9") == count - 1
    assert not ex.notes


def test_sigmas_made_at_run_time_take_the_default_steps_with_a_note() -> None:
    data = _sampler(["7", 0], n7=("SomeCustomSigmas", {"model": ["2", 0]}))
    ex = _extractor(data)
    assert ex._evaluations("9") == 20
    assert any(
        "node 9 (SamplerCustomAdvanced): its steps are not known" in n and "20 assumed" in n for n in ex.notes
    )


def test_latent_shapes_follow_resizes_and_image_sizes() -> None:
    data = _sampler(
        ["7", 0],
        latent=["15", 0],
        n7=("Flux2Scheduler", {"steps": 4, "width": 1024, "height": 1024}),
        # an empty 1280x720 image at half size, measured, sizes a video latent of 121 frames
        n11=("EmptyImage", {"width": 1280, "height": 720, "batch_size": 1, "color": 0}),
        n12=("ImageScaleBy", {"image": ["11", 0], "upscale_method": "nearest-exact", "scale_by": 0.5}),
        n13=("GetImageSize", {"image": ["12", 0]}),
        n14=(
            "EmptyLTXVLatentVideo",
            {"width": ["13", 0], "height": ["13", 1], "length": 121, "batch_size": 1},
        ),
        n15=("LatentUpscaleBy", {"samples": ["14", 0], "upscale_method": "nearest-exact", "scale_by": 2.0}),
    )
    ex = _extractor(data)
    assert ex.latents.step_shape("9").value == Shape(1280, 720, frames=121, batch=1)
    assert not ex.notes


@pytest.mark.parametrize(
    ("mode", "extra", "expected"),
    [
        ("scale longer dimension", {"resize_type.longer_size": 1024}, Shape(1024, 576)),
        ("scale total pixels", {"resize_type.megapixels": 0.25}, Shape(683, 384)),
        ("scale by multiplier", {"resize_type.multiplier": 0.5}, Shape(960, 540)),
        (
            "scale dimensions",
            {"resize_type.width": 512, "resize_type.height": 256, "resize_type.crop": "center"},
            Shape(512, 256),
        ),  # fmt: skip
    ],
)
def test_the_2026_resize_node_is_read_by_its_mode(mode: str, extra: dict, expected: Shape) -> None:
    data = _sampler(
        ["7", 0],
        latent=["13", 0],
        n7=("Flux2Scheduler", {"steps": 4, "width": 1024, "height": 1024}),
        n11=("EmptyImage", {"width": 1920, "height": 1080, "batch_size": 1, "color": 0}),
        n12=(
            "ResizeImageMaskNode",
            {"input": ["11", 0], "resize_type": mode, "scale_method": "area", **extra},
        ),
        n13=("VAEEncode", {"pixels": ["12", 0], "vae": ["14", 0]}),
        n14=("VAELoader", {"vae_name": "ae.safetensors"}),
    )
    assert _extractor(data).latents.step_shape("9").value == expected


def test_a_loaded_image_s_size_is_a_named_assumption() -> None:
    data = _sampler(
        ["7", 0],
        latent=["13", 0],
        n7=("Flux2Scheduler", {"steps": 4, "width": 1024, "height": 1024}),
        n11=("LoadImage", {"image": "photo.png"}),
        n13=("VAEEncode", {"pixels": ["11", 0], "vae": ["14", 0]}),
        n14=("VAELoader", {"vae_name": "ae.safetensors"}),
    )
    graph = parse_workflow(data)
    workload = workload_from_graph(graph, predict_order(graph))
    notes = "\n".join(workload.notes)
    assert "node 9 (SamplerCustomAdvanced): the latent's size is not known before the run" in notes
    assert "node 11 (LoadImage): its size is read from the file when it runs" in notes
    assert "1024x1024, 1 frame assumed" in notes
    # resized to a megapixel target, the size is known but for the aspect: square, said so
    scale = {"image": ["11", 0], "upscale_method": "area", "megapixels": 1.0, "resolution_steps": 1}
    data["12"] = {"class_type": "ImageScaleToTotalPixels", "inputs": scale}
    data["13"]["inputs"]["pixels"] = ["12", 0]
    ex = _extractor(data)
    assert ex.latents.step_shape("9").value == Shape(1024, 1024)
    ex.step("9")
    assert any("1024x1024 planned" in n and "aspect assumed square" in n for n in ex.notes)


def test_resolution_selector_and_number_convert_are_evaluated_as_the_host_does() -> None:
    data = _prompt(
        n1=("ResolutionSelector", {"aspect_ratio": "16:9 (Widescreen)", "megapixels": 1.0, "multiple": 16}),
        n2=("ComfyNumberConvert", {"value": "33"}),
        n3=(
            "EmptyHunyuanLatentVideo",
            {"width": ["1", 0], "height": ["1", 1], "length": ["2", 1], "batch_size": 1},
        ),
    )
    values = Evaluator(parse_workflow(data))
    # sqrt(2^20 / 144) = 85.33: 16 * 85.33 = 1365.3 -> 1360 (a multiple of 16), 9 * 85.33 = 768
    assert values.input("3", "width").value == 1360 and values.input("3", "height").value == 768
    assert values.input("3", "length").value == 33


def test_text_generation_computes_with_the_encoder_once_per_token() -> None:
    data = _prompt(
        n1=("CLIPLoader", {"clip_name": "gemma_3_12B_it.safetensors", "type": "ltxv", "device": "default"}),
        n2=(
            "TextGenerate",
            {
                "clip": ["1", 0],
                "prompt": "a cat",
                "max_length": 256,
                "sampling_mode": "off",
                "thinking": False,
                "use_default_template": True,
            },
        ),  # fmt: skip
        n3=("PreviewAny", {"source": ["2", 0]}),
    )
    graph = parse_workflow(data)
    workload = workload_from_graph(graph, predict_order(graph))
    (step,) = [s for s in workload.steps if s.node_id == "2"]
    assert step.uses and step.evaluations == 257


def test_unknown_node_types_that_run_are_one_note_with_their_counts() -> None:
    data = _sampler(
        ["7", 0],
        n7=("Flux2Scheduler", {"steps": 4, "width": 1024, "height": 1024}),
        n11=("MyCustomNode", {"x": ["9", 0]}),
        n12=("MyCustomNode", {"x": ["9", 0]}),
        n13=("PreviewAny", {"source": ["11", 0]}),
        n14=("PreviewAny", {"source": ["12", 0]}),
        n15=("NeverRuns", {}),
    )
    graph = parse_workflow(data)
    notes = workload_from_graph(graph, predict_order(graph)).notes
    (note,) = [n for n in notes if "unknown to the planner" in n]
    assert note.startswith("2 node(s) of 1 type(s) that will run") and "MyCustomNode (x2)" in note
    assert "NeverRuns" not in note


# ------------------------------------------------------------------------- the official templates


_template = official_template


def _nodes(data: dict) -> list[dict]:
    nodes = list(data["nodes"])
    for definition in (data.get("definitions") or {}).get("subgraphs") or []:
        nodes += definition["nodes"]
    return nodes


def _sampling(data: dict, kinds: tuple[str, ...] = ("SamplerCustomAdvanced", "KSampler")) -> list:
    graph = parse_workflow(data)
    workload = workload_from_graph(graph, predict_order(graph))
    return [s for s in workload.steps if s.label in kinds and s.uses]


@pytest.mark.parametrize(("name", "scheduler"), [("image_flux2_klein_text_to_image", "Flux2Scheduler")])
def test_a_flux2_scheduler_template_is_planned_at_its_steps(name: str, scheduler: str) -> None:
    seconds = {}
    for steps in (4, 20, 40):
        data = copy.deepcopy(_template(name))
        for node in (n for n in _nodes(data) if n["type"] == scheduler):  # each subgraph definition's
            node["widgets_values"][0] = steps  # steps is the scheduler's first widget
        (sampler,) = _sampling(data)
        assert sampler.evaluations == steps
        seconds[steps] = sampler.compute_s
    assert seconds[40] == pytest.approx(2 * seconds[20]) and seconds[20] == pytest.approx(5 * seconds[4])


def test_a_manual_sigmas_template_is_planned_at_its_steps() -> None:
    data = _template("video_ltx2_t2v_distilled")
    first, second = _sampling(data)
    assert (first.evaluations, second.evaluations) == (8, 3)  # 9 and 4 sigmas in its two ManualSigmas
    (manual, *_) = [
        n for n in _nodes(data) if n["type"] == "ManualSigmas" and n["widgets_values"][0].count(",") == 8
    ]
    manual["widgets_values"][0] = ", ".join(["0.5"] * 17)  # 16 steps
    doubled, _ = _sampling(data)
    assert doubled.evaluations == 16 and doubled.compute_s == pytest.approx(2 * first.compute_s)


@pytest.mark.parametrize(
    ("name", "latent", "frames"),
    [
        ("video_hunyuan_video_1.5_720p_t2v", "EmptyHunyuanVideo15Latent", 121),
        ("video_ltx2_t2v", "EmptyLTXVLatentVideo", 121),
    ],
)
def test_a_video_template_is_planned_at_its_frames(name: str, latent: str, frames: int) -> None:
    data = _template(name)
    graph = parse_workflow(data)
    order = predict_order(graph)
    ex = _Extractor(graph, order, node_io, None)
    samplers = _sampling(data)
    assert samplers and all(ex.latents.step_shape(s.node_id).value.frames == frames for s in samplers)
    # the same graph with half the frames (the latent's own input, or the primitive that feeds it)
    (node,) = [n for n in graph.nodes.values() if n.class_type == latent]
    target, name = node, "length"
    if isinstance(node.inputs["length"], Link):
        target, name = graph.nodes[node.inputs["length"].node], "value"
    graph.nodes[target.id] = replace(target, inputs={**target.inputs, name: (frames - 1) // 2 + 1})
    workload = workload_from_graph(graph, order)
    shorter = [s for s in workload.steps if s.node_id in {x.node_id for x in samplers}]
    # fewer frames: fewer tokens, less compute (attention grows faster than the frames) and activations
    for long, short in zip(samplers, shorter, strict=True):
        assert short.compute_s < 0.6 * long.compute_s
        assert short.activation <= long.activation


def test_the_audio_half_of_an_ltx2_latent_is_not_sized_as_video() -> None:
    data = _prompt(
        n1=("EmptyLTXVLatentVideo", {"width": 1280, "height": 720, "length": 121, "batch_size": 1}),
        n2=("LTXVSeparateAVLatent", {"av_latent": ["1", 0]}),
        n3=("PreviewAny", {"source": ["2", 1]}),
        n4=("PreviewAny", {"source": ["2", 0]}),
    )
    ex = _extractor(data)
    assert ex.latents.shape(Link("2", 0)).value == Shape(1280, 720, frames=121)
    assert ex.latents.shape(Link("2", 1)).value == AUDIO_SHAPE


def test_a_deep_nest_of_run_time_switches_is_bounded_not_recursed() -> None:
    data = _prompt(n0=("EmptyLatentImage", {"width": 512, "height": 512, "batch_size": 1}))
    data["c"] = {"class_type": "SomeCustomBool", "inputs": {}}
    previous = "0"
    for i in range(1, 5001):  # each switch's false branch is the previous switch
        branches = {"switch": ["c", 0], "on_false": [previous, 0], "on_true": ["0", 0]}
        data[f"s{i}"] = {"class_type": "ComfySwitchNode", "inputs": branches}
        previous = f"s{i}"
    data["k"] = {"class_type": "VAEDecode", "inputs": {"samples": [previous, 0], "vae": ["v", 0]}}
    data["v"] = {"class_type": "VAELoader", "inputs": {"vae_name": "ae.safetensors"}}
    data["p"] = {"class_type": "PreviewImage", "inputs": {"images": ["k", 0]}}
    ex = _extractor(data)
    read = ex.latents.step_shape("k")  # no RecursionError: the nesting stops at its bound
    assert read.value is None or read.value == Shape(512, 512)


@pytest.mark.parametrize(
    ("kind", "inputs", "tokens"),
    [
        ("EmptyAceStep1.5LatentAudio", {"seconds": 120.0, "batch_size": 1}, 1500),  # 25/s, patch 2
        ("EmptyAceStepLatentAudio", {"seconds": 60.0, "batch_size": 1}, 646),  # 44100 / 512 / 8 per s
        ("EmptyLatentAudio", {"seconds": 47.6, "batch_size": 2}, 1025),  # 44100 / 2048 per s
        ("EmptyLatentHunyuan3Dv2", {"resolution": 3072, "batch_size": 1}, 3072),
        ("EmptyTrellis2LatentStructure", {"batch_size": 1}, 4096),  # 16^3 voxels
    ],
)
def test_audio_and_3d_latents_plan_on_their_real_token_counts(kind: str, inputs: dict, tokens: int) -> None:
    """0.33's audio and 3-D latent nodes: the sequence they make, one row of 16 px tiles (so an unspecced
    family's 8x latent and 2x2 patch count exactly ``tokens``), said in a note."""
    ex = _extractor(_prompt(n1=(kind, inputs), n2=("PreviewAny", {"source": ["1", 0]})))
    read = ex.latents.shape(Link("1", 0))
    assert read.value == Shape(tokens * 16, 16, 1, inputs["batch_size"])
    assert f"{tokens} tokens" in read.why


def test_an_audio_template_s_compute_follows_its_seconds() -> None:
    """audio_ace_step_1_5_split: 120 s of music; half the seconds, about half the matmuls and a quarter of
    the attention (it was one 1024^2 image whatever the length)."""
    data = _template("audio_ace_step_1_5_split")
    graph = parse_workflow(data)
    order = predict_order(graph)
    (node,) = [n for n in graph.nodes.values() if n.class_type == "EmptyAceStep1.5LatentAudio"]
    target, name = node, "seconds"
    if isinstance(node.inputs["seconds"], Link):
        target, name = graph.nodes[node.inputs["seconds"].node], "value"
    seconds = float(target.inputs[name])
    long = [s for s in workload_from_graph(graph, order).steps if s.compute_s and s.activation]
    graph.nodes[target.id] = replace(target, inputs={**target.inputs, name: seconds / 2})
    short = [s for s in workload_from_graph(graph, order).steps if s.compute_s and s.activation]
    (a,), (b,) = [[s for s in steps if s.node_id == "3"] for steps in (long, short)]
    # less the fixed overhead of each model call, which the length does not change
    fixed = a.evaluations * MODEL.kernels.overhead_s
    assert b.evaluations == a.evaluations
    assert 0.25 * (a.compute_s - fixed) < b.compute_s - fixed < 0.6 * (a.compute_s - fixed)
