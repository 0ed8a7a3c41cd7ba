"""DynamicVRAM (comfy-aimdo) on a GPU (issue #17, item 3): the plan-driven eviction order against the
host's recency order, on the same host, side by side in one process.

    COMFYUI_ROOT=/path/to/ComfyUI-0.18 python bench/dynamic_vram_gpu.py [--scale 1.0] [--cap-gb 9]
        [--runs 4] [--steps 3] [--out bench/results/dynamic_vram_gpu.md] [--dry-run] [--cpu-smoke]

The workflow is a two-expert Wan 2.2 queue, scaled: a text encoder (2 GiB), a high-noise expert and a
low-noise expert (4 GiB each) and a VAE (0.5 GiB), as stacks of the host's ``comfy.ops`` Linear layers in
bf16 (random weights, written to safetensors and mapped by the host's own ``load_torch_file``, i.e. by
aimdo), each a ``ModelPatcherDynamic`` exactly as the 0.18 host makes them. ``--runs`` runs are queued,
each with a new prompt text (the encoder runs every time): encode, high expert (``--steps`` passes), low
expert, decode. The VRAM the host may page into is capped at ``--cap-gb`` with aimdo's own
``set_simple_vram_headroom`` (two experts and a half fit, not all four models).

Two modes, in one process, from the same empty state (``unload_all_models`` between them):
- recency: the host alone. Each node's ``load_models_gpu`` prioritizes its model; a fault that finds no
  room frees pages from the least recently loaded model up.
- plan: the same, plus Headroom's boundary moves before each node: the real planner's plan for the run
  (``plan`` at the cap), the next queued run's uses from ``repeat_uses`` on the two API prompts (the
  product's own path), ``boundary_moves``, applied through ``nodes/host/dynamic_vram`` (``deprioritize``,
  ``warm``), as the controller's boundary does on such a host (it pages nothing out whole there).
Measured per run: wall time (synchronised) and the bytes each node's model paged in (its loaded size
after the node less before). Passes when the plan's median run time, runs 2.. (the first starts empty in
both), is below recency's. Without CUDA, a 0.18 host or comfy-aimdo it prints why and exits 0, after the
page-level prediction of both orders (``simulate``), which needs none of them. ``--cpu-smoke`` runs
the whole script on the CPU at 1/200 scale (the host's CPU path has no DynamicVRAM: it checks the script,
its numbers say nothing).
"""

from __future__ import annotations

import argparse
import datetime
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

GiB = 2**30
TE, HIGH = "1:text_encoder_1:text_encoder", "1:diffusion_model:diffusion_model"
LOW, VAE = "2:diffusion_model:diffusion_model", "3:vae:vae"
SIZES_GIB = {TE: 2.0, HIGH: 4.0, LOW: 4.0, VAE: 0.5}
NAMES = {TE: "text encoder", HIGH: "high-noise expert", LOW: "low-noise expert", VAE: "VAE"}
NODES = (("4", TE), ("7", HIGH), ("8", LOW), ("9", VAE))  # (node id, the model it computes with)


def prompt(k: int) -> dict[str, Any]:
    """Run ``k``'s API prompt: the loaders, the encode (its text changes each run), the two samplers, the
    decode. Only what ``repeat_uses`` compares: node ids, classes, inputs and links."""
    return {
        "1": {"class_type": "HeadroomOffloadLoader", "inputs": {"diffusion_model": "high.safetensors"}},
        "2": {"class_type": "HeadroomOffloadLoader", "inputs": {"diffusion_model": "low.safetensors"}},
        "3": {"class_type": "VAELoader", "inputs": {"vae_name": "vae.safetensors"}},
        "4": {"class_type": "CLIPTextEncode", "inputs": {"text": f"a cat, take {k}", "clip": ["1", 1]}},
        "7": {"class_type": "KSamplerAdvanced", "inputs": {"model": ["1", 0], "positive": ["4", 0]}},
        "8": {"class_type": "KSamplerAdvanced", "inputs": {"model": ["2", 0], "latent_image": ["7", 0]}},
        "9": {"class_type": "VAEDecode", "inputs": {"samples": ["8", 0], "vae": ["3", 0]}},
    }


