"""Stream Model (VRAM offload) through the host's real executor: whichever sampler samples the MODEL it
gives (KSampler, KSamplerAdvanced, SamplerCustom; SamplerCustomAdvanced with CFGGuider or BasicGuider
where the host has them; the official templates' samplers of Qwen-Image, HunyuanVideo and Wan 2.2's
two experts, also from Offload Loaders), the latent is the stock workflow's bit for bit (fp32, CPU),
the streamed blocks compute from the streamer's ring (not from the model's own storage), each is
uploaded once per step (across the host's cond/uncond split where it has the calc_cond_batch
wrapper), and after sampling, however it ended, the model is detached with every parameter back in
storage of its own.

Models, conditionings and latents are built in Python (tiny models of the host's own classes) and
handed to the executor by test-only source nodes (``headroom_testing.fixture_nodes``); everything from
the Stream Model node on is the executor's."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

from headroom_testing import fixture_nodes as fx
from headroom_testing.harness import Host, PromptFailed
from headroom_testing.prompts import offload_loader
from headroom_testing.stream_spy import (
    StreamSpy,
    assert_restored,
    assert_streamed,
    budget_gb,
    sampling_sources,
    snapshot,
    tiny_sd_sources,
)
from headroom_testing.tiny_models import (
    build_tiny_dit,
    build_tiny_wan_blocks,
    load_tiny_dit,
    tiny_wan_conditioning,
)

pytestmark = pytest.mark.host

STEPS = 2
CKPT = "tiny_sd15_stream_model.safetensors"


@pytest.fixture(scope="module")
def sd(host: Host) -> Iterator[dict[str, Any]]:
    """The tiny SD1.5 model, its two conditionings and an empty latent, as source-node keys."""
    yield tiny_sd_sources(host, CKPT, 5, "a streamed model")
    fx.VALUES.clear()  # release the models before the interpreter's shutdown (their __del__ needs the host)


def _sampler(kind: str, model: list, seed: int = 3) -> dict[str, dict]:
    """The sampler node "o" (and what it needs) of ``kind`` on ``model``, conditioned on "p"/"n"."""
    common = {"positive": ["p", 0], "negative": ["n", 0], "latent_image": ["l", 0]}
    if kind == "KSampler":
        inputs = {"seed": seed, "steps": STEPS, "cfg": 5.0, "sampler_name": "euler", "scheduler": "normal"}
        return {"o": {"class_type": kind, "inputs": {"model": model, **inputs, **common, "denoise": 1.0}}}
    if kind == "KSamplerAdvanced":  # the last STEPS of STEPS + 1
        inputs = {
            "add_noise": "enable", "noise_seed": seed, "steps": STEPS + 1, "cfg": 5.0,
            "sampler_name": "euler", "scheduler": "normal", "start_at_step": 1, "end_at_step": 10000,
            "return_with_leftover_noise": "disable",
        }  # fmt: skip
        return {"o": {"class_type": kind, "inputs": {"model": model, **inputs, **common}}}
    assert kind == "SamplerCustom"
    schedule = {"model": model, "scheduler": "normal", "steps": STEPS, "denoise": 1.0}
    inputs = {"add_noise": True, "noise_seed": seed, "cfg": 5.0, "sampler": ["k", 0], "sigmas": ["s", 0]}
    return {
        "k": {"class_type": "KSamplerSelect", "inputs": {"sampler_name": "euler"}},
        "s": {"class_type": "BasicScheduler", "inputs": schedule},
        "o": {"class_type": kind, "inputs": {"model": model, **inputs, **common}},
    }


def _prompt(keys: dict[str, Any], sampler: dict[str, dict], stream: dict[str, Any] | None) -> dict:
    nodes = {
        "m": fx.source("MODEL", keys["m"]),
        "p": fx.source("CONDITIONING", keys["p"]),
        "n": fx.source("CONDITIONING", keys["n"]),
        "l": fx.source("LATENT", keys["l"]),
        **sampler,
        "keep": fx.sink(["o", 0]),
    }
    if stream is not None:
        nodes["x"] = {"class_type": "HeadroomStreamModel", "inputs": {"model": ["m", 0], **stream}}
    return nodes


def _latent(result: Any) -> torch.Tensor:
    return result.outputs["o"][0][0]["samples"]


def _streamed_matches_stock(
    host: Host,
    keys: dict[str, Any],
    sampler: Callable[[list], dict[str, dict]],
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[Any, StreamSpy, dict]:
    """Run ``sampler`` on the plain model, then on the Stream Model node's output under a spy: the latents
    are equal bit for bit. Returns the diffusion model, the spy and its snapshot from before streaming."""
    diffusion = keys["model"].model.diffusion_model
    stock = _latent(host.run(_prompt(keys, sampler(["m", 0]), None)))
    before = snapshot(diffusion)
    spy = StreamSpy(host, monkeypatch)
    streamed = host.run(_prompt(keys, sampler(["x", 0]), {"vram_budget": keys["budget"]}))
    assert torch.isfinite(stock).all() and stock.std() > 0
    assert torch.equal(_latent(streamed), stock)
    return diffusion, spy, before


@pytest.mark.parametrize("kind", ["KSampler", "KSamplerAdvanced", "SamplerCustom"])
def test_any_stock_sampler_streams_the_model_to_the_stock_latent(
    host: Host, sd: dict[str, Any], monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    diffusion, spy, before = _streamed_matches_stock(host, sd, lambda m: _sampler(kind, m), monkeypatch)
    (watched,) = spy.watched
    assert watched.streamer.model is diffusion
    assert [event for event, _ in spy.log] == ["attach", "detach"]
    assert_streamed(watched, STEPS)
    assert_restored(diffusion, before, spy)


def test_streaming_a_streamed_model_again_replaces_its_settings(
    host: Host, sd: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    stock = _latent(host.run(_prompt(sd, _sampler("KSampler", ["m", 0], seed=4), None)))
    spy = StreamSpy(host, monkeypatch)
    prompt = _prompt(sd, _sampler("KSampler", ["y", 0], seed=4), {"vram_budget": sd["budget"], "prefetch": 1})
    prompt["y"] = {"class_type": "HeadroomStreamModel", "inputs": {"model": ["x", 0], "resident_blocks": 1}}
    assert torch.equal(_latent(host.run(prompt)), stock)
    (streamer,) = spy.streamers()  # one streamer, with the second node's settings: auto budget, 1 resident
    assert len(streamer.choice.resident) == 1 and streamer.stats.uploads > 0


@pytest.mark.parametrize("error", ["interrupt", "out of memory", "error"])
def test_sampling_that_fails_midway_detaches_and_gives_every_byte_back(
    host: Host, sd: dict[str, Any], monkeypatch: pytest.MonkeyPatch, error: str
) -> None:
    mm = host.model_management
    exc = {
        "interrupt": mm.InterruptProcessingException,
        "out of memory": mm.OOM_EXCEPTION,
        "error": RuntimeError,
    }[error]
    calls: list[int] = []

    def fail_on_second_call(apply_model: Any, args: dict) -> Any:  # Cancel, an OOM, a node's bug
        calls.append(1)
        if len(calls) == 2:
            raise exc("raised by the test")
        return apply_model(args["input"], args["timestep"], **args["c"])

    failing = sd["model"].clone()
    failing.set_model_unet_function_wrapper(fail_on_second_call)
    keys = {**sd, "m": fx.put(failing)}
    diffusion = failing.model.diffusion_model
    before = snapshot(diffusion)
    spy = StreamSpy(host, monkeypatch)
    with pytest.raises(PromptFailed):
        host.run(_prompt(keys, _sampler("KSampler", ["x", 0], seed=7), {"vram_budget": sd["budget"]}))
    assert len(calls) == 2
    assert [event for event, _ in spy.log] == ["attach", "detach"]
    assert_restored(diffusion, before, spy)


@torch.inference_mode()
def test_sampled_outside_the_executor(
    host: Host, sd: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Current hosts stream any sampling (the OUTER_SAMPLE wrapper ends it). The 2024 host has no end of
    sampling but the node's: outside a node nothing would detach, so the model samples unstreamed."""
    model, budget = sd["model"], sd["budget"]
    positive, negative, latent = (fx.VALUES[sd[key]] for key in "pnl")
    ksampler = host.node_class("KSampler")()
    (stock,) = ksampler.sample(model, 5, STEPS, 5.0, "euler", "normal", positive, negative, latent)
    spy = StreamSpy(host, monkeypatch)
    (streamed_model,) = host.node_class("HeadroomStreamModel")().stream(model, vram_budget=budget)["result"]
    (out,) = ksampler.sample(streamed_model, 5, STEPS, 5.0, "euler", "normal", positive, negative, latent)
    assert torch.equal(out["samples"], stock["samples"])
    stream = host.pack_module("nodes.host.sampling").streamed_model_of(streamed_model)
    if host.legacy:
        assert spy.log == [] and "outside a node" in stream.last_run.note
    else:
        assert [event for event, _ in spy.log] == ["attach", "detach"]
        assert stream.last_run.summary["streamed_bytes"] > 0


