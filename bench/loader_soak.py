"""Offload Loader soak (issue #31): prompts cycling every residency on one checkpoint, each loader at a new
node id, in a real ComfyUI on CPU; then a loader-less prompt and /free. Says after each prompt the
process's anonymous RSS, its address space (VmSize) and the files Headroom has mapped; the stock
CheckpointLoaderSimple at new ids is the control. Each run has a fresh process of its own (the control's
freed heap would otherwise be the second run's start).

    COMFYUI_ROOT=/path/to/ComfyUI python bench/loader_soak.py [--prompts 20] [--out FILE.md]

The tiny fp32 SD checkpoint is built first (tests/headroom_testing), so "disk" really maps it. The rows
are read as the host leaves the process (a gc.collect, as main.py's /free does; nothing reaped or trimmed
by the bench) except the last, "bench's malloc_trim": the floor once the bench itself hands every freed
heap page back, which separates what is still held from what the allocator kept.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import gc
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

RESIDENCIES = ("auto", "gpu", "pinned_ram", "ram", "disk")
CKPT = "soak_sd15.safetensors"


def offload_loader(**inputs: Any) -> dict[str, Any]:
    from headroom_testing.prompts import offload_loader as make

    return make(**inputs)


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


def measure(host: Any, label: str) -> dict[str, Any]:
    gc.collect()
    controller = host.pack_module("nodes.host.state").residency().controller
    files, nbytes = host.pack_module("memory.residency").live_mappings()
    return {
        "step": label,
        **status(),
        "mappings": files,
        "mapped": nbytes,
        "registered": len(controller.managed),
    }


def soak(host: Any, prompts: int, stock: bool) -> list[dict[str, Any]]:
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
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    rows.append(measure(host, "bench's malloc_trim"))
    return rows


def one_run(prompts: int, stock: bool) -> list[dict[str, Any]]:
    import torch

    from headroom_testing.harness import Host, find_host_root
    from headroom_testing.tiny_models import build_tiny_sd_checkpoint

    with tempfile.TemporaryDirectory() as work:
        host = Host(find_host_root(), Path(work))
        build_tiny_sd_checkpoint(host.models_dir, name=CKPT, seed=31, dtype=torch.float32)
        host.register_models_dir(host.models_dir)
        with torch.no_grad():
            return soak(host, prompts, stock=stock)


def in_process(prompts: int, stock: bool) -> list[dict[str, Any]]:
    """One run in a fresh Python: its rows, as JSON on the last line of its output."""
    argv = [sys.executable, __file__, "--prompts", str(prompts), "--one", "stock" if stock else "ours"]
    done = subprocess.run(argv, capture_output=True, text=True, env=os.environ.copy(), check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=20)
    parser.add_argument("--out", type=Path, default=None, help="append a markdown table here")
    parser.add_argument("--one", choices=("stock", "ours"), default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:  # a child: one run, its rows as JSON
        print(json.dumps(one_run(args.prompts, stock=args.one == "stock")))
        return 0
    from headroom_testing.harness import find_host_root

    control = in_process(args.prompts, stock=True)
    ours = in_process(args.prompts, stock=False)
    mib = 2**20
    lines = [
        f"## {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.node()} "
        f"({os.cpu_count()} CPUs, shared with other engineers), on CPU",
        f"`python bench/loader_soak.py --prompts {args.prompts}` (ComfyUI at {find_host_root()}, "
        f"Python {platform.python_version()})",
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
    growth = (ours[-2]["RssAnon"] - control[-2]["RssAnon"]) / control[-2]["RssAnon"]
    floor = (ours[-1]["RssAnon"] - control[-1]["RssAnon"]) / control[-1]["RssAnon"]
    steady = [r["VmSize"] for r in ours[1 + len(RESIDENCIES) : -2]]  # after one cycle of residencies
    lines += [
        "",
        f"RssAnon after the loader-less prompt and /free, Offload Loader vs stock: {100 * growth:+.1f}%; "
        f"after the bench's own malloc_trim: {100 * floor:+.1f}%",
        f"most mappings at once: {max(r['mappings'] for r in ours)}",
    ]
    if steady:
        low, high = min(steady) / mib, max(steady) / mib
        lines.append(f"VmSize over the prompts after the first cycle: {low:.0f}-{high:.0f} MiB")
    print("\n".join(lines))
    if args.out:
        with args.out.open("a", encoding="utf-8") as out:
            out.write("\n".join(lines) + "\n\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