def plan_steps(sizes: dict[str, int], cap: int) -> list[Any]:
    """The real planner's plan for one run at the cap (the placements the boundary moves read)."""
    from comfyui_headroom.memory.planning.costmodel import Budget, Hardware
    from comfyui_headroom.memory.planning.planner import plan
    from comfyui_headroom.memory.planning.workload import Component, Step, Workload

    components = tuple(Component(c, c, n) for c, n in sizes.items())
    activation = min(sizes.values()) // 4  # 128 MiB at full scale
    steps = tuple(Step(node, "Node", (cid,), activation=activation) for node, cid in NODES)
    budget = Budget(vram=cap, ram=256 * GiB, pinned=64 * GiB)
    result = plan(Workload(components, steps), budget, Hardware.pcie(5))
    if not result.feasible:
        raise SystemExit(f"the planner found no plan at a {cap / GiB:.1f} GiB cap: {result.bottleneck}")
    return result.steps


def simulate(sizes: dict[str, int], cap: int, runs: int, planned: bool) -> list[int]:
    """Bytes paged in per run by a page-level model of aimdo (its priority list, faults freeing from the
    lowest-priority model up), with or without the plan's boundary moves. Pure Python."""
    from comfyui_headroom.memory.residency import dynamic_policy as policy

    steps = plan_steps(sizes, cap) if planned else []
    pages = dict.fromkeys(sizes, 0)
    priority: list[str] = []  # lowest first
    out = []
    for k in range(runs):
        after = policy.repeat_uses(steps, prompt(k), prompt(k + 1)) if planned and k + 1 < runs else []
        moved = 0
        for s, (_, cid) in enumerate(NODES):
            if planned:
                held = [policy.Resident(c, c, pages[c], sizes[c]) for c in sizes]
                for m in policy.boundary_moves(steps, s, held, after):
                    if m.action == policy.ORDER and m.component_id in priority:
                        priority.remove(m.component_id)
                        priority.insert(0, m.component_id)
            if cid in priority:  # load_models_gpu: the model's VBAR goes on top
                priority.remove(cid)
            priority.append(cid)
            missing = sizes[cid] - pages[cid]
            short = sum(pages.values()) + missing - cap
            for other in priority:
                if short <= 0:
                    break
                if other != cid:
                    take = min(short, pages[other])
                    pages[other] -= take
                    short -= take
            pages[cid] = sizes[cid]
            moved += missing
        out.append(moved)
    return out


def _why_not() -> str:
    """ "" when the GPU run can go ahead, else why not. comfy-aimdo's library is loaded first, before torch
    touches CUDA, as the host's main.py does (``main.py:51``)."""
    import importlib.util

    if importlib.util.find_spec("comfy_aimdo") is None:
        return "comfy-aimdo is not installed (pip install comfy-aimdo; ComfyUI 0.18's requirements have it)"
    import comfy_aimdo.control

    if not comfy_aimdo.control.init():
        return "comfy-aimdo's library did not load on this machine"
    import torch

    if not torch.cuda.is_available():
        return "no CUDA device"
    from headroom_testing.harness import find_host_root

    try:
        root = find_host_root()
    except Exception as exc:  # no host at all
        return f"no ComfyUI host ({exc})"
    if "class ModelPatcherDynamic" not in (root / "comfy" / "model_patcher.py").read_text(errors="replace"):
        return (
            f"the ComfyUI at {root} has no ModelPatcherDynamic (DynamicVRAM came with 0.18): set COMFYUI_ROOT"
        )
    return ""


def _enable_dynamic_vram(host: Any, cap: int) -> int:
    """What the 0.18 host's main.py does at start (``main.py:51`` and ``:226-243``), and the cap."""
    import comfy.memory_management
    import comfy.model_patcher
    import comfy_aimdo.control as control

    mm = host.model_management
    device = mm.get_torch_device()
    if not control.init_device(device.index or 0):
        raise SystemExit("comfy-aimdo could not take the device (init_device failed)")
    comfy.model_patcher.CoreModelPatcher = comfy.model_patcher.ModelPatcherDynamic
    comfy.memory_management.aimdo_enabled = True
    total = int(mm.get_total_memory(device))
    from headroom_testing.aimdo import set_vram_headroom

    set_vram_headroom(control, max(0, total - cap))
    return total