@pytest.mark.parametrize("budget", ["0.001", "0.004"])
def test_a_budget_too_small_for_the_model_fails_at_the_node(
    host: Host, sd: dict[str, Any], budget: str
) -> None:
    with pytest.raises(ValueError, match=r"^Stream Model \(VRAM offload\): input vram_budget") as info:
        host.node_class("HeadroomStreamModel")().stream(sd["model"], vram_budget=budget)
    assert "cannot stream this model" in str(info.value)


# --- current hosts: the DiT families and their usual samplers ---------------------------------------
@pytest.fixture(scope="module")
def current(host: Host) -> Iterator[Host]:
    if host.legacy:
        pytest.skip(
            "the 2024 host has neither Flux nor Wan, nor SamplerCustomAdvanced, nor the calc_cond_batch "
            "wrapper (set COMFYUI_ROOT to a current ComfyUI to run these)"
        )
    fx.install(host)
    yield host
    fx.VALUES.clear()  # release the models before the interpreter's shutdown (their __del__ needs the host)


def _flux_conditioning(seed: int) -> list:
    gen = torch.Generator().manual_seed(seed)
    options = {"pooled_output": torch.randn(1, 32, generator=gen), "guidance": 3.5}
    return [[torch.randn(1, 8, 64, generator=gen), options]]


