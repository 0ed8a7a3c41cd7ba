"""With the Offload Loader, a plan that streams the diffusion model at a sampler makes the residency
controller stream it there, whichever sampler node it is (KSamplerAdvanced; SamplerCustomAdvanced on
current hosts): nothing in the workflow is rewired. In the real host on CPU: the latent is the stock
loaders' bit for bit, the streamed blocks computed from the streamer's ring, every byte came back, our
wrappers are gone after the node, and the residency log says "streamed K/N blocks by Headroom"."""

from __future__ import annotations

import copy
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

from headroom_testing.harness import Host
from headroom_testing.prompts import offload_loader
from headroom_testing.stream_spy import StreamSpy, assert_restored, assert_streamed, snapshot
from headroom_testing.tiny_models import TINY_SD15_UNET, _init_state_dict, _on_meta, _save, build_clip_l

pytestmark = pytest.mark.host

UNET, CLIP = "streams_unet.safetensors", "streams_clip_l.safetensors"
CLIP16 = "streams_clip_l_fp16.safetensors"  # the dtype the host keeps CLIP-L's layers in: they map
STEPS = 2
DM = "11:diffusion_model:diffusion_model"


def build_deep_unet(models_dir: Path, name: str, seed: int) -> Path:
    """The host's SD1.5 UNetModel, deeper than the tiny one (290 MB in fp32): bigger than what the text
    encoder needs while it streams, so a budget can hold that and still stream this."""
    from comfy.ldm.modules.diffusionmodules.openaimodel import UNetModel

    config = copy.deepcopy(TINY_SD15_UNET)
    config.update(transformer_depth=[6], transformer_depth_output=[6, 6], transformer_depth_middle=6)
    model = _on_meta(lambda: UNetModel(**config))
    return _save(
        _init_state_dict(model, seed, torch.float32), models_dir, "diffusion_models", name, "sd15_unet"
    )


@pytest.fixture(scope="module")
def tiny(host: Host) -> Host:
    # fp32: on CPU the host computes in fp32, so file bytes are the bytes the plan and the streamer see
    build_deep_unet(host.models_dir, UNET, seed=21)
    build_clip_l(host.models_dir, name=CLIP, seed=22, dtype=torch.float32)
    build_clip_l(host.models_dir, name=CLIP16, seed=23, dtype=torch.float16)
    host.register_models_dir(host.models_dir)
    return host


def state(host: Host) -> ModuleType:
    return host.pack_module("nodes.host.state")


def sampling_nodes(sampler: str, model: list, clip: list, seed: int) -> dict[str, Any]:
    """The sampler as node "5" (its first output: the latent), its conditioning, latent and output."""
    nodes: dict[str, Any] = {
        "6": {"class_type": "SaveLatent", "inputs": {"samples": ["5", 0], "filename_prefix": "streams"}},
        "2": {"class_type": "CLIPTextEncode", "inputs": {"text": "a streamed fox", "clip": clip}},
        "4": {"class_type": "EmptyLatentImage", "inputs": {"width": 64, "height": 64, "batch_size": 1}},
    }
    if sampler == "KSamplerAdvanced":
        nodes["5"] = {
            "class_type": "KSamplerAdvanced",
            "inputs": {
                "model": model, "add_noise": "enable", "noise_seed": seed, "steps": STEPS, "cfg": 4.0,
                "sampler_name": "euler", "scheduler": "normal", "positive": ["2", 0], "negative": ["2", 0],
                "latent_image": ["4", 0], "start_at_step": 0, "end_at_step": 10000,
                "return_with_leftover_noise": "disable",
            },
        }  # fmt: skip
        return nodes
    nodes |= {
        "31": {"class_type": "RandomNoise", "inputs": {"noise_seed": seed}},
        "32": {
            "class_type": "CFGGuider",
            "inputs": {"model": model, "positive": ["2", 0], "negative": ["2", 0], "cfg": 4.0},
        },
        "33": {"class_type": "KSamplerSelect", "inputs": {"sampler_name": "euler"}},
        "34": {
            "class_type": "BasicScheduler",
            "inputs": {"model": model, "scheduler": "normal", "steps": STEPS, "denoise": 1.0},
        },
        "5": {
            "class_type": "SamplerCustomAdvanced",
            "inputs": {
                "noise": ["31", 0],
                "guider": ["32", 0],
                "sampler": ["33", 0],
                "sigmas": ["34", 0],
                "latent_image": ["4", 0],
            },
        },  # fmt: skip
    }
    return nodes


