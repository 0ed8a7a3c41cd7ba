"""Prefetch on a side stream on a GPU (issue #17, item 2): two nodes, the second one's model uploaded
while the first computes; how much of the upload stays visible.

    python bench/prefetch_gpu.py [--size sd15|tiny] [--dtype fp32|fp16] [--out bench/results/prefetch_gpu.md]
                                 [--cpu-smoke]

The component is an SD1.5-architecture UNet (random weights; 3.4 GB in fp32) loaded by the host's own
loader; the first node's model is the test suite's tiny UNet, and its compute is a matmul loop sized to
three times the component's transfer. Measured in the same process:
- transfer: the host's own synchronous ``load_models_gpu`` of the component (best of two), from RAM;
- gap: from the first node's end (its compute synchronised) to the moment the second node's first
  compute may run: the controller's boundaries (the upload lands in the host's accounting), the node's
  own ``load_models_gpu``, and the compute stream's wait for the side stream's copies;
- peak: ``max_memory_allocated`` over both nodes, against the plan's budget.
Passes when gap <= 10% of transfer, peak <= budget, and the log shows the upload applied on the side
stream. Without CUDA it prints why and exits 0; ``--cpu-smoke`` runs the same sequence on the CPU with a
stand-in stream (it checks the script, its numbers say nothing).
"""

from __future__ import annotations

import argparse
import copy
import datetime
import sys
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from headroom_testing.harness import Host, find_host_root, scratch_dir  # noqa: E402
from headroom_testing.tiny_models import TINY_SD15_UNET, _init_state_dict, _on_meta, _save  # noqa: E402

SD15_UNET = TINY_SD15_UNET | {
    "num_res_blocks": [2, 2, 2, 2],
    "channel_mult": [1, 2, 4, 4],
    "transformer_depth": [1, 1, 1, 1, 1, 1, 0, 0],
    "transformer_depth_output": [1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0],
}
GiB = 2**30


class _SmokeEvent:  # --cpu-smoke: the copies ran at once, as if overlapped with the node's compute
    def query(self) -> bool:
        return True

    def wait(self) -> None:
        pass


class _SmokeStream:
    def copy(self, pairs: Any) -> _SmokeEvent:
        for dst, src in pairs:
            dst.copy_(src)
        return _SmokeEvent()


class _Handle:
    def __init__(self, patcher: Any) -> None:
        self.patcher, self.module = patcher, patcher.model
        self.files, self.mapped_names, self.residency = None, {}, "auto"

    def live_clones(self) -> list[Any]:
        return []


def _build(host: Host, name: str, config: dict, seed: int, dtype: torch.dtype) -> Any:
    from comfy.ldm.modules.diffusionmodules.openaimodel import UNetModel

    unet = _on_meta(lambda: UNetModel(**copy.deepcopy(config)))
    path = _save(_init_state_dict(unet, seed, dtype), host.models_dir, "diffusion_models", name, "bench")
    return host.pack_module("nodes.host.loading")._load_diffusion_model(path, "default")


def _sync(cuda: bool) -> None:
    if cuda:
        torch.cuda.synchronize()


def _compute(device: torch.device, seconds: float, cuda: bool) -> int:
    """A matmul loop on the compute stream of about ``seconds``; returns its iterations."""
    n = 4096 if cuda else 256
    a = torch.randn(n, n, device=device, dtype=torch.float16 if cuda else torch.float32)
    _sync(cuda)
    t, iters = time.perf_counter(), 0
    while time.perf_counter() - t < seconds / 4:  # calibrate on a quarter
        a = torch.tanh(a @ a)
        iters += 1
        _sync(cuda)
    total = max(1, iters * 4)
    t = time.perf_counter()
    for _ in range(total):
        a = torch.tanh(a @ a)
    _sync(cuda)
    return total


