"""What reading a disk component through its file costs a GPU host without DynamicVRAM (#31).

    python bench/read_through_gpu.py [--size realistic|tiny] [--repeats 5]
                                     [--out bench/results/read_through_gpu.md] [--cpu-smoke]

The host's low-VRAM layers keep their weights on the CPU and cast each to the GPU inside their forward
(comfy.ops' cast_bias_weight; here ``headroom_testing.cast_models.CastLinear``). On the disk tier those
weights are a file's mapping. Measured side by side in one process, on one model bound to one file, with
the page cache warm (each way runs once before it is timed), the best of ``--repeats`` forwards:
- pages: the stock cast, from the mapping's pages (a file truncated meanwhile: SIGBUS);
- through the file, pinned: Headroom's read-through hooks as installed on a CUDA host (``pin=True``);
- through the file, pageable: the same into pageable copies (what a CPU host's hooks make).
The ratios are against "pages"; the three outputs must be equal bit for bit. Without CUDA it prints why
and exits 0; ``--cpu-smoke`` runs the same on the CPU (it checks the script, its numbers say nothing).
"""

from __future__ import annotations

import argparse
import datetime
import platform
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from comfyui_headroom.memory.residency import read_through  # noqa: E402
from headroom_testing.cast_models import mapped_cast_model  # noqa: E402
from headroom_testing.harness import scratch_dir  # noqa: E402

# width, depth, tokens: "realistic" is Flux's 3072-wide linears in bf16 (18 MiB each, 1.7 GiB in all) at a
# few tokens, so the casts, not the matmuls, take the time (a low-VRAM layer's case)
SIZES = {"realistic": (3072, 96, 256), "tiny": (256, 8, 16)}
WAYS = (("pages", None), ("through the file, pinned", True), ("through the file, pageable", False))


def timed_forward(model: torch.nn.Module, x: torch.Tensor, repeats: int) -> tuple[float, torch.Tensor]:
    """The best wall time of ``repeats`` forwards (the device synchronised), and the output."""
    best, out = float("inf"), x
    for _ in range(repeats):
        if x.is_cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.inference_mode():
            out = model(x)
        if x.is_cuda:
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return best, out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", choices=sorted(SIZES), default="realistic")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--cpu-smoke", action="store_true")
    args = ap.parse_args(argv)
    cuda = torch.cuda.is_available()
    if not cuda and not args.cpu_smoke:
        print("read_through_gpu: no CUDA device here; --cpu-smoke runs the script on the CPU")
        return 0
    size = "tiny" if args.cpu_smoke else args.size
    width, depth, tokens = SIZES[size]
    device, dtype = ("cuda", torch.bfloat16) if cuda else ("cpu", torch.float32)
    model, mf = mapped_cast_model(scratch_dir("headroom-read-through-"), width, depth, dtype)
    nbytes = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    x = torch.randn(1, tokens, width, device=device, dtype=dtype)
    rows, outs = [], []
    for name, pin in WAYS:
        if pin is None:
            read_through.remove(model)
        else:
            read_through.install(model, pin=pin and cuda)
        timed_forward(model, x, 1)  # the page cache and the allocators warm
        seconds, out = timed_forward(model, x, args.repeats)
        rows.append((name, seconds))
        outs.append(out)
    read_through.remove(model)
    same = all(torch.equal(outs[0], o) for o in outs[1:])
    cpu_name = f"CPU ({platform.processor() or platform.machine()})"
    device_name = torch.cuda.get_device_name(0) if cuda else cpu_name
    base = rows[0][1]
    lines = [
        f"## {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC: {device_name}, "
        f"torch {torch.__version__}",
        "",
        f"Command: `python {' '.join(['bench/read_through_gpu.py', *sys.argv[1:]])}`",
        "",
        f"{depth} low-VRAM linears {width}x{width} ({str(dtype).removeprefix('torch.')}, "
        f"{nbytes / 2**30:.2f} GiB on the disk tier), {tokens} tokens; best of {args.repeats} forwards.",
        "",
        "| weights cast from | ms per forward | GB/s | time against pages |",
        "|---|---|---|---|",
    ]
    for name, seconds in rows:
        rate = nbytes / seconds / 1e9
        lines.append(f"| {name} | {seconds * 1e3:.1f} | {rate:.1f} | {seconds / base:.2f}x |")
    lines += ["", f"Outputs equal bit for bit: {same}.", ""]
    text = "\n".join(lines)
    print(text)
    if args.out and not args.cpu_smoke:
        with args.out.open("a", encoding="utf-8") as f:
            f.write("\n" + text)
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