def with_clone(prompt: dict[str, Any], model: list) -> dict[str, Any]:
    """The model through a node that clones it before the sampler starts (as LoRA loaders and the
    ModelSampling nodes do): the streaming must reach that clone too."""
    clone = {
        "class_type": "ModelSamplingDiscrete",
        "inputs": {"model": model, "sampling": "eps", "zsnr": False},
    }
    for node in prompt.values():
        for name, value in node["inputs"].items():
            if value == model:
                node["inputs"][name] = ["12", 0]
    return prompt | {"12": clone}


def stock(host: Host, sampler: str, seed: int, clone: bool, clip: str = CLIP) -> dict[str, Any]:
    clip_inputs: dict[str, Any] = {"clip_name": clip}
    if "type" in host.node_class("CLIPLoader").INPUT_TYPES()["required"]:
        clip_inputs["type"] = "stable_diffusion"
    unet_inputs: dict[str, Any] = {"unet_name": UNET}
    if "weight_dtype" in host.node_class("UNETLoader").INPUT_TYPES()["required"]:
        unet_inputs["weight_dtype"] = "default"
    prompt = {
        "21": {"class_type": "UNETLoader", "inputs": unet_inputs},
        "22": {"class_type": "CLIPLoader", "inputs": clip_inputs},
        **sampling_nodes(sampler, ["21", 0], ["22", 0], seed),
    }
    return with_clone(prompt, ["21", 0]) if clone else prompt


def offloaded(sampler: str, seed: int, clone: bool = False) -> dict[str, Any]:
    # the model's copy stays in RAM between prompts (no move to its file), so the second prompt's
    # streaming can be checked against the storage the first one gave back
    loader = offload_loader(diffusion_model=UNET, text_encoder_1=CLIP, model_residency="ram")
    prompt = {"11": loader, **sampling_nodes(sampler, ["11", 0], ["11", 1], seed)}
    return with_clone(prompt, ["11", 0]) if clone else prompt


def latent(result: Any) -> torch.Tensor:
    return result.outputs["5"][0][0]["samples"]


@pytest.fixture
def streaming_budget(tiny: Host) -> Any:
    """A VRAM budget under which the plan streams the diffusion model at the sampler."""
    module = state(tiny)
    Budget = tiny.pack_module("memory.planning.costmodel").Budget
    pipeline = tiny.pack_module("memory.planning.pipeline")
    unet = (tiny.models_dir / "diffusion_models" / UNET).stat().st_size
    wide = Budget(vram=64 * 2**30, ram=64 * 2**30, pinned=2**30)
    planned = pipeline.plan_workflow(offloaded("KSamplerAdvanced", 1), wide, models_dir=[tiny.models_dir])
    step = next(s for s in planned.workload.steps if s.node_id == "5")
    budget = Budget(vram=step.activation_min + int(0.75 * unet), ram=64 * 2**30, pinned=2**30)
    module.residency().budget_override = budget
    tiny.free()
    yield module
    module.residency().budget_override = None
    tiny.free()


