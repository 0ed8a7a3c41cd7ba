"""Stream Model under the samplers people use (issue #15, GPU): the step time of one streamed model
sampled by KSamplerAdvanced and by SamplerCustomAdvanced (CFGGuider) against KSampler, at the same
budget, one that forces streaming. Target: both within 2% of KSampler (ratio <= 1.02).

    python bench/stream_samplers_gpu.py [--steps 8] [--repeats 3] [--share 0.5]
                                        [--out bench/results/stream_samplers_gpu.md]

The model comes from the host's own classes through the stock UNETLoader with random weights, bf16:
on a current host (``COMFYUI_ROOT``) a Wan 2.1 DiT scaled up (width 2048, 20 blocks, 1.3B
parameters); on the 2024 CI host (no DiT, no SamplerCustomAdvanced) SD1.5's full UNet, and the
SamplerCustomAdvanced row is skipped with the reason. The budget keeps about ``--share`` of the
blocks' bytes resident, plus a two-slot ring and the host's own activation estimate. The three
samplers run the same steps, cfg and seed, in rotating order so drift hits each alike; each run's
time is divided by its steps, and each run's streamed summary (uploads, streamed bytes) is checked.
Without CUDA it prints why and exits 0; ``--cpu-smoke`` runs the same code on the CPU with the test
suite's tiny models (2 steps, one repeat) to check the script, its numbers meaning nothing.
"""

from __future__ import annotations

import argparse
import copy
import datetime
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

SAMPLERS = ("KSampler", "KSamplerAdvanced", "SamplerCustomAdvanced")
WAN = {"model_type": "t2v", "dim": 2048, "ffn_dim": 8192, "num_heads": 16, "num_layers": 20}
NAME = "bench_stream_samplers.safetensors"


def build(host: Any, smoke: bool = False) -> tuple[Any, list, list, dict, str]:
    """The MODEL from the stock UNETLoader, two conditionings, an empty latent, and what it is."""
    from headroom_testing.tiny_models import TINY_SD15_UNET, TINY_WAN21, _init_state_dict, _on_meta, _save

    if host.legacy:
        from comfy.ldm.modules.diffusionmodules.openaimodel import UNetModel

        config = TINY_SD15_UNET | {
            "num_res_blocks": [2, 2, 2, 2], "channel_mult": [1, 2, 4, 4],
            "transformer_depth": [1, 1, 1, 1, 1, 1, 0, 0],
            "transformer_depth_output": [1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0],
        } if not smoke else TINY_SD15_UNET  # fmt: skip
        model = _on_meta(lambda: UNetModel(**copy.deepcopy(config)))
        gen = torch.Generator().manual_seed(1)
        cond = [[torch.randn(1, 77, 768, generator=gen), {}]]
        uncond = [[torch.randn(1, 77, 768, generator=gen), {}]]
        latent = {"samples": torch.zeros(1, 4, 16 if smoke else 96, 16 if smoke else 96)}
        what = "SD1.5's full UNet (860M parameters, bf16; the 2024 host has no DiT), latent 4x96x96"
    else:
        import comfy.ops
        from comfy.ldm.wan.model import WanModel

        from headroom_testing.tiny_models import tiny_wan_conditioning

        config = TINY_WAN21 | {"num_layers": 4} if smoke else WAN
        model = _on_meta(lambda: WanModel(**config, operations=comfy.ops.disable_weight_init))
        cond, uncond = tiny_wan_conditioning(tokens=64, seed=1), tiny_wan_conditioning(tokens=64, seed=2)
        latent = {"samples": torch.zeros(1, 16, 1, 8, 8) if smoke else torch.zeros(1, 16, 5, 40, 40)}
        what = "Wan 2.1 DiT (width 2048, 20 blocks, bf16), latent 16x5x40x40 (2000 tokens)"
    params = sum(p.numel() for p in model.parameters())
    state_dict = _init_state_dict(model, 3, torch.bfloat16)
    _save(state_dict, host.models_dir, "diffusion_models", NAME, "bench")
    if smoke:
        what = f"CPU smoke run: {type(model).__name__} at the test suite's tiny size"
    del state_dict
    host.register_models_dir(host.models_dir)
    inputs = {"unet_name": NAME}
    if "weight_dtype" in host.node_class("UNETLoader").INPUT_TYPES()["required"]:
        inputs["weight_dtype"] = "default"
    with torch.inference_mode():
        (patcher,) = host.node_class("UNETLoader")().load_unet(**inputs)
    return patcher, cond, uncond, latent, f"{what}, {params / 1e9:.2f}B parameters"


