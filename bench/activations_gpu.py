"""Activation memory of one model call on a GPU vs the planner's prediction (issue #13).

    COMFYUI_ROOT=/path/to/ComfyUI python bench/activations_gpu.py [--out bench/results/activations.md]
        [--only flux wan21 ...] [--max-cells 200000] [--dry-run]

The same host classes, configurations and inputs as ``bench/activations.py`` (full width and depth,
random bf16 weights), run for real on CUDA: ``torch.cuda.max_memory_allocated`` during one call minus
what was allocated before it (weights) is the measured peak, the inputs included. It is compared with
``memory/planning/activations.py``'s prediction (measured CPU coefficients + its margin). Target: the
prediction is 0-15% above the measurement, never more than 5% under. ComfyUI's attention here is whatever the
host picks on this card (``attention_pytorch``, torch SDPA, on current NVIDIA cards); the row says so.
Without CUDA it says why and exits 0; ``--dry-run`` lists the cases and predictions without running.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import platform
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT.parent))

from comfyui_headroom.memory.planning.activations import (  # noqa: E402
    MARGIN,
    activation_bytes,
    predicted_peak,
)

MIB = 1 << 20


def prediction(case, size: tuple[int, int, int]) -> int:
    if case.text:
        return activation_bytes(case.family, "text_encoder", width=1, height=1, tokens=size[0])
    from activations import PLANNER

    family, dim = PLANNER.get(case.family, (case.family, None))
    return predicted_peak(family, size[0], size[1], size[2], batch=1, dtype="bf16", dim=dim)


def measure_cuda(case, size: tuple[int, int, int]) -> int:
    with torch.device("cuda"):
        model = case.build(torch.bfloat16, "cuda", False)
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.02)
    # cuBLAS and SDPA workspaces stay allocated after their first use: make them before the baseline
    q = torch.randn(1, 2, 64, 64, device="cuda", dtype=torch.bfloat16)
    torch.nn.functional.scaled_dot_product_attention(q, q, q) @ q.transpose(-1, -2)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    with torch.no_grad():
        out = case.call(model, case, size, torch.bfloat16, "cuda", 1)
        del out
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    del model
    gc.collect()
    torch.cuda.empty_cache()
    return peak


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "activations.md")
    parser.add_argument("--only", nargs="+", help="families to run (default: all)")
    parser.add_argument("--max-cells", type=int, default=400_000, help="skip sizes above this many cells")
    parser.add_argument("--dry-run", action="store_true", help="list cases and predictions only")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available() and not args.dry_run:
        print("no CUDA device: this benchmark needs a GPU (bench/activations.py measures on the CPU)")
        return 0
    import activations as bench  # bench/activations.py, the cases and the host import

    ops = bench.import_host(cpu=not torch.cuda.is_available())
    from comfy.ldm.modules import attention

    chosen = [c for c in bench.cases(ops) if not args.only or c.family in args.only]
    started = time.time()
    rows, worst = [], []
    for case in chosen:
        for size in case.sizes:
            cells = bench.cells(case, size)
            if cells > args.max_cells:
                continue
            pred = prediction(case, size)
            measured = 0 if args.dry_run else measure_cuda(case, size)
            ratio = pred / measured - 1 if measured else float("nan")
            ok = "-" if not measured else ("yes" if -0.05 <= ratio <= 0.15 else "NO")
            label = size[0] if case.text else "x".join(map(str, size))
            rows.append(
                f"| {case.family} | {case.label} | {label} | {cells} | {measured / MIB:.1f} "
                f"| {pred / MIB:.1f} | {ratio * 100:+.1f}% | {ok} |"
            )
            if measured:
                worst.append(ratio)
            print(rows[-1], flush=True)
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "none (dry run)"
    lines = [
        "",
        f"## GPU check, {datetime.date.today().isoformat()}",
        "",
        f"- machine: {device}, {platform.machine()}, torch {torch.__version__}; attention: "
        f"`{attention.optimized_attention.__name__}`",
        f"- command: `python {' '.join([sys.argv[0], *(argv if argv is not None else sys.argv[1:])])}`",
        f"- bf16, batch 1, full models with random weights; prediction = CPU coefficients + {MARGIN:.0%}; "
        f"run took {time.time() - started:.0f} s",
        "- target: prediction 0-15% above the measured `max_memory_allocated` delta, never >5% under",
        "",
        "| family | model | size | cells | measured MiB | predicted MiB | over | in target |",
        "|---|---|---|---:|---:|---:|---:|---|",
        *rows,
        "",
    ]
    if worst:
        lines.insert(-1, f"Range of prediction/measured - 1: {min(worst):+.1%} .. {max(worst):+.1%}")
    if not args.dry_run:
        with args.out.open("a") as f:
            f.write("\n".join(lines) + "\n")
        print(f"appended to {args.out}")
    else:
        print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
