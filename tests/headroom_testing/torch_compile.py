"""What the torch.compile tests share (tests/host/test_torch_compile.py, tests/gpu/test_torch_compile_gpu.py):
a tiny SD1.5 workflow with the host's TorchCompileModel in it, with or without Headroom's streaming nodes
or the Offload Loader, and why a host cannot run it (no TorchCompileModel, no C++ compiler for inductor's
CPU code)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from typing import Any

import torch

from headroom_testing.prompts import offload_loader

CKPT = "tiny_sd15_torch_compile.safetensors"
STEPS = 2


def recording_backend(traces: list[str], then: Callable[..., Any] | None = None) -> Callable[..., Any]:
    """A torch.compile backend that keeps every traced op's source stack in ``traces`` and hands the graph
    to ``then`` (a backend: inductor's to compile it), or else runs it as traced (no kernels of its own:
    the results are the eager ones bit for bit)."""

    def backend(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        traces.extend(str(node.meta.get("stack_trace") or "") for node in gm.graph.nodes)
        return gm.forward if then is None else then(gm, example_inputs)

    return backend


def cxx() -> str | None:
    """The C++ compiler inductor's CPU code needs (its default is g++, or $CXX)."""
    return next(
        (
            path
            for name in (os.environ.get("CXX"), "g++", "c++", "clang++")
            if name and (path := shutil.which(name))
        ),
        None,
    )


def why_not_compiled(host: Any, device: str = "cpu") -> str | None:
    """Why ``host`` cannot run the compiled workflow on ``device`` (None: it can)."""
    if "TorchCompileModel" not in host.nodes.NODE_CLASS_MAPPINGS:
        return f"ComfyUI {host.version} has no TorchCompileModel node"
    if device == "cpu" and cxx() is None:
        return "inductor compiles C++ on the CPU: no C++ compiler (g++, c++, clang++ or $CXX) found"
    return None


def compiled_prompt(
    stream: str | None,
    budget: str = "auto",
    backend: str = "inductor",
    residency: str | None = None,
    *,
    seed: int = 3,
    steps: int = STEPS,
    size: int = 64,
) -> dict[str, dict]:
    """Loader → TorchCompileModel (``backend``) → [Headroom] → sampler → VAEDecode → PreviewImage.
    ``stream``: None (stock), "after" (Stream Model on the compiled model), "before" (TorchCompileModel on
    the streamed model) or "sampler" (the Streaming KSampler on the compiled model). ``residency``: the
    checkpoint through the Offload Loader with that model residency instead of the host's loader.
    ``size``: the image's width and height."""
    loader: dict[str, Any] = {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": CKPT}}
    if residency is not None:
        loader = offload_loader(checkpoint=CKPT, model_residency=residency)
    nodes: dict[str, dict] = {
        "c": loader,
        "p": {"class_type": "CLIPTextEncode", "inputs": {"clip": ["c", 1], "text": "a compiled model"}},
        "n": {"class_type": "CLIPTextEncode", "inputs": {"clip": ["c", 1], "text": ""}},
        "l": {"class_type": "EmptyLatentImage", "inputs": {"width": size, "height": size, "batch_size": 1}},
        "t": {"class_type": "TorchCompileModel", "inputs": {"model": ["c", 0], "backend": backend}},
    }
    model: list[Any] = ["t", 0]
    if stream == "after":
        nodes["x"] = {
            "class_type": "HeadroomStreamModel",
            "inputs": {"model": ["t", 0], "vram_budget": budget},
        }
        model = ["x", 0]
    elif stream == "before":
        nodes["x"] = {
            "class_type": "HeadroomStreamModel",
            "inputs": {"model": ["c", 0], "vram_budget": budget},
        }
        nodes["t2"] = {
            "class_type": "TorchCompileModel",
            "inputs": {"model": ["x", 0], "backend": backend},
        }
        model = ["t2", 0]
    inputs = {
        "model": model, "seed": seed, "steps": steps, "cfg": 5.0, "sampler_name": "euler",
        "scheduler": "normal", "positive": ["p", 0], "negative": ["n", 0], "latent_image": ["l", 0],
        "denoise": 1.0,
    }  # fmt: skip
    if stream == "sampler":
        nodes["o"] = {"class_type": "HeadroomStreamingSampler", "inputs": {**inputs, "vram_budget": budget}}
    else:
        nodes["o"] = {"class_type": "KSampler", "inputs": inputs}
    nodes["d"] = {"class_type": "VAEDecode", "inputs": {"samples": ["o", 0], "vae": ["c", 2]}}
    nodes["s"] = {"class_type": "PreviewImage", "inputs": {"images": ["d", 0]}}
    return nodes


def record_inductor(monkeypatch: Any, traces: list[str]) -> None:
    """Keep every op inductor compiles from now on (``torch.compile(..., backend="inductor")``, as the
    host's TorchCompileModel calls it, makes a ``torch._TorchCompileInductorWrapper``): its source stack
    into ``traces``, the compilation unchanged. ``monkeypatch`` (pytest's) undoes it."""
    wrapper = torch._TorchCompileInductorWrapper
    call = wrapper.__call__

    def recording(self: Any, gm: torch.fx.GraphModule, example_inputs: Any, **kwargs: Any) -> Any:
        return recording_backend(traces, lambda g, i: call(self, g, i, **kwargs))(gm, example_inputs)

    monkeypatch.setattr(wrapper, "__call__", recording)