@pytest.fixture(scope="module")
def flux(current: Host) -> dict[str, Any]:
    with torch.inference_mode():
        model = load_tiny_dit(build_tiny_dit(current.models_dir, "flux", seed=3), "flux")
    yield sampling_sources(
        model, _flux_conditioning(1), _flux_conditioning(2), {"samples": torch.zeros(1, 16, 8, 8)}
    )


def _custom_advanced(guider: str, model: list) -> dict[str, dict]:
    guide = (
        {
            "class_type": "CFGGuider",
            "inputs": {"model": model, "positive": ["p", 0], "negative": ["n", 0], "cfg": 4.0},
        }
        if guider == "CFGGuider"
        else {"class_type": "BasicGuider", "inputs": {"model": model, "conditioning": ["p", 0]}}
    )
    schedule = {"model": model, "scheduler": "simple", "steps": STEPS, "denoise": 1.0}
    return {
        "g": guide,
        "z": {"class_type": "RandomNoise", "inputs": {"noise_seed": 5}},
        "k": {"class_type": "KSamplerSelect", "inputs": {"sampler_name": "euler"}},
        "s": {"class_type": "BasicScheduler", "inputs": schedule},
        "o": {
            "class_type": "SamplerCustomAdvanced",
            "inputs": {"noise": ["z", 0], "guider": ["g", 0], "sampler": ["k", 0], "sigmas": ["s", 0],
                       "latent_image": ["l", 0]},
        },
    }  # fmt: skip


def _split_cfg(monkeypatch: pytest.MonkeyPatch) -> None:
    """The host's memory estimate says a cond+uncond batch never fits: two model calls per step."""
    base_model = sys.modules["comfy.model_base"].BaseModel
    monkeypatch.setattr(base_model, "memory_required", lambda self, *a, **k: 1 << 45)


