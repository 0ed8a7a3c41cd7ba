"""GGUF streaming on a GPU (#15.4): a Wan-14B-shaped GGUF model loaded by ComfyUI-GGUF, its forward step
resident on the GPU against Headroom's block streamer at budgets keeping 0% and 50% of the blocks.

    python bench/gguf_stream_gpu.py [--out bench/results/gguf_stream_gpu.md] [--blocks 6] [--qtype Q8_0]

The model has Wan 2.1 14B's block shapes (dim 5120, FFN 13824, 40 heads), fewer blocks, random weights,
quantized as ComfyUI-GGUF's convert.py does (tests/headroom_testing/tiny_gguf.py) and loaded by the pack's
own UnetLoaderGGUF: its layers dequantize each weight in forward, so a streamed block uploads the
quantized bytes (about half of fp16 at Q8_0) and the step's bound is max(compute, those bytes / the
measured pinned bandwidth). Reported per budget: the step, its ratio to the resident step and to that
bound, the bytes uploaded per step, and the step's peak device memory. Needs CUDA, a current ComfyUI
(COMFYUI_ROOT), ComfyUI-GGUF (HEADROOM_GGUF_PACK or ../packs/ComfyUI-GGUF) and the gguf package;
without one it says which and exits 0. ``--device cpu --tiny`` runs the same path small on a CPU
(a smoke test of the script, not a measurement).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import importlib.util
import os
import statistics
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from comfyui_headroom.memory.streaming import BlockStreamer, choose_streaming, discover_blocks  # noqa: E402
from comfyui_headroom.memory.streaming.discovery import module_bytes  # noqa: E402

WAN14B = {"model_type": "t2v", "dim": 5120, "ffn_dim": 13824, "num_heads": 40}
TINY = {"model_type": "t2v", "dim": 256, "ffn_dim": 512, "num_heads": 2}
SHARES = (0.0, 0.5)


def missing(device: str) -> str | None:
    """Why this benchmark cannot run here, or None."""
    if device == "cuda" and not torch.cuda.is_available():
        return "no CUDA device here; nothing measured (this benchmark needs a GPU)"
    if importlib.util.find_spec("gguf") is None:
        return "the gguf package is missing (pip install gguf)"
    root = os.environ.get("COMFYUI_ROOT")
    if not root or not (Path(root) / "comfy" / "ldm" / "wan").is_dir():
        return "needs COMFYUI_ROOT set to a current ComfyUI (with Wan)"
    if pack_dir() is None:
        return (
            "ComfyUI-GGUF not found: git clone https://github.com/city96/ComfyUI-GGUF, set HEADROOM_GGUF_PACK"
        )
    return None


def pack_dir() -> Path | None:
    env = os.environ.get("HEADROOM_GGUF_PACK")
    path = Path(env).expanduser() if env else ROOT.parent / "packs" / "ComfyUI-GGUF"
    return path if (path / "nodes.py").is_file() else None


class _Random(Mapping):
    """A WanModel state dict made one tensor at a time (the writer quantizes each as it comes)."""

    def __init__(self, shapes: dict[str, torch.Size]) -> None:
        self.shapes, self.gen = shapes, torch.Generator().manual_seed(0)

    def __getitem__(self, key: str) -> torch.Tensor:
        return torch.randn(self.shapes[key], generator=self.gen) * 0.02

    def __iter__(self) -> Iterator[str]:
        return iter(self.shapes)

    def __len__(self) -> int:
        return len(self.shapes)


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _steps(model: torch.nn.Module, inputs: tuple, device: str, steps: int) -> list[float]:
    times = []
    with torch.inference_mode():
        for _ in range(steps + 1):  # the first one warms up
            _sync(device)
            began = time.perf_counter()
            model(*inputs)
            _sync(device)
            times.append(time.perf_counter() - began)
    return times[1:]


def run(args: argparse.Namespace) -> list[str]:
    from headroom_testing.harness import Host, scratch_dir
    from headroom_testing.tiny_gguf import write_gguf

    work = scratch_dir("headroom-gguf-bench-")
    host = Host(Path(os.environ["COMFYUI_ROOT"]), work, cpu=args.device == "cpu")
    link = host.pack_dir.parent / "ComfyUI-GGUF"
    link.symlink_to(pack_dir().resolve(), target_is_directory=True)  # type: ignore[union-attr]
    loaded = host.nodes.load_custom_node(str(link))
    if not (asyncio.run(loaded) if asyncio.iscoroutine(loaded) else loaded):
        raise RuntimeError("ComfyUI-GGUF did not load")
    import comfy.ops
    from comfy.ldm.wan.model import WanModel

    config = {**(TINY if args.tiny else WAN14B), "num_layers": args.blocks}
    with torch.device("meta"):
        shapes = {
            k: v.shape
            for k, v in WanModel(**config, operations=comfy.ops.disable_weight_init).state_dict().items()
        }
    name = f"wan14b_shaped_{args.qtype.lower()}.gguf"
    write_gguf(host.models_dir / "diffusion_models" / name, _Random(shapes), "wan", args.qtype)
    host.register_models_dir(host.models_dir)
    (patcher,) = host.node_class("UnetLoaderGGUF")().load_unet(name)
    model = patcher.model.diffusion_model
    dtype = torch.float32 if args.device == "cpu" else torch.bfloat16
    gen = torch.Generator().manual_seed(1)
    frames, h, w = (1, 8, 8) if args.tiny else (1, 60, 104)  # one 480x832 frame
    inputs = tuple(
        t.to(args.device, dtype)
        for t in (
            torch.randn(1, 16, frames, h, w, generator=gen),
            torch.tensor([500.0]),
            torch.randn(1, 512 if not args.tiny else 16, 4096, generator=gen),
        )
    )
    layout = discover_blocks(model)
    blocks = layout.block_bytes()
    rest = module_bytes(model) - sum(blocks)
    logical = sum(p.numel() for _, b in layout.blocks for p in b.parameters())  # GGMLTensor: stored numel

    model.to(args.device)
    if args.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    resident = statistics.median(_steps(model, inputs, args.device, args.steps))
    peak = torch.cuda.max_memory_allocated() if args.device == "cuda" else 0
    model.to("cpu")
    rows = [f"| resident | {resident:.4f} | 1.00 | - | 0 | {peak / 2**30:.2f} |"]
    for share in SHARES:
        budget = rest + int(share * sum(blocks)) + 2 * max(blocks) + 1
        streamer = BlockStreamer(model, layout, choose_streaming(blocks, rest, budget), args.device)
        streamer.attach()
        try:
            if args.device == "cuda":
                torch.cuda.reset_peak_memory_stats()
            step = statistics.median(_steps(model, inputs, args.device, args.steps))
            peak = torch.cuda.max_memory_allocated() if args.device == "cuda" else 0
            summary = streamer.summary()
        finally:
            streamer.detach(release=True)
        bound = summary["bound_s"]
        per_step = summary["streamed_bytes"]
        rows.append(
            f"| stream, {100 * share:.0f}% resident | {step:.4f} | {step / resident:.2f} | "
            f"{step / bound if bound else float('nan'):.2f} | {per_step / 2**20:.1f} | {peak / 2**30:.2f} |"
        )
    name = torch.cuda.get_device_name() if args.device == "cuda" else "CPU (smoke test, not a measurement)"
    return [
        f"{name}; ComfyUI {host.version}; {args.blocks} Wan-14B-shaped blocks at {args.qtype} "
        f"({sum(blocks) / 2**30:.2f} GiB of blocks as stored, {rest / 2**20:.0f} MiB rest; "
        f"{logical} stored elements); median of {args.steps} forward steps",
        "",
        "| run | step s | vs resident | vs bound | uploaded MiB/step | peak GiB |",
        "|---|---|---|---|---|---|",
        *rows,
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "gguf_stream_gpu.md")
    parser.add_argument("--blocks", type=int, default=6)
    parser.add_argument("--qtype", choices=("Q8_0", "Q4_K"), default="Q8_0")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--tiny", action="store_true", help="tiny widths (with --device cpu: a smoke test)")
    args = parser.parse_args(argv)
    why = missing(args.device)
    if why is not None:
        print(f"gguf_stream_gpu: {why}")
        return 0
    lines = [f"# GGUF streaming vs resident ({datetime.datetime.now():%Y-%m-%d %H:%M})", "", *run(args)]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.device == "cuda":
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
