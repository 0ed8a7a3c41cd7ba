"""Offload Loader soak (issue #31): prompts cycling every residency on one checkpoint, each loader at a new
node id, in a real ComfyUI on CPU; then a loader-less prompt and /free. Says after each prompt the
process's anonymous RSS, its address space (VmSize) and the files Headroom has mapped; the stock
CheckpointLoaderSimple at new ids is the control.

    COMFYUI_ROOT=/path/to/ComfyUI python bench/loader_soak.py [--prompts 20] [--out FILE.md]

The tiny fp32 SD checkpoint is built first (tests/headroom_testing), so "disk" really maps it.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import platform
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from headroom_testing.harness import Host, find_host_root  # noqa: E402
from headroom_testing.prompts import offload_loader  # noqa: E402

RESIDENCIES = ("auto", "gpu", "pinned_ram", "ram", "disk")
CKPT = "soak_sd15.safetensors"


def workflow(model: list, clip: list, vae: list, seed: int) -> dict[str, Any]:
    sampler = {
        "model": model, "seed": seed, "steps": 1, "cfg": 4.0, "sampler_name": "euler", "scheduler": "normal",
        "positive": ["2", 0], "negative": ["2", 0], "latent_image": ["4", 0], "denoise": 1.0,
    }  # fmt: skip
    return {
        "2": {"class_type": "CLIPTextEncode", "inputs": {"text": "a soaked fox", "clip": clip}},
        "4": {"class_type": "EmptyLatentImage", "inputs": {"width": 64, "height": 64, "batch_size": 1}},
        "5": {"class_type": "KSampler", "inputs": sampler},
        "6": {"class_type": "VAEDecode", "inputs": {"samples": ["5", 0], "vae": vae}},
        "7": {"class_type": "PreviewImage", "inputs": {"images": ["6", 0]}},
    }


def status() -> dict[str, int]:
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in ("RssAnon", "VmSize"):
            fields[name] = int(rest.split()[0]) * 1024
    return fields


def measure(host: Host, label: str) -> dict[str, Any]:
    gc.collect()
    controller = host.pack_module("nodes.host.state").residency().controller
    controller.reap()
    files, nbytes = host.pack_module("memory.residency").live_mappings()
    return {
        "step": label,
        **status(),
        "mappings": files,
        "mapped": nbytes,
        "registered": len(controller.managed),
    }


def soak(host: Host, prompts: int, stock: bool) -> list[dict[str, Any]]:
    rows = [measure(host, "start")]
    for i in range(prompts):
        node = str(100 + i)  # a new node id each time: the host drops the previous loader's outputs
        if stock:
            loader = {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": CKPT}}
        else:
            choice = RESIDENCIES[i % len(RESIDENCIES)]
            loader = offload_loader(
                checkpoint=CKPT, model_residency=choice, text_encoder_residency=choice, vae_residency=choice
            )
        host.run({node: loader, **workflow([node, 0], [node, 1], [node, 2], seed=i)})
        rows.append(measure(host, f"{node} {'stock' if stock else loader['inputs']['model_residency']}"))
    image = {"width": 8, "height": 8, "batch_size": 1, "color": 0}
    host.run(
        {
            "8": {"class_type": "EmptyImage", "inputs": image},
            "9": {"class_type": "PreviewImage", "inputs": {"images": ["8", 0]}},
        }
    )  # a prompt without a loader
    host.free()
    rows.append(measure(host, "no loader + /free"))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=20)
    parser.add_argument("--out", type=Path, default=None, help="append a markdown table here")
    args = parser.parse_args()
    import torch

    from headroom_testing.tiny_models import build_tiny_sd_checkpoint

    with tempfile.TemporaryDirectory() as work:
        host = Host(find_host_root(), Path(work))
        build_tiny_sd_checkpoint(host.models_dir, name=CKPT, seed=31, dtype=torch.float32)
        host.register_models_dir(host.models_dir)
        with torch.no_grad():
            control = soak(host, args.prompts, stock=True)
            ours = soak(host, args.prompts, stock=False)
    mib = 2**20
    lines = [
        f"## {datetime.date.today()} {platform.node()} (a shared 2-core machine), on CPU",
        f"`python bench/loader_soak.py --prompts {args.prompts}` (ComfyUI at {find_host_root()})",
        "",
        "| run | after | RssAnon MiB | VmSize MiB | mappings | mapped MiB | registered |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for name, rows in (("stock", control), ("Offload Loader", ours)):
        for r in rows:
            lines.append(
                f"| {name} | {r['step']} | {r['RssAnon'] / mib:.0f} | {r['VmSize'] / mib:.0f} "
                f"| {r['mappings']} | {r['mapped'] / mib:.1f} | {r['registered']} |"
            )
    growth = (ours[-1]["RssAnon"] - control[-1]["RssAnon"]) / control[-1]["RssAnon"]
    lines += ["", f"RssAnon after the last /free, Offload Loader vs stock: {100 * growth:+.1f}%"]
    print("\n".join(lines))
    if args.out:
        with args.out.open("a", encoding="utf-8") as out:
            out.write("\n".join(lines) + "\n\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