@pytest.mark.parametrize(
    ("guider", "split"), [("CFGGuider", False), ("CFGGuider", True), ("BasicGuider", False)]
)
def test_flux_with_sampler_custom_advanced(
    current: Host, flux: dict[str, Any], monkeypatch: pytest.MonkeyPatch, guider: str, split: bool
) -> None:
    if split:
        _split_cfg(monkeypatch)
    sampler = functools.partial(_custom_advanced, guider)
    diffusion, spy, before = _streamed_matches_stock(current, flux, sampler, monkeypatch)
    (watched,) = spy.watched
    assert_streamed(watched, STEPS)  # one upload per block per step, also when cond and uncond split
    assert watched.streamer.stats.calls_together == (2 * STEPS if split else 0)
    assert_restored(diffusion, before, spy)


@pytest.fixture(scope="module")
def wan22(current: Host) -> dict[str, Any]:
    """Wan 2.2's two experts (high noise, low noise): two tiny Wan models from the stock UNETLoader."""
    experts = {}
    with torch.inference_mode():
        for name, seed in (("high", 3), ("low", 4)):
            file = f"tiny_wan22_{name}.safetensors"
            build_tiny_wan_blocks(current.models_dir, name=file, seed=seed)
            current.register_models_dir(current.models_dir)
            experts[name] = current.node_class("UNETLoader")().load_unet(file, "default")[0]
    return {
        **experts,
        "mh": fx.put(experts["high"]),
        "ml": fx.put(experts["low"]),
        "p": fx.put(tiny_wan_conditioning(seed=1)),
        "n": fx.put(tiny_wan_conditioning(seed=2)),
        "l": fx.put({"samples": torch.zeros(1, 16, 1, 8, 8)}),
        "budget": budget_gb(experts["high"].model.diffusion_model),
    }


def _wan22_prompt(keys: dict[str, Any], streamed: bool, loaders: dict[str, dict] | None = None) -> dict:
    """The Wan 2.2 templates' two KSamplerAdvanced: the high-noise expert takes steps 0-2 of 4 and
    hands its noisy latent to the low-noise expert for steps 2-4. ``loaders``: the nodes "mh" and "ml"
    that load the experts (by default, sources of the fixture's models)."""
    common = {
        "noise_seed": 5, "steps": 2 * STEPS, "cfg": 4.0, "sampler_name": "euler", "scheduler": "simple",
        "positive": ["p", 0], "negative": ["n", 0],
    }  # fmt: skip
    high = {
        "add_noise": "enable",
        "start_at_step": 0,
        "end_at_step": STEPS,
        "return_with_leftover_noise": "enable",
    }
    low = {
        "add_noise": "disable",
        "start_at_step": STEPS,
        "end_at_step": 10000,
        "return_with_leftover_noise": "disable",
    }
    nodes = {
        **(loaders or {"mh": fx.source("MODEL", keys["mh"]), "ml": fx.source("MODEL", keys["ml"])}),
        "p": fx.source("CONDITIONING", keys["p"]),
        "n": fx.source("CONDITIONING", keys["n"]),
        "l": fx.source("LATENT", keys["l"]),
        "h": {"class_type": "KSamplerAdvanced", "inputs": {"model": ["xh" if streamed else "mh", 0],
                                                           **common, **high, "latent_image": ["l", 0]}},
        "o": {"class_type": "KSamplerAdvanced", "inputs": {"model": ["xl" if streamed else "ml", 0],
                                                           **common, **low, "latent_image": ["h", 0]}},
        "keep": fx.sink(["o", 0]),
    }  # fmt: skip
    if streamed:
        for node, source in (("xh", "mh"), ("xl", "ml")):
            nodes[node] = {
                "class_type": "HeadroomStreamModel",
                "inputs": {"model": [source, 0], "vram_budget": keys["budget"]},
            }
    return nodes