def run(args: argparse.Namespace, cuda: bool) -> dict[str, Any]:
    host = Host(find_host_root(), scratch_dir("headroom-prefetch-"), cpu=not cuda)
    mm = host.model_management
    dtype = torch.float32 if args.dtype == "fp32" else torch.float16
    current = _build(host, "prefetch_current.safetensors", TINY_SD15_UNET, 31, dtype)
    big = SD15_UNET if args.size == "sd15" else TINY_SD15_UNET
    component = _build(host, "prefetch_next.safetensors", big, 32, dtype)
    prefetch = host.pack_module("nodes.host.prefetch")
    device = mm.get_torch_device()
    ops = prefetch.HostPrefetch() if cuda else prefetch.HostPrefetch(_SmokeStream(), torch.device("cpu"))
    handles = {"a": _Handle(current), "b": _Handle(component)}
    sizes = {k: ops.size(h) for k, h in handles.items()}

    transfers = []
    for _ in range(2):  # the host's own synchronous load of the component, from RAM
        mm.unload_all_models()
        mm.soft_empty_cache()
        _sync(cuda)
        t = time.perf_counter()
        mm.load_models_gpu([component])
        _sync(cuda)
        transfers.append(time.perf_counter() - t)
    transfer = min(transfers)
    mm.unload_all_models()
    mm.soft_empty_cache()

    wl = host.pack_module("memory.planning.workload")
    cm = host.pack_module("memory.planning.costmodel")
    residency = host.pack_module("memory.residency")
    activation = 3 * (4096 * 4096 * 2) if cuda else 0
    workload = wl.Workload(
        (wl.Component("a", "current", sizes["a"]), wl.Component("b", "next", sizes["b"])),
        (
            wl.Step("1", "compute", ("a",), activation=activation, compute_s=3 * transfer),
            # it uses both (a sampler with a ControlNet, say): the gap holds no eviction, only the landing
            wl.Step("2", "next", ("a", "b"), activation=activation, compute_s=1.0),
        ),
    )
    budget = cm.Budget(vram=sizes["a"] + sizes["b"] + activation + GiB // 2, ram=64 * GiB, pinned=16 * GiB)
    plan = host.pack_module("memory.planning.planner").plan(workload, budget, cm.Hardware.pcie(4))
    controller = residency.Controller(host.pack_module("nodes.host.residency")._HostOps())
    controller.prefetcher = host.pack_module("memory.residency.prefetch").Prefetcher(ops)
    for k, h in handles.items():
        controller.register(k, k, h)
    controller.runs["p"] = residency.Run("p", workload, plan, time.monotonic())
    if cuda:
        torch.cuda.reset_peak_memory_stats()

    controller.node_started("p", "1")  # loads the current model, starts the upload on the side stream
    iters = _compute(device, 3 * transfer, cuda)
    ended = time.perf_counter()  # the first node's end: its compute is done
    if args.profile:
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
    controller.node_finished("p", "1")
    controller.node_started("p", "2")
    mm.load_models_gpu([component])  # the node's own load
    if args.profile:
        prof.disable()
        prof.print_stats("cumulative")
    first = next(iter(component.model.parameters()))
    _sync(cuda)  # the compute stream has waited for the copies: the first compute may run now
    gap = time.perf_counter() - ended
    checksum = float(first.detach().float().sum())  # the first compute
    controller.node_finished("p", "2")
    controller.prompt_finished("p")
    peak = torch.cuda.max_memory_allocated() if cuda else None
    events = [e for e in controller.log("p") if e.action == "prefetch"]
    applied = any(e.kind == "applied" and "side stream" in e.detail for e in events)
    mm.unload_all_models()
    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "device": torch.cuda.get_device_name(0) if cuda else "CPU (smoke: numbers say nothing)",
        "host": host.version, "torch": torch.__version__, "size": args.size, "dtype": args.dtype,
        "component_bytes": sizes["b"], "transfer_s": transfer, "gap_s": gap, "ratio": gap / transfer,
        "peak": peak, "budget": budget.vram, "iters": iters, "checksum": checksum,
        "planned_prefetch": plan.steps[0].prefetch_ids == ["b"], "applied_on_side_stream": applied,
        "events": [f"{e.node_id} {e.kind} {e.action}: {e.detail}" for e in events],
    }  # fmt: skip


def report(r: dict[str, Any]) -> tuple[str, bool]:
    within = r["peak"] is None or r["peak"] <= r["budget"]
    ok = r["ratio"] <= 0.10 and within and r["applied_on_side_stream"] and r["planned_prefetch"]
    peak = "n/a" if r["peak"] is None else f"{r['peak'] / GiB:.2f} GiB"
    lines = [
        f"## Prefetch on a side stream ({r['date']})",
        "",
        f"{r['device']}, host {r['host']}, torch {r['torch']}; component: SD1.5-architecture UNet "
        f"({r['size']}, {r['dtype']}, {r['component_bytes'] / GiB:.2f} GiB)",
        "",
        "| transfer (sync load) | gap: node end to next compute | gap / transfer | peak | budget | result |",
        "|---|---|---|---|---|---|",
        f"| {r['transfer_s'] * 1e3:.1f} ms | {r['gap_s'] * 1e3:.1f} ms | {r['ratio']:.1%} | {peak} "
        f"| {r['budget'] / GiB:.2f} GiB | {'PASS' if ok else 'FAIL'} (target <= 10%, peak <= budget) |",
        "",
        *(f"- {e}" for e in r["events"]),
    ]
    return "\n".join(lines) + "\n", ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=("sd15", "tiny"), default=None, help="sd15 on CUDA, tiny on CPU")
    parser.add_argument("--dtype", choices=("fp32", "fp16"), default="fp32")
    parser.add_argument("--out", type=Path, default=None, help="append the results here (markdown)")
    parser.add_argument("--profile", action="store_true", help="profile the boundary (skews the gap)")
    parser.add_argument("--cpu-smoke", action="store_true", help="run the sequence on the CPU (no numbers)")
    args = parser.parse_args()
    cuda = torch.cuda.is_available()
    if not cuda and not args.cpu_smoke:
        print("prefetch_gpu: skipped: no CUDA device (the upload needs a CUDA side stream to overlap)")
        return 0
    args.size = args.size or ("sd15" if cuda else "tiny")
    text, ok = report(run(args, cuda))
    print(text)
    if args.out:
        with args.out.open("a", encoding="utf-8") as f:
            f.write("\n" + text)
    return 0 if ok or not cuda else 1


if __name__ == "__main__":
    sys.exit(main())
