"""Residency benchmark (issue #6): a two-expert workflow with Headroom's Offload Loader and controller
against the same workflow with the stock loaders, at the same VRAM cap, side by side in one process.

    python bench/residency_gpu.py [--size sd15|tiny] [--cap-gb 2.5] [--steps 10] [--res 512] [--repeats 2]
                                  [--out bench/results/residency_gpu.md] [--json results.json]

The workflow is Wan 2.2's shape with SD1.5-architecture experts (a Wan 2.2 14B expert is 14 GB; its
text encoder alone is 11 GB, which no test can build): two diffusion models that each fit the cap but
not together, a high-noise KSamplerAdvanced for the first half of the steps and a low-noise one for the
rest, one text encoder and a VAE. ``--size sd15`` builds full SD1.5 UNets (860M parameters, 1.7 GB fp16
each, random initialised weights); ``tiny`` builds the test suite's 26M-parameter ones.

The stock run caps the host with its own ``--reserve-vram`` (EXTRA_RESERVED_VRAM = total - cap); the
Headroom run gives the controller the same cap as its budget (and the host the same reserve). Each
repetition changes the seed, so loaders stay cached in RAM and the GPU starts empty (``unload_all``).
Measured per run: wall time, peak ``max_memory_allocated``, per-node device peak against the plan's
predicted peak, the weights the host holds at each node's start against the plan's, and whether the
images are identical. Without CUDA it runs on the CPU (times only, no device peaks): that exercises every
path, but its numbers say nothing about a GPU. There the files are fp32, the dtype a CPU host keeps (a
GPU host keeps fp16, the files' dtype on CUDA), so the weights the host holds compare with the plan's,
which counts the files' bytes, on either.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import importlib
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from headroom_testing.harness import Host, find_host_root, scratch_dir  # noqa: E402
from headroom_testing.prompts import offload_loader  # noqa: E402
from headroom_testing.tiny_models import (  # noqa: E402
    TINY_SD15_UNET,
    _init_state_dict,
    _on_meta,
    _save,
    build_clip_l,
    build_tiny_vae,
)

# SD1.5's real UNet: four levels, two res blocks each (what supported_models.SD15 detects at 860M).
SD15_UNET = TINY_SD15_UNET | {
    "num_res_blocks": [2, 2, 2, 2],
    "channel_mult": [1, 2, 4, 4],
    "transformer_depth": [1, 1, 1, 1, 1, 1, 0, 0],
    "transformer_depth_output": [1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0],
}
EXPERTS = ("expert_high_noise.safetensors", "expert_low_noise.safetensors")
CLIP, VAE = "bench_clip_l.safetensors", "bench_vae.safetensors"


def build_models(host: Host, size: str, dtype: torch.dtype) -> None:
    from comfy.ldm.modules.diffusionmodules.openaimodel import UNetModel

    config = SD15_UNET if size == "sd15" else TINY_SD15_UNET
    for seed, name in enumerate(EXPERTS):
        unet = _on_meta(lambda: UNetModel(**copy.deepcopy(config)))
        _save(
            _init_state_dict(unet, seed + 21, dtype),
            host.models_dir,
            "diffusion_models",
            name,
            "bench",
        )
    build_clip_l(host.models_dir, name=CLIP, seed=23, dtype=dtype)
    build_tiny_vae(host.models_dir, name=VAE, seed=24, dtype=dtype)
    host.register_models_dir(host.models_dir)


def _samplers(model_high: list, model_low: list, steps: int, seed: int, res: int) -> dict[str, Any]:
    common = {"cfg": 4.0, "sampler_name": "euler", "scheduler": "normal", "steps": steps,
              "positive": ["2", 0], "negative": ["3", 0], "noise_seed": seed}  # fmt: skip
    half = steps // 2
    return {
        "2": {"class_type": "CLIPTextEncode", "inputs": {"text": "two experts", "clip": None}},
        "3": {"class_type": "CLIPTextEncode", "inputs": {"text": "", "clip": None}},
        "4": {"class_type": "EmptyLatentImage", "inputs": {"width": res, "height": res, "batch_size": 1}},
        "5": {"class_type": "KSamplerAdvanced", "inputs": common | {
            "model": model_high, "latent_image": ["4", 0], "add_noise": "enable", "start_at_step": 0,
            "end_at_step": half, "return_with_leftover_noise": "enable"}},
        "6": {"class_type": "KSamplerAdvanced", "inputs": common | {
            "model": model_low, "latent_image": ["5", 0], "add_noise": "disable", "start_at_step": half,
            "end_at_step": steps, "return_with_leftover_noise": "disable"}},
        "7": {"class_type": "VAEDecode", "inputs": {"samples": ["6", 0], "vae": None}},
        "8": {"class_type": "PreviewImage", "inputs": {"images": ["7", 0]}},
    }  # fmt: skip


def stock_prompt(host: Host, steps: int, seed: int, res: int) -> dict[str, Any]:
    unet_inputs = host.node_class("UNETLoader").INPUT_TYPES()["required"]
    clip_inputs = host.node_class("CLIPLoader").INPUT_TYPES()["required"]
    unet_extra = {"weight_dtype": "default"} if "weight_dtype" in unet_inputs else {}
    clip_extra = {"type": "stable_diffusion"} if "type" in clip_inputs else {}
    prompt = _samplers(["11", 0], ["12", 0], steps, seed, res)
    prompt |= {
        "11": {"class_type": "UNETLoader", "inputs": {"unet_name": EXPERTS[0]} | unet_extra},
        "12": {"class_type": "UNETLoader", "inputs": {"unet_name": EXPERTS[1]} | unet_extra},
        "13": {"class_type": "CLIPLoader", "inputs": {"clip_name": CLIP} | clip_extra},
        "14": {"class_type": "VAELoader", "inputs": {"vae_name": VAE}},
    }
    prompt["2"]["inputs"]["clip"] = prompt["3"]["inputs"]["clip"] = ["13", 0]
    prompt["7"]["inputs"]["vae"] = ["14", 0]
    return prompt


def headroom_prompt(steps: int, seed: int, res: int, residency: str) -> dict[str, Any]:
    def loader(**files: str) -> dict[str, Any]:
        return offload_loader(model_residency=residency, **files)

    prompt = _samplers(["21", 0], ["22", 0], steps, seed, res)
    prompt |= {
        "21": loader(diffusion_model=EXPERTS[0], text_encoder_1=CLIP, vae=VAE),
        "22": loader(diffusion_model=EXPERTS[1]),
    }
    prompt["2"]["inputs"]["clip"] = prompt["3"]["inputs"]["clip"] = ["21", 1]
    prompt["7"]["inputs"]["vae"] = ["21", 2]
    return prompt


def _pack(host: Host, name: str = "nodes.host.state") -> Any:
    """A module of the pack as the host imported it (imported now if the pack has not yet); by default its
    process state (monitor, controller)."""
    found = next((m for n, m in sys.modules.items() if n.endswith(f"{host.pack_dir.name}.{name}")), None)
    if found is None:
        state = _pack(host).__name__
        found = importlib.import_module(state.removesuffix("nodes.host.state") + name)
    return found


def run_once(host: Host, prompt: dict[str, Any], prompt_id: str) -> dict[str, Any]:
    host.free()
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    result = host.run(prompt, prompt_id=prompt_id)
    if cuda:
        torch.cuda.synchronize()
    wall = time.perf_counter() - start
    report = _pack(host).monitor().telemetry.report(prompt_id) or {}
    return {
        "wall_s": wall,
        "peak": torch.cuda.max_memory_allocated() if cuda else None,
        "image": result.outputs["7"][0][0],
        "nodes": {row["node"]: row.get("vram_peak") for row in report.get("nodes", [])},
    }


def weights_over_plan(host: Host, prompt_id: str, events: list[dict[str, Any]]) -> dict[str, list[int]]:
    """Nodes at whose start the host held more weights on its device than the plan keeps there:
    {node: [held, planned]}. The controller's ledger reads the host's loaded models at each node's start
    (after its moves) and end; the plan's share is plan_room.weights_kept. On a CPU host the device is
    the CPU and its loaded models count the same, so this part of a node's peak is checked without a GPU:
    a node over here is over on a GPU by at least as much (activations come on top)."""
    run = _pack(host).residency().controller.runs[prompt_id]
    kept_fn = _pack(host, "memory.residency.plan_room").weights_kept
    kept = {sp.step.node_id: kept_fn(run, sp) for sp in run.plan.steps}
    held: dict[str, int] = {}
    for e in events:
        if e["kind"] == "ledger" and e["node_id"] not in held:  # the first: at the node's start
            held[e["node_id"]] = e["nbytes"]
    return {n: [b, kept[n]] for n, b in held.items() if n in kept and b > kept[n]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=("sd15", "tiny"), default=None, help="sd15 on CUDA, tiny on CPU")
    parser.add_argument("--cap-gb", type=float, default=None, help="VRAM cap (default: 1.5 experts)")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--res", type=int, default=None, help="image side (default 512 on CUDA, 64 on CPU)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--residency", default="pinned_ram", help="the experts' model_residency")
    parser.add_argument("--out", type=Path, default=None, help="append the results here (markdown)")
    parser.add_argument("--json", type=Path, default=None, help="write the raw numbers here")
    args = parser.parse_args()
    cuda = torch.cuda.is_available()
    size = args.size or ("sd15" if cuda else "tiny")
    res = args.res or (512 if cuda else 64)

    work = scratch_dir("headroom-residency-")
    host = Host(find_host_root(), work, cpu=not cuda)
    build_models(host, size, torch.float16 if cuda else torch.float32)  # the dtype the host keeps
    mm, pack = host.model_management, _pack(host)
    expert = (host.models_dir / "diffusion_models" / EXPERTS[0]).stat().st_size
    cap = int(args.cap_gb * 2**30) if args.cap_gb else int(1.5 * expert) + 2**29
    total = torch.cuda.get_device_properties(0).total_memory if cuda else None
    if total is not None:
        mm.EXTRA_RESERVED_VRAM = max(0, total - cap)  # the host's --reserve-vram
    budget = _pack(host, "memory.planning.costmodel").Budget(vram=cap, ram=64 * 2**30, pinned=16 * 2**30)
    pack.residency().budget_override = budget

    rows: list[dict[str, Any]] = []
    for rep in range(args.repeats):
        seed = 100 + rep
        stock = run_once(host, stock_prompt(host, args.steps, seed, res), f"stock-{rep}")
        ours = run_once(host, headroom_prompt(args.steps, seed, res, args.residency), f"headroom-{rep}")
        summary = pack.residency().controller.summary(f"headroom-{rep}") or {}
        plan_steps = pack.residency().controller.runs[f"headroom-{rep}"].plan.steps
        predicted = {sp.step.node_id: sp.vram_peak for sp in plan_steps}
        over_plan = {
            n: (peak, predicted[n])
            for n, peak in ours["nodes"].items()
            if peak is not None and n in predicted and peak > predicted[n]
        }
        held_over = weights_over_plan(host, f"headroom-{rep}", summary.get("events", []))
        rows.append({
            "repeat": rep, "stock_s": stock["wall_s"], "headroom_s": ours["wall_s"],
            "speedup": stock["wall_s"] / ours["wall_s"],
            "stock_peak": stock["peak"], "headroom_peak": ours["peak"],
            "identical": bool(torch.equal(stock["image"], ours["image"])),
            "applied_equals_planned": summary.get("applied") == summary.get("planned"),
            "events": summary.get("events", []),
            "planned_not_applied": sorted(set(map(tuple, summary.get("planned", [])))
                                          - set(map(tuple, summary.get("applied", [])))),
            "applied_not_planned": sorted(set(map(tuple, summary.get("applied", [])))
                                          - set(map(tuple, summary.get("planned", [])))),
            "over_budget_events": summary.get("over_budget"), "nodes_over_plan": over_plan,
            "weights_over_plan": held_over,
            "headroom_node_peaks": ours["nodes"], "planned_node_peaks": predicted,
        })  # fmt: skip
    device = torch.cuda.get_device_name(0) if cuda else f"CPU ({platform.processor() or platform.machine()})"
    meta = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "device": device, "host": host.version, "torch": torch.__version__, "size": size, "res": res,
        "steps": args.steps, "cap_bytes": cap, "expert_bytes": expert, "residency": args.residency,
        "file_dtype": "float16" if cuda else "float32",
        "command": "python " + " ".join(sys.argv),
    }  # fmt: skip
    text = report(meta, rows)
    print(text)
    if args.json:
        args.json.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1, default=str))
    if args.out:
        with args.out.open("a", encoding="utf-8") as f:
            f.write("\n" + text)
    return 0


def _mib(n: int | None) -> str:
    return "n/a" if n is None else f"{n / 2**20:,.0f} MiB"


def report(meta: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    lines = [
        f"## {meta['date']}: {meta['device']}, ComfyUI {meta['host']}, torch {meta['torch']}",
        "",
        f"Command: `{meta['command']}`",
        "",
        f"Two {meta['size']} experts of {_mib(meta['expert_bytes'])} each ({meta['file_dtype']} files), "
        f"cap {_mib(meta['cap_bytes'])}, {meta['steps']} steps at {meta['res']}px, "
        f"experts' residency `{meta['residency']}`.",
        "",
        "| repeat | stock s | Headroom s | speed-up | stock peak | Headroom peak | same image | plan applied "
        "| nodes over plan | weights over plan |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['repeat']} | {r['stock_s']:.2f} | {r['headroom_s']:.2f} | {r['speedup']:.2f}x | "
            f"{_mib(r['stock_peak'])} | {_mib(r['headroom_peak'])} | {r['identical']} | "
            f"{r['applied_equals_planned']} | {len(r['nodes_over_plan'])} | {len(r['weights_over_plan'])} |"
        )
    speed = statistics.median(r["speedup"] for r in rows)
    lines += ["", f"Median speed-up (stock / Headroom wall time): {speed:.2f}x.", ""]
    # each deviation with its size (any byte over counts), so that a run on the device explains itself
    for r in rows:
        held = r["weights_over_plan"]
        for node, (peak, planned) in sorted(r["nodes_over_plan"].items()):
            w = held.get(node)
            why = f"; weights {w[0] - w[1]:+,} bytes" if w else ""
            lines.append(
                f"- repeat {r['repeat']}, node {node}: peak {_mib(peak)} vs plan {_mib(planned)} "
                f"({peak - planned:+,} bytes{why})"
            )
        for node, (w_held, w_plan) in sorted(held.items()):
            if node not in r["nodes_over_plan"]:
                lines.append(
                    f"- repeat {r['repeat']}, node {node}: weights held at its start {w_held - w_plan:+,} "
                    f"bytes against the plan's {_mib(w_plan)}"
                )
        moves = r["planned_not_applied"] + r["applied_not_planned"]
        if moves:
            lines.append(f"- repeat {r['repeat']}: planned, not applied {r['planned_not_applied']}; "
                         f"applied, not planned {r['applied_not_planned']}")  # fmt: skip
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