def layered_module(path: Path, seed: int, nbytes: int, width: int) -> Any:
    """A stack of ``width`` x ``width`` bf16 Linear layers of about ``nbytes``, written to ``path`` and
    loaded from it as the host loads a file (its weights are aimdo's mapping on a DynamicVRAM host), with
    the attributes the host's patcher reads before a first load. Also used by bench/host_repeat_gpu.py."""
    import comfy.ops
    import comfy.utils
    import torch
    from safetensors.torch import save_file

    depth = max(1, nbytes // (width * width * 2))
    gen = torch.Generator().manual_seed(seed)
    layers = {f"layers.{i}.weight": torch.randn(width, width, generator=gen).bfloat16() for i in range(depth)}
    save_file(layers, path)
    del layers

    class Layers(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = torch.nn.ModuleList(
                comfy.ops.disable_weight_init.Linear(width, width, bias=False) for _ in range(depth)
            )

        def forward(self, x: Any) -> Any:
            for layer in self.layers:
                x = torch.nn.functional.gelu(layer(x))
            return x

    module = Layers()
    module.load_state_dict(comfy.utils.load_torch_file(str(path)), assign=True)  # aimdo's mapping
    module.model_loaded_weight_memory, module.current_weight_patches_uuid = 0, None
    module.device = torch.device("cpu")  # what current_loaded_device reads before the first load
    return module


def _build(host: Any, work: Path, cid: str, nbytes: int, width: int) -> tuple[Any, Path]:
    import comfy.model_patcher
    import torch

    path = work / f"{cid.replace(':', '_')}.safetensors"
    module = layered_module(path, len(path.name), nbytes, width)
    device = host.model_management.get_torch_device()
    patcher = comfy.model_patcher.ModelPatcherDynamic(module, device, torch.device("cpu"))
    return patcher, path


def _node(host: Any, patcher: Any, x: Any, steps: int) -> int:
    """One node: the host loads the model (prioritizes its VBAR) and the layers compute; returns the bytes
    its model paged in."""
    import torch

    before = int(patcher.loaded_size())
    host.model_management.load_models_gpu([patcher])
    with torch.inference_mode():
        for _ in range(steps):
            patcher.model(x)
    if x.is_cuda:
        torch.cuda.synchronize()
    return max(0, int(patcher.loaded_size()) - before)


def _mode(host: Any, dyn: Any, models: dict[str, tuple[Any, Path]], sizes: dict[str, int], cap: int,
          runs: int, steps: int, planned: bool) -> list[tuple[float, int]]:  # fmt: skip
    import torch

    from comfyui_headroom.memory.residency import dynamic_policy as policy

    mm = host.model_management
    mm.unload_all_models()
    mm.soft_empty_cache()
    plan = plan_steps(sizes, cap) if planned else []
    width = models[TE][0].model.layers[0].in_features
    x = torch.randn(16, width, device=mm.get_torch_device(), dtype=torch.bfloat16)
    out = []
    for k in range(runs):
        after = policy.repeat_uses(plan, prompt(k), prompt(k + 1)) if planned and k + 1 < runs else []
        if x.is_cuda:
            torch.cuda.synchronize()
        t0, paged = time.perf_counter(), 0
        for s, (_, cid) in enumerate(NODES):
            if planned:
                held = [
                    policy.Resident(c, c, int(p.loaded_size()), int(p.model_size()))
                    for c, (p, _) in models.items()
                ]
                for m in policy.boundary_moves(plan, s, held, after):
                    p, path = models[m.component_id]
                    if m.action == policy.ORDER:
                        dyn.deprioritize(p)
                    elif m.action == policy.WARM:
                        dyn.warm([path])
            paged += _node(host, models[cid][0], x, steps if cid in (HIGH, LOW) else 1)
        out.append((time.perf_counter() - t0, paged))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", type=float, default=1.0, help="model sizes times this (1.0: 2+4+4+0.5 GiB)")
    ap.add_argument("--cap-gb", type=float, default=None, help="VRAM cap (default: 9 GiB times --scale)")
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--steps", type=int, default=3, help="passes over each expert per run")
    ap.add_argument("--width", type=int, default=4096)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--dry-run", action="store_true", help="print the plan and the prediction only")
    ap.add_argument("--cpu-smoke", action="store_true", help="run the script on the CPU, 1/200 scale")
    args = ap.parse_args(argv)
    if args.cpu_smoke:
        args.scale, args.width, args.cap_gb, args.runs, args.steps = 0.005, 256, None, 3, 1
    for path in (
        ROOT / "tests",
        ROOT.parent,
    ):  # the harness; the pack as comfyui_headroom (gpu-check links it)
        if str(path) not in sys.path:
            sys.path.insert(0, str(path))
    sizes = {c: int(g * args.scale * GiB) for c, g in SIZES_GIB.items()}
    cap = int((args.cap_gb if args.cap_gb is not None else 9 * args.scale) * GiB)
    lines = [
        f"# DynamicVRAM: plan-driven eviction order vs the host's recency ({datetime.date.today()})",
        "",
        f"models: {', '.join(f'{NAMES[c]} {n / GiB:.2f} GiB' for c, n in sizes.items())}; "
        f"cap {cap / GiB:.2f} GiB; {args.runs} queued runs, the encoder re-runs each time",
        "",
        "predicted (page-level model of aimdo), GiB paged in per run:",
        f"- recency: {[round(b / GiB, 2) for b in simulate(sizes, cap, args.runs, False)]}",
        f"- plan:    {[round(b / GiB, 2) for b in simulate(sizes, cap, args.runs, True)]}",
    ]
    why = "--dry-run" if args.dry_run else "" if args.cpu_smoke else _why_not()
    if why:
        print("\n".join(lines))
        print(f"\nnot measured: {why}")
        return 0

    from headroom_testing.harness import Host, find_host_root, scratch_dir

    work = scratch_dir("headroom-dynvram-")
    host = Host(find_host_root(), work, cpu=args.cpu_smoke)
    total = 0 if args.cpu_smoke else _enable_dynamic_vram(host, cap)
    dyn = host.pack_module("nodes.host.dynamic_vram")
    models = {c: _build(host, work, c, n, args.width) for c, n in sizes.items()}
    sizes = {c: int(p.model_size()) for c, (p, _) in models.items()}
    results = {}
    for name, planned in (("recency", False), ("plan", True), ("recency again", False), ("plan again", True)):
        results[name] = _mode(host, dyn, models, sizes, cap, args.runs, args.steps, planned)
    import torch

    card = torch.cuda.get_device_name() if total else "CPU smoke run (no DynamicVRAM: numbers say nothing)"
    machine = f"{card} ({total / GiB:.0f} GiB), torch {torch.__version__}"
    lines += ["", f"machine: {machine}, ComfyUI {host.version}, Python {platform.python_version()}", ""]
    lines += ["| mode | run times (s) | GiB paged in per run |", "|---|---|---|"]
    for name, rows in results.items():
        times, paged = ", ".join(f"{t:.2f}" for t, _ in rows), ", ".join(f"{b / GiB:.2f}" for _, b in rows)
        lines.append(f"| {name} | {times} | {paged} |")
    steady = {
        n: statistics.median(t for rows in (results[n], results[f"{n} again"]) for t, _ in rows[1:])
        for n in ("recency", "plan")
    }
    ok = steady["plan"] < steady["recency"]
    verdict = "PASS" if ok else "FAIL"
    lines.append(
        f"\nmedian run time, runs 2..: recency {steady['recency']:.2f} s, plan {steady['plan']:.2f} s "
        f"({steady['recency'] / steady['plan']:.2f}x): {verdict}"
    )
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    return 0 if ok or args.cpu_smoke else 1


if __name__ == "__main__":
    sys.exit(main())