@pytest.mark.parametrize(
    ("sampler", "clone", "prompts"),
    [("KSamplerAdvanced", False, 2), ("KSamplerAdvanced", True, 1), ("SamplerCustomAdvanced", True, 1)],
    ids=["ksampler-advanced", "ksampler-advanced-clone", "sampler-custom-advanced-clone"],
)
def test_the_plan_streams_the_offloaded_model_at_any_sampler(
    tiny: Host,
    streaming_budget: ModuleType,
    monkeypatch: pytest.MonkeyPatch,
    sampler: str,
    clone: bool,
    prompts: int,
) -> None:
    """``clone``: the model reaches the sampler through a clone made before the sampler node starts.
    A second prompt takes the loader's model from the host's cache and streams it again."""
    if sampler == "SamplerCustomAdvanced" and tiny.legacy:
        pytest.skip("the 2024 host has no SamplerCustomAdvanced")
    controller = streaming_budget.residency().controller
    sampling = tiny.pack_module("nodes.host.sampling")
    seeds = [31 + 4 * clone + len(sampler) + i for i in range(prompts)]
    expected = [latent(tiny.run(stock(tiny, sampler, seed, clone))) for seed in seeds]
    tiny.free()
    spy = StreamSpy(tiny, monkeypatch)
    before: dict[str, Any] = {}
    for i, seed in enumerate(seeds):
        prompt_id = f"offload-streams-{sampler}-{clone}-{i}"
        result = tiny.run(offloaded(sampler, seed, clone), prompt_id=prompt_id)
        assert torch.equal(latent(result), expected[i])
        handle = controller.managed[DM].handle
        diffusion = handle.module.diffusion_model
        if i == 0:
            before = snapshot(diffusion)

        run = controller.runs[prompt_id]
        placement = next(sp for sp in run.plan.steps if sp.step.node_id == "5").placements[DM]
        assert placement.tier.gpu == "S", placement
        events = [e for e in controller.log(prompt_id) if e.action == "stream" and e.component == DM]
        assert [(e.kind, e.node_id) for e in events] == [("planned", "5"), ("armed", "5"), ("applied", "5")]
        assert events[-1].detail.startswith("streamed ") and "blocks by Headroom" in events[-1].detail
        assert events[-1].nbytes > 0
        assert ("5", "stream", DM) in controller.summary(prompt_id)["applied"]
        # the text encoder the plan streams at the encode streams there too (Stream CLIP's mechanism)
        encoder = [e for e in controller.log(prompt_id) if e.action == "stream" and e.component != DM]
        # (a second prompt takes the conditioning from the host's cache: no encode, nothing planned)
        kinds = [("planned", "2"), ("armed", "2"), ("applied", "2")] if i == 0 else []
        assert [(e.kind, e.node_id) for e in encoder] == kinds, encoder
        said = encoder[-1].detail if encoder else "blocks by Headroom, per encode"
        assert "blocks by Headroom" in said and "per encode" in said, encoder

        samplings = [w for w in spy.watched if w.streamer.model is diffusion]  # (the encoder's are apart)
        assert len(samplings) == i + 1 and len(spy.watched) == i + 2, "one streamer for each sampling"
        assert_streamed(samplings[i], STEPS)
        for patcher in [handle.patcher, *handle.live_clones()]:  # our wrappers left with the node
            assert sampling.streamed_model_of(patcher) is None
        assert "apply_model" not in vars(handle.module)
    if prompts > 1:  # streamed again from what the first prompt gave back: every byte came back
        # (the first one's freed buffers may hold the file's pages now)
        spy.watched = [w for w in spy.watched if w.streamer.model is diffusion][1:]
        assert_restored(diffusion, before, spy)


def test_a_plan_that_streams_from_disk_uploads_from_the_file_pages(
    tiny: Host, streaming_budget: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``model_residency="disk"``: the plan streams the model from disk, and that is what runs. The
    streamer makes no host copy (0 bytes of host buffer) and uploads each tensor from the pages of the
    model's file; the log says so when armed and after. The text encoder, kept on disk too, streams from
    its file's pages at the encode. The latent is the stock one."""
    controller = streaming_budget.residency().controller
    seed, prompt_id = 57, "offload-streams-from-disk"
    expected = latent(tiny.run(stock(tiny, "KSamplerAdvanced", seed, False, clip=CLIP16)))
    tiny.free()
    spy = StreamSpy(tiny, monkeypatch)
    loader = offload_loader(
        diffusion_model=UNET, text_encoder_1=CLIP16, model_residency="disk", text_encoder_residency="disk"
    )
    prompt = {"11": loader, **sampling_nodes("KSamplerAdvanced", ["11", 0], ["11", 1], seed)}
    assert torch.equal(latent(tiny.run(prompt, prompt_id=prompt_id)), expected)
    placement = next(sp for sp in controller.runs[prompt_id].plan.steps if sp.step.node_id == "5").placements[
        DM
    ]
    assert (placement.tier.gpu, placement.tier.host) == ("S", "D"), placement
    events = [e for e in controller.log(prompt_id) if e.action == "stream" and e.component == DM]
    assert [e.kind for e in events] == ["planned", "armed", "applied"]
    assert "from its file's pages, no copy" in events[1].detail, events[1].detail
    assert events[2].detail.endswith("per step, from file pages"), events[2].detail
    encoder = [e for e in controller.log(prompt_id) if e.action == "stream" and e.component != DM]
    assert [(e.kind, e.node_id) for e in encoder] == [("planned", "2"), ("armed", "2"), ("applied", "2")]
    assert encoder[2].detail.endswith("per encode, from file pages"), encoder[2].detail
    diffusion = controller.managed[DM].handle.module.diffusion_model
    (sampled,) = [w for w in spy.watched if w.streamer.model is diffusion]
    assert sampled.streamer.stats.host_bytes == 0 and sampled.streamer.stats.uploads_from == "file pages"
    assert_streamed(sampled, STEPS)