def budget_gb(patcher: Any, latent: torch.Tensor, share: float, on_gpu: bool = True) -> str:
    from comfyui_headroom.memory.streaming import discover_blocks
    from comfyui_headroom.memory.streaming.discovery import module_bytes

    diffusion = patcher.model.diffusion_model
    blocks = discover_blocks(diffusion).block_bytes()
    rest = module_bytes(diffusion) - sum(blocks)
    shape = [2 * latent.shape[0], *latent.shape[1:]]  # cond and uncond in one call
    activation = int(patcher.model.memory_required(shape)) if on_gpu else 0  # none reserved on a CPU
    return f"{(activation + rest + share * sum(blocks) + 2 * max(blocks)) / 2**30:.6f}"


def sampler_nodes(kind: str, seed: int, steps: int) -> dict[str, dict]:
    common = {"positive": ["p", 0], "negative": ["n", 0], "latent_image": ["l", 0]}
    settings = {"cfg": 4.0, "sampler_name": "euler", "scheduler": "simple"}
    if kind == "KSampler":
        inputs = {"model": ["x", 0], "seed": seed, "steps": steps, **settings, **common, "denoise": 1.0}
        return {"o": {"class_type": kind, "inputs": inputs}}
    if kind == "KSamplerAdvanced":
        inputs = {
            "model": ["x", 0], "add_noise": "enable", "noise_seed": seed, "steps": steps, **settings,
            **common, "start_at_step": 0, "end_at_step": 10000, "return_with_leftover_noise": "disable",
        }  # fmt: skip
        return {"o": {"class_type": kind, "inputs": inputs}}
    guider = {"model": ["x", 0], "positive": ["p", 0], "negative": ["n", 0], "cfg": 4.0}
    schedule = {"model": ["x", 0], "scheduler": "simple", "steps": steps, "denoise": 1.0}
    return {
        "g": {"class_type": "CFGGuider", "inputs": guider},
        "z": {"class_type": "RandomNoise", "inputs": {"noise_seed": seed}},
        "k": {"class_type": "KSamplerSelect", "inputs": {"sampler_name": "euler"}},
        "s": {"class_type": "BasicScheduler", "inputs": schedule},
        "o": {"class_type": kind, "inputs": {"noise": ["z", 0], "guider": ["g", 0], "sampler": ["k", 0],
                                             "sigmas": ["s", 0], "latent_image": ["l", 0]}},
    }  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "stream_samplers_gpu.md")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--share", type=float, default=0.5, help="share of the blocks' bytes resident")
    parser.add_argument("--cpu-smoke", action="store_true", help="check the script on the CPU, tiny models")
    args = parser.parse_args()
    if args.cpu_smoke:
        args.steps, args.repeats, args.share = 2, 1, 0.2  # 4 blocks: one resident, two ring slots
    elif not torch.cuda.is_available():
        print("stream_samplers_gpu: no CUDA device; this benchmark measures GPU step times. Skipped.")
        return 0
    from headroom_testing import fixture_nodes as fx
    from headroom_testing.harness import Host, find_host_root

    with tempfile.TemporaryDirectory(prefix="headroom-bench-") as work:
        host = Host(find_host_root(), Path(work), cpu=args.cpu_smoke)
        fx.install(host)
        patcher, cond, uncond, latent, what = build(host, args.cpu_smoke)
        budget = budget_gb(patcher, latent["samples"], args.share, on_gpu=not args.cpu_smoke)
        keys = {"m": fx.put(patcher), "p": fx.put(cond), "n": fx.put(uncond), "l": fx.put(latent)}
        kinds = [k for k in SAMPLERS if k in host.nodes.NODE_CLASS_MAPPINGS and k != "KSampler"]
        kinds = ["KSampler", *kinds]
        skipped = [k for k in SAMPLERS if k not in kinds]
        sampling = host.pack_module("nodes.host.sampling")
        per_step: dict[str, list[float]] = {k: [] for k in kinds}
        sync = torch.cuda.synchronize if torch.cuda.is_available() and not args.cpu_smoke else lambda: None
        summaries: dict[str, dict] = {}
        for r in range(-1, args.repeats):  # -1: warm-up (the host loads, the pinned buffer is made)
            order = kinds[r % len(kinds) :] + kinds[: r % len(kinds)]
            for kind in order:
                prompt = {
                    "m": fx.source("MODEL", keys["m"]), "p": fx.source("CONDITIONING", keys["p"]),
                    "n": fx.source("CONDITIONING", keys["n"]), "l": fx.source("LATENT", keys["l"]),
                    "x": {"class_type": "HeadroomStreamModel",
                          "inputs": {"model": ["m", 0], "vram_budget": budget}},
                    **sampler_nodes(kind, 100 + r, args.steps), "keep": fx.sink(["o", 0]),
                }  # fmt: skip
                sync()
                start = time.perf_counter()
                result = host.run(prompt)
                sync()
                elapsed = time.perf_counter() - start
                run = sampling.streamed_model_of(result.outputs["x"][0][0]).last_run
                if not run.summary.get("streamed_bytes"):
                    raise SystemExit(f"{kind}: nothing streamed at {budget} GB ({run.note})")
                summaries[kind] = run.summary
                if r >= 0:
                    per_step[kind].append(elapsed / args.steps)
        fx.VALUES.clear()
        version = host.version
    base = statistics.median(per_step["KSampler"])
    rows = []
    for kind in kinds:
        s = summaries[kind]
        ratio = statistics.median(per_step[kind]) / base
        rows.append(
            f"| {kind} | {statistics.median(per_step[kind]) * 1e3:.1f} | {ratio:.3f} | {s.get('uploads')} | "
            f"{s.get('streamed_bytes', 0) / 2**30:.2f} |"
        )
    device = "CPU" if args.cpu_smoke else torch.cuda.get_device_name()
    worst = max(statistics.median(per_step[k]) / base for k in kinds)
    lines = [
        f"## Host {version}",
        "",
        f"- date: {datetime.date.today().isoformat()}",
        f"- machine: {device}, {platform.machine()}, Python "
        f"{platform.python_version()}, torch {torch.__version__}",
        f"- command: `python {' '.join(sys.argv)}`",
        f"- model: {what}; euler, {args.steps} steps, cfg 4; vram_budget {budget} GB "
        f"(about {args.share:.0%} of the blocks resident); median of {args.repeats} runs per sampler, "
        "rotating order, whole prompt time / steps",
        "",
        "| sampler | ms per step | vs KSampler | uploads (last run) | streamed GiB |",
        "|---|---:|---:|---:|---:|",
        *rows,
        *(f"| {k} | skipped: the host has no {k} | | | |" for k in skipped),
        "",
        f"Target: each <= 1.02 of KSampler. {'Met' if worst <= 1.02 else 'NOT met'} (worst {worst:.3f}).",
    ]
    print("\n".join(lines))
    previous = args.out.read_text() if args.out.exists() else "# Stream Model under three samplers (GPU)\n"
    args.out.write_text(previous.rstrip("\n") + "\n\n" + "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
