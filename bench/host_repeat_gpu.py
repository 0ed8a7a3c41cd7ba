"""The 2026 host's repeat run on a GPU (issue #28): ComfyUI 0.33 with DynamicVRAM and the RAM-pressure cache,
alone and with Headroom's release of the pins the graph is done with, side by side in one process.

    COMFYUI_ROOT=/path/to/ComfyUI-0.33 python bench/host_repeat_gpu.py [--scale 1.0] [--runs 4]
        [--steps 4] [--out bench/results/host_repeat_gpu.md] [--dry-run]

The workflow is Wan 2.2's shape, scaled: a text encoder (2 GiB), a high-noise and a low-noise expert
(4 GiB each) and a VAE (0.5 GiB), stacks of the host's ``comfy.ops`` Linear layers in bf16 (random
weights written to safetensors and mapped by the host's ``load_torch_file``, i.e. by aimdo), each a
``ModelPatcherDynamic``. Run 1 encodes, samples with each expert (``--steps`` passes) and decodes; runs
2.. are the same workflow with a new seed: the encode is served from the cache, as the host does. The
VRAM the host may page into is capped where one and a half experts fit (aimdo's
``set_simple_vram_headroom``); the RAM the host sees (psutil, read by ``ensure_pin_budget`` and the
RAM-pressure release) is that of a machine whose RAM holds both experts and the VAE above the host's
2 GiB floor, not the encoder too; the model files are dropped from the page cache before each run (a
machine of that size could not keep them), so a weight the host read again comes from the disk.

Two modes from the same empty state: the host alone; the host plus Headroom's boundary moves
(``dynamic_policy.boundary_moves`` with the next run's uses, applied through ``nodes/host/dynamic_vram``).
Measured per run: wall time (synchronised) and the bytes each run read into host buffers. Target (issue
#28): the median of runs 2.. at least 1.2x faster with Headroom. Without CUDA, a 0.33 host or comfy-aimdo
it prints the plan's prediction of both (``memory/planning/paging_host``) and why it did not measure, and
exits 0.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
GiB = 2**30
SIZES_GIB = {"te": 2.0, "high": 4.0, "low": 4.0, "vae": 0.5}
NODES = (("4", "te"), ("7", "high"), ("8", "low"), ("9", "vae"))
TARGET = 1.2


def predicted(sizes: dict[str, int], ram: int, cap: int, runs: int, steps: int) -> dict[str, list[float]]:
    """The paging model's transfer seconds per run, for both modes (PCIe 4 figures, no compute)."""
    from comfyui_headroom.memory.planning.costmodel import Budget, Hardware
    from comfyui_headroom.memory.planning.paging_host import paging_host
    from comfyui_headroom.memory.planning.workload import Component, Step, Workload

    comps = tuple(Component(c, c, n, tuple([n // 16] * 16)) for c, n in sizes.items())
    work = Workload(comps, tuple(Step(n, "Node", (c,), evaluations=steps if c in ("high", "low") else 1)
                                 for n, c in NODES))  # fmt: skip
    budget = Budget(vram=cap, ram=ram, pinned=ram, reserve=0)
    out = {}
    for name, headroom in (("host", False), ("host + Headroom", True)):
        o = paging_host(work, budget, Hardware.pcie(4), rerun={"7", "8", "9"}, headroom=headroom)
        out[name] = [round(o.runs_s[0], 2)] + [round(o.runs_s[1], 2)] * (runs - 1)
    return out


def _why_not() -> str:
    import importlib.util

    if importlib.util.find_spec("comfy_aimdo") is None:
        return "comfy-aimdo is not installed"
    import comfy_aimdo.control

    if not comfy_aimdo.control.init():  # before torch touches CUDA, as the host's main.py
        return "comfy-aimdo's library did not load on this machine"
    import torch

    if not torch.cuda.is_available():
        return "no CUDA device"
    from headroom_testing.harness import find_host_root

    try:
        root = find_host_root()
    except Exception as exc:
        return f"no ComfyUI host ({exc})"
    source = (root / "comfy" / "model_management.py").read_text(errors="replace")
    if "def free_pins" not in source:
        return f"the ComfyUI at {root} has no RAM-pressure pin release (0.30+): set COMFYUI_ROOT to 0.33"
    sys.path.insert(0, str(root))
    return ""


def _host(ram: int, cap: int) -> SimpleNamespace:
    """The host's memory modules, DynamicVRAM on as its main.py turns it on, and the machine's RAM."""
    import comfy.memory_management as cmm
    import comfy.model_management as mm
    import comfy.model_patcher as mp
    import comfy_aimdo.control as control

    device = mm.get_torch_device()
    if not control.init_device(device.index or 0):
        raise SystemExit("comfy-aimdo could not take the device (init_device failed)")
    mp.CoreModelPatcher = mp.ModelPatcherDynamic
    cmm.aimdo_enabled = True
    from headroom_testing.aimdo import set_vram_headroom

    set_vram_headroom(control, max(0, int(mm.get_total_memory(device)) - cap))
    patchers: list[Any] = []
    real = mm.psutil

    def virtual_memory() -> Any:
        held = sum(int(p.loaded_ram_size()) for p in patchers)
        return SimpleNamespace(total=ram, available=ram - held, percent=0.0)

    mm.psutil = SimpleNamespace(virtual_memory=virtual_memory, swap_memory=real.swap_memory)
    return SimpleNamespace(mm=mm, mp=mp, cmm=cmm, patchers=patchers, device=device)


def _build(h: SimpleNamespace, work: Path, name: str, nbytes: int, width: int) -> tuple[Any, Path]:
    import torch
    from dynamic_vram_gpu import layered_module

    path = work / f"{name}.safetensors"
    module = layered_module(path, len(name), nbytes, width)
    patcher = h.mp.ModelPatcherDynamic(module, h.device, torch.device("cpu"))
    h.patchers.append(patcher)
    return patcher, path


def _drop_page_cache(paths: Sequence[Path]) -> None:
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _mode(h: SimpleNamespace, models: dict[str, tuple[Any, Path]], runs: int, steps: int, headroom: bool,
          width: int) -> list[tuple[float, int]]:  # fmt: skip
    import torch

    from comfyui_headroom.memory.planning.costmodel import Tier
    from comfyui_headroom.memory.planning.planner import Placement, StepPlan
    from comfyui_headroom.memory.planning.workload import Step
    from comfyui_headroom.memory.residency import dynamic_policy as policy
    from comfyui_headroom.nodes.host import dynamic_vram

    mm = h.mm
    mm.unload_all_models()
    for p, _ in models.values():
        p.partially_unload_ram(1e32)
    mm.soft_empty_cache()
    plan = [StepPlan(Step(n, "Node", (c,)), {c: Placement(Tier.GPU_RAM)}, 0, 0, 0, 0.0) for n, c in NODES]
    repeat = [(c,) for _, c in NODES[1:]]
    headroom_bytes = int(min(10, max(2, 0.1 * mm.psutil.virtual_memory().total / GiB)) * GiB)
    h.cmm.set_ram_cache_release_state(None, headroom_bytes)
    x = torch.randn(64, width, device=h.device, dtype=torch.bfloat16)
    out = []
    for k in range(runs):
        steps_k = plan if k == 0 else plan[1:]  # the encode is cached in the repeat runs
        _drop_page_cache([path for _, path in models.values()])
        tracker = h.mp.PromptModelTracker()
        tracker.start()
        tracker.add([models[c][0] for sp in steps_k for c in sp.step.uses])
        read0 = sum(int(p.loaded_ram_size()) for p, _ in models.values())
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for s, sp in enumerate(steps_k):
            if headroom:
                held = [dynamic_vram.resident(c, c, p) for c, (p, _) in models.items()]
                for move in policy.boundary_moves(steps_k, s, held, repeat):
                    if move.action == policy.RELEASE:
                        dynamic_vram.to_disk(models[move.component_id][0])
            (c,) = sp.step.uses
            patcher = models[c][0]
            mm.load_models_gpu([patcher])
            with torch.inference_mode():
                for _ in range(steps if c in ("high", "low") else 1):
                    patcher.model(x)
            torch.cuda.synchronize()
            mm.reset_cast_buffers()
            shortfall = headroom_bytes - mm.psutil.virtual_memory().available  # execution.py, after a node
            if mm.should_free_pins_for_ram_pressure(shortfall):
                mm.free_pins(shortfall + 512 * 2**20)
        out.append(
            (time.perf_counter() - t0, sum(int(p.loaded_ram_size()) for p, _ in models.values()) - read0)
        )
        tracker.end()
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", type=float, default=1.0, help="model sizes times this (1.0: 2+4+4+0.5 GiB)")
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--steps", type=int, default=4, help="passes over each expert per run")
    ap.add_argument("--width", type=int, default=4096)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--dry-run", action="store_true", help="print the prediction only")
    args = ap.parse_args(argv)
    for path in (
        ROOT / "tests",
        ROOT.parent,
    ):  # the harness; the pack as comfyui_headroom (gpu-check links it)
        if str(path) not in sys.path:
            sys.path.insert(0, str(path))
    sizes = {c: int(g * args.scale * GiB) for c, g in SIZES_GIB.items()}
    cap = int(6 * args.scale * GiB)  # one and a half experts
    ram = 2 * GiB + sizes["high"] + sizes["low"] + sizes["vae"] + GiB // 4  # the experts and the VAE fit
    lines = [
        f"# The 2026 host's repeat run, alone and with Headroom's release ({datetime.date.today()})",
        "",
        f"models (GiB): {', '.join(f'{c} {n / GiB:.2f}' for c, n in sizes.items())}; "
        f"VRAM cap {cap / GiB:.2f} GiB; RAM seen by the host {ram / GiB:.2f} GiB; "
        f"{args.runs} runs of the same workflow (new seed)",
        "",
        "predicted transfer seconds per run (memory/planning/paging_host, PCIe 4):",
        *(f"- {name}: {secs}" for name, secs in predicted(sizes, ram, cap, args.runs, args.steps).items()),
    ]
    why = "--dry-run" if args.dry_run else _why_not()
    if why:
        print("\n".join(lines) + f"\n\nnot measured: {why}")
        return 0
    import torch

    h = _host(ram, cap)
    from headroom_testing.harness import scratch_dir

    work = scratch_dir("headroom-repeat-")
    models = {c: _build(h, work, c, n, args.width) for c, n in sizes.items()}
    results = {}
    for name, headroom in (("host", False), ("host + Headroom", True), ("host again", False),
                           ("host + Headroom again", True)):  # fmt: skip
        results[name] = _mode(h, models, args.runs, args.steps, headroom, args.width)
    card = torch.cuda.get_device_name()
    lines += ["", f"machine: {card}, torch {torch.__version__}, Python {platform.python_version()}", ""]
    lines += ["| mode | run times (s) | GiB read into host buffers per run |", "|---|---|---|"]
    for name, rows in results.items():
        lines.append(f"| {name} | {', '.join(f'{t:.2f}' for t, _ in rows)} | "
                     f"{', '.join(f'{b / GiB:.2f}' for _, b in rows)} |")  # fmt: skip
    steady = {
        n: statistics.median(t for rows in (results[n], results[f"{n} again"]) for t, _ in rows[1:])
        for n in ("host", "host + Headroom")
    }
    ratio = steady["host"] / steady["host + Headroom"]
    verdict = "PASS" if ratio >= TARGET else "FAIL"
    kept = steady["host + Headroom"]
    lines.append(
        f"\nmedian repeat run: host {steady['host']:.2f} s, with Headroom {kept:.2f} s "
        f"({ratio:.2f}x, target {TARGET}x): {verdict}"
    )
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    return 0 if ratio >= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