@pytest.mark.parametrize("split", [False, True], ids=["batched", "split"])
def test_wan22_two_experts_with_ksampler_advanced_stream_in_turn(
    current: Host, wan22: dict[str, Any], monkeypatch: pytest.MonkeyPatch, split: bool
) -> None:
    if split:
        _split_cfg(monkeypatch)
    high, low = (wan22[name].model.diffusion_model for name in ("high", "low"))
    stock = _latent(current.run(_wan22_prompt(wan22, streamed=False)))
    before = {id(high): snapshot(high), id(low): snapshot(low)}
    spy = StreamSpy(current, monkeypatch)
    streamed = current.run(_wan22_prompt(wan22, streamed=True))
    assert torch.isfinite(stock).all() and stock.std() > 0
    assert torch.equal(_latent(streamed), stock)
    first, second = spy.streamers()
    # each expert streams for its own steps and is detached before the other attaches
    assert spy.log == [("attach", first), ("detach", first), ("attach", second), ("detach", second)]
    assert first.model is high and second.model is low
    for watched in spy.watched:
        assert_streamed(watched, STEPS)
        assert watched.streamer.stats.calls_together == (2 * STEPS if split else 0)
    for diffusion in (high, low):
        assert_restored(diffusion, before[id(diffusion)], spy)


def _text_conditioning(width: int, seed: int, pooled: int | None = None) -> list:
    gen = torch.Generator().manual_seed(seed)
    options = {} if pooled is None else {"pooled_output": torch.randn(1, pooled, generator=gen)}
    return [[torch.randn(1, 8, width, generator=gen), options]]


def _dit_keys(host: Host, family: str, latent: tuple[int, ...], pooled: int | None) -> dict[str, Any]:
    with torch.inference_mode():
        model = load_tiny_dit(build_tiny_dit(host.models_dir, family, seed=3), family)
    return {
        "model": model,
        "m": fx.put(model),
        "p": fx.put(_text_conditioning(64, 1, pooled)),
        "n": fx.put(_text_conditioning(64, 2, pooled)),
        "l": fx.put({"samples": torch.zeros(latent)}),
        "budget": budget_gb(model.model.diffusion_model),
    }


@pytest.fixture(scope="module")
def qwen_image(current: Host) -> dict[str, Any]:
    return _dit_keys(current, "qwen_image", (1, 16, 8, 8), pooled=None)


def _qwen_image_template(model: list) -> dict[str, dict]:
    """The Qwen-Image template's sampling: ModelSamplingAuraFlow (shift 3.1) into a KSampler with CFG."""
    inputs = {"seed": 6, "steps": STEPS, "cfg": 4.0, "sampler_name": "euler", "scheduler": "simple"}
    common = {"positive": ["p", 0], "negative": ["n", 0], "latent_image": ["l", 0], "denoise": 1.0}
    return {
        "a": {"class_type": "ModelSamplingAuraFlow", "inputs": {"model": model, "shift": 3.1}},
        "o": {"class_type": "KSampler", "inputs": {"model": ["a", 0], **inputs, **common}},
    }


@pytest.mark.parametrize("split", [False, True], ids=["batched", "split"])
def test_qwen_image_with_its_template_sampler(
    current: Host, qwen_image: dict[str, Any], monkeypatch: pytest.MonkeyPatch, split: bool
) -> None:
    if split:
        _split_cfg(monkeypatch)
    diffusion, spy, before = _streamed_matches_stock(current, qwen_image, _qwen_image_template, monkeypatch)
    (watched,) = spy.watched
    assert watched.streamer.layout.family == "qwen_image"
    assert_streamed(watched, STEPS)  # one upload per block per step, also when cond and uncond split
    assert watched.streamer.stats.calls_together == (2 * STEPS if split else 0)
    assert_restored(diffusion, before, spy)


@pytest.fixture(scope="module")
def hunyuan_video(current: Host) -> dict[str, Any]:
    return _dit_keys(current, "hunyuan_video", (1, 16, 2, 8, 8), pooled=32)


