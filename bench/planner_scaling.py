"""Planner scaling on big generated API prompts (issue #18, R77/C59).

    python bench/planner_scaling.py [--sizes 1,2,5] [--out bench/results/planner_scaling.md]

Each prompt holds one CheckpointLoaderSimple shared by many independent chains
EmptyLatentImage -> KSampler -> VAEDecode -> SaveImage (distinct seeds, so none share a cache entry)
plus one long chain of LatentUpscaleBy nodes feeding a last SaveImage, grown until the JSON reaches
the requested size in MB. Times parse + order + extract + plan, as ``comfyui_headroom plan`` does.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from comfyui_headroom.memory.planning.costmodel import Budget, Hardware  # noqa: E402
from comfyui_headroom.memory.planning.pipeline import plan_workflow  # noqa: E402
from comfyui_headroom.memory.units import GiB  # noqa: E402
from comfyui_headroom.memory.workflow.order import predict_order  # noqa: E402
from headroom_testing.host_scan import scan_order  # noqa: E402


def big_prompt(chains: int, chain_length: int) -> dict[str, Any]:
    """The prompt described in the module doc: ``chains`` sampler chains and one long chain."""
    prompt: dict[str, Any] = {
        "1": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "sd15.safetensors"}},
        "2": {"class_type": "CLIPTextEncode", "inputs": {"text": "a cat", "clip": ["1", 1]}},
    }
    next_id = 3

    def add(class_type: str, inputs: dict[str, Any]) -> str:
        nonlocal next_id
        node_id = str(next_id)
        next_id += 1
        prompt[node_id] = {"class_type": class_type, "inputs": inputs}
        return node_id

    for seed in range(chains):
        latent = add("EmptyLatentImage", {"width": 512, "height": 512, "batch_size": 1})
        sampler = add(
            "KSampler",
            {
                "model": ["1", 0],
                "seed": seed,
                "steps": 20,
                "cfg": 7.0,
                "sampler_name": "euler",
                "scheduler": "normal",
                "denoise": 1.0,
                "positive": ["2", 0],
                "negative": ["2", 0],
                "latent_image": [latent, 0],
            },
        )
        image = add("VAEDecode", {"samples": [sampler, 0], "vae": ["1", 2]})
        add("SaveImage", {"images": [image, 0], "filename_prefix": f"chain{seed}"})
    source = add("EmptyLatentImage", {"width": 512, "height": 512, "batch_size": 1})
    for step in range(chain_length):
        source = add(
            "LatentUpscaleBy",
            {"samples": [source, 0], "upscale_method": "nearest-exact", "scale_by": 1.0 + step},
        )
    image = add("VAEDecode", {"samples": [source, 0], "vae": ["1", 2]})
    add("SaveImage", {"images": [image, 0], "filename_prefix": "long"})
    return prompt


def prompt_of_size(megabytes: float) -> dict[str, Any]:
    """A big_prompt whose JSON is about ``megabytes`` MB: 3/4 of it chains, 1/4 the long chain."""
    unit = big_prompt(100, 100)
    per_node = len(json.dumps(unit)) / len(unit)
    nodes = int(megabytes * 1e6 / per_node)
    return big_prompt(nodes * 3 // 16, nodes // 4)


def time_plan(prompt: dict[str, Any], before: bool = False) -> dict[str, float]:
    """Seconds for each stage of ``comfyui_headroom plan`` on ``prompt`` (already loaded JSON)."""
    start = time.perf_counter()
    planned = plan_workflow(
        prompt,
        Budget.from_card(8 * GiB, 32 * GiB),
        Hardware.pcie(4),
        order_by=(lambda graph, cached, outputs: scan_order(graph)) if before else predict_order,
    )
    return {**planned.seconds, "total": time.perf_counter() - start}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,2,5", help="prompt sizes in MB, comma-separated")
    parser.add_argument("--out", type=Path, default=None, help="append a markdown table here")
    parser.add_argument("--before", action="store_true", help="order with the pre-#18 per-step scan")
    args = parser.parse_args()
    lines = [
        f"{datetime.date.today()}, {platform.node()}, {platform.processor() or platform.machine()}, "
        f"Python {platform.python_version()}: `python bench/planner_scaling.py --sizes {args.sizes}"
        + (" --before`" if args.before else "`"),
        "",
        "| MB | nodes | parse s | order s | extract s | plan s | total s |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for size in (float(s) for s in args.sizes.split(",")):
        prompt = prompt_of_size(size)
        megabytes = len(json.dumps(prompt)) / 1e6
        t = time_plan(prompt, args.before)
        row = (
            f"| {megabytes:.1f} | {len(prompt)} | {t['parse']:.2f} | {t['order']:.2f} | "
            f"{t['extract']:.2f} | {t['plan']:.2f} | {t['total']:.2f} |"
        )
        lines.append(row)
        print(row, flush=True)
    if args.out:
        with args.out.open("a", encoding="utf-8") as out:
            out.write("\n".join(lines) + "\n\n")


if __name__ == "__main__":
    sys.exit(main())
