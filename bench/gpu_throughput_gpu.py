"""What this card reaches at the shapes diffusion models run (issue #26): the wall-time table's efficiency.

    python bench/gpu_throughput_gpu.py [--out bench/results/gpu_throughput.md] [--json FILE]
    python bench/gpu_throughput_gpu.py --device cpu --quick   # the same code on tiny shapes (a dry run)

Measures, with CUDA events after warm-up, the dense TFLOPS of: bf16 matmuls at a Flux block's and a Wan
14B block's shapes (tokens x hidden x 4 hidden, 720p video tokens x hidden x hidden), fp8 matmuls at
the same shapes (``torch._scaled_mm``, where the card has fp8 tensor cores), and bf16 attention
(``scaled_dot_product_attention``) at Flux's 1024x1024 and Wan's 480p-video sequence lengths. The card
is named by ``torch.cuda.get_device_name`` and looked up in memory/planning/gpus.py: each figure is also
given as a share of the card's published peak, and ``gpus.efficiency_from_kernels`` turns them into the
card's efficiency shares. ``--json`` writes them for ``scripts/gpu_efficiency.py merge``, which puts the
card in memory/data/gpu_efficiency.json, where the planner reads it. Without CUDA (and without
``--device cpu``) it says so and exits 0.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT.parent))

from comfyui_headroom.memory.planning.gpus import efficiency_from_kernels, find_gpu  # noqa: E402

# (label, tokens, in features, out features)
MATMULS = (
    ("Flux block MLP, 1024x1024", 4352, 3072, 12288),
    ("Wan 14B projection, 720p video", 32760, 5120, 5120),
)
# (label, heads, tokens, head dim)
ATTENTION = (("Flux, 1024x1024", 24, 4352, 128), ("Wan 14B, 832x480x33", 40, 14040, 128))
QUICK = 16  # --quick divides tokens and features by this


def _timed(fn: Callable[[], object], device: str, repeat: int) -> float:
    """Median seconds of ``fn`` after warm-up (CUDA events on a GPU, perf_counter on a CPU)."""
    for _ in range(2):
        fn()
    times = []
    for _ in range(repeat):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / 1000)
        else:
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
    return statistics.median(times)


def _fp8_supported(device: str) -> bool:
    if device != "cuda" or not hasattr(torch, "float8_e4m3fn") or not hasattr(torch, "_scaled_mm"):
        return False
    return torch.cuda.get_device_capability() >= (8, 9)


def measure(device: str, quick: bool, repeat: int) -> dict[str, list[dict[str, float | str]]]:
    div = QUICK if quick else 1
    dtype = torch.bfloat16
    out: dict[str, list[dict[str, float | str]]] = {"bf16_matmul": [], "fp8_matmul": [], "bf16_attention": []}
    for label, m, k, n in MATMULS:
        m, k, n = m // div, k // div, n // div
        a, b = torch.randn(m, k, device=device, dtype=dtype), torch.randn(k, n, device=device, dtype=dtype)
        seconds = _timed(lambda a=a, b=b: a @ b, device, repeat)
        out["bf16_matmul"].append({"shape": label, "tflops": 2 * m * k * n / seconds / 1e12})
        if _fp8_supported(device):
            a8, b8 = a.to(torch.float8_e4m3fn), b.t().contiguous().to(torch.float8_e4m3fn).t()
            one = torch.ones((), device=device)
            seconds = _timed(
                lambda a8=a8, b8=b8, one=one: torch._scaled_mm(a8, b8, one, one, out_dtype=dtype),
                device,
                repeat,
            )
            out["fp8_matmul"].append({"shape": label, "tflops": 2 * m * k * n / seconds / 1e12})
    for label, heads, tokens, dim in ATTENTION:
        tokens = tokens // div
        q, k_, v = (torch.randn(1, heads, tokens, dim, device=device, dtype=dtype) for _ in range(3))
        seconds = _timed(lambda q=q, k_=k_, v=v: F.scaled_dot_product_attention(q, k_, v), device, repeat)
        out["bf16_attention"].append(
            {"shape": label, "tflops": 4 * heads * tokens * tokens * dim / seconds / 1e12}
        )
    return out


def summary(card_name: str, measured: dict[str, list[dict[str, float | str]]]) -> dict[str, object]:
    """The card, its figures, and (for a card of the table) the efficiency shares they give."""
    best = {kind: max((float(r["tflops"]) for r in rows), default=0.0) for kind, rows in measured.items()}
    card = find_gpu(card_name)
    result: dict[str, object] = {
        "device": card_name,
        "card": card.name if card else None,
        "measured": measured,
    }
    result["best_tflops"] = best
    if card is not None and best["bf16_matmul"] and best["bf16_attention"]:
        eff = efficiency_from_kernels(card, best["bf16_matmul"], best["bf16_attention"], source="")
        result["efficiency"] = {"matmul": round(eff.matmul, 3), "attention": round(eff.attention, 3)}
        result["peak_share"] = {
            "bf16_matmul": best["bf16_matmul"] / card.bf16,
            "fp8_matmul": best["fp8_matmul"] / card.fp8 if card.fp8 and best["fp8_matmul"] else None,
            "bf16_attention": best["bf16_attention"] / card.bf16,
        }
    return result


def markdown(result: dict[str, object], command: str) -> str:
    rows = ["| kind | shape | TFLOPS |", "|---|---|---|"]
    for kind, entries in result["measured"].items():  # type: ignore[union-attr]
        for r in entries:
            rows.append(f"| {kind} | {r['shape']} | {float(r['tflops']):.1f} |")
    return "\n".join(
        [
            "# Matmul and attention throughput at diffusion shapes (bench/gpu_throughput_gpu.py)",
            "",
            f"Date {datetime.date.today()}, {platform.machine()}, torch {torch.__version__}, "
            f"device {result['device']} (table card: {result['card']}). Command: `{command}`",
            "",
            *rows,
            "",
            f"Share of the published peak: {result.get('peak_share')}",
            f"Efficiency shares for the wall time (gpus.efficiency_from_kernels): {result.get('efficiency')}",
            "",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "gpu_throughput.md")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures for the merge")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--quick", action="store_true", help="tiny shapes (the CPU dry run)")
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: nothing measured (run with --device cpu --quick for a dry run)")
        return 0
    name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    result = summary(name, measure(args.device, args.quick, args.repeat))
    text = markdown(result, " ".join(["python bench/gpu_throughput_gpu.py", *(argv or sys.argv[1:])]))
    print(text)
    if args.device == "cuda":
        args.out.write_text(text)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