def _hunyuan_video_template(model: list) -> dict[str, dict]:
    """The HunyuanVideo template's sampling: ModelSamplingSD3 (shift 7), FluxGuidance (6) into a
    BasicGuider, and SamplerCustomAdvanced."""
    nodes = _custom_advanced("BasicGuider", ["a", 0])
    nodes["a"] = {"class_type": "ModelSamplingSD3", "inputs": {"model": model, "shift": 7.0}}
    nodes["f"] = {"class_type": "FluxGuidance", "inputs": {"conditioning": ["p", 0], "guidance": 6.0}}
    nodes["g"]["inputs"]["conditioning"] = ["f", 0]
    return nodes


def test_hunyuan_video_with_its_template_sampler(
    current: Host, hunyuan_video: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    diffusion, spy, before = _streamed_matches_stock(
        current, hunyuan_video, _hunyuan_video_template, monkeypatch
    )
    (watched,) = spy.watched
    assert type(diffusion).__name__ == "HunyuanVideo" and watched.streamer.layout.family == "hunyuan_video"
    assert_streamed(watched, STEPS)
    assert watched.streamer.stats.calls_together == 0  # a BasicGuider: the cond alone
    assert_restored(diffusion, before, spy)


def test_wan22_experts_from_offload_loaders_keep_their_host_copies_where_placed(
    current: Host, wan22: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each expert from its own Offload Loader, the high-noise one served from its file ("disk"), the
    low-noise one in RAM: while one expert streams, the idle one's host copy stays in its place, and
    streaming leaves each where it was (the file's pages are not copied into RAM)."""
    files = {}
    for name, seed in (("high", 3), ("low", 4)):  # fp32: the weights the host computes with are the file's
        files[name] = f"tiny_wan22_{name}_fp32.safetensors"
        build_tiny_wan_blocks(current.models_dir, name=files[name], seed=seed, dtype=torch.float32)
    current.register_models_dir(current.models_dir)
    stock_loaders = {
        f"m{n[0]}": {"class_type": "UNETLoader", "inputs": {"unet_name": f, "weight_dtype": "default"}}
        for n, f in files.items()
    }
    stock = _latent(current.run(_wan22_prompt(wan22, streamed=False, loaders=stock_loaders)))
    current.free()
    residency = {"high": "disk", "low": "ram"}
    loaders = {
        f"m{n[0]}": offload_loader(diffusion_model=f, model_residency=residency[n]) for n, f in files.items()
    }
    pack = current.pack_module("memory.residency")
    controller = current.pack_module("nodes.host.state").residency().controller

    def footprint(node: str) -> Any:  # None before its loader ran
        managed = controller.managed.get(f"{node}:diffusion_model:diffusion_model")
        return None if managed is None else pack.footprint(managed.handle.module, managed.handle.files or ())

    spy = StreamSpy(current, monkeypatch)
    streamer_class = current.pack_module("memory.streaming.streamer").BlockStreamer
    spied_attach = streamer_class.attach
    seen: list[tuple[Any, Any]] = []  # both experts' footprints each time one of them attaches

    def attach_and_look(streamer: Any) -> Any:
        seen.append((footprint("mh"), footprint("ml")))
        return spied_attach(streamer)

    monkeypatch.setattr(streamer_class, "attach", attach_and_look)
    streamed = _latent(current.run(_wan22_prompt(wan22, streamed=True, loaders=loaders)))
    assert torch.equal(streamed, stock)
    first, second = spy.streamers()
    assert [event for event, _ in spy.log] == ["attach", "detach", "attach", "detach"]
    for watched in spy.watched:
        assert_streamed(watched, STEPS)
    # while the low-noise expert streams, the idle high-noise one is still served from its file; and
    # each is where its loader put it before and after streaming
    (high_first, _), (high_idle, low_streaming) = seen
    for when, fp in {"while it streams": low_streaming, "after": footprint("ml")}.items():
        assert fp.ram > 0.9 * (fp.mapped + fp.ram + fp.pinned), f"low-noise expert {when}: {fp}"
    assert high_first.mapped > 0.9 * (high_first.mapped + high_first.ram), high_first
    assert first.stats.streamed_bytes > 0
    for when, fp in {"idle": high_idle, "after": footprint("mh")}.items():  # its streamed bytes: the file's
        assert fp == high_first, f"high-noise expert {when}: {fp}, placed {high_first}"
