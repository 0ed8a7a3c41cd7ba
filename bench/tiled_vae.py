"""Tiled VAE decode benchmark (issue #5): exactness, seams, compute and memory, side by side.

    python bench/tiled_vae.py [--sizes tiny,realistic] [--vaes sd,flux,wan21] [--out FILE] [--rss]
    COMFYUI_ROOT=/path/to/ComfyUI python bench/tiled_vae.py ...     # a current host (Wan needs one)

For each VAE the host builds (random weights, tests/headroom_testing/tiny_models.py) and each size:
the host's full decode; Headroom exact at the default tile (the "auto" budget) and at a small budget
that forces many tiles; Headroom fast; the host's own tiled decode (what VAEDecodeTiled calls). Reported:
max abs diff and seam energy vs the full decode, time / full-decode time (all in this one run), and the
per-tile activation peak measured with PeakLiveBytes vs the engine's prediction and the budget. With
``--rss`` the whole-process peak RSS of a full and a tiled decode is measured in child processes.
Runs on the CPU in float32; uses CUDA when present (then also bfloat16, and max_memory_allocated).

Seam energy: the mean |gradient| of the error image (method - full decode) on the method's tile
boundary lines, divided by the mean |gradient| of the full decode. 0 means no seam at all.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from comfyui_headroom.memory.tiled_vae import DecodeOptions, make_tiled_decoder  # noqa: E402
from comfyui_headroom.memory.tiled_vae.budget import CPU_AUTO_ACTIVATION_BYTES  # noqa: E402
from comfyui_headroom.memory.tiled_vae.groupnorm import GroupStats, apply_group_norm  # noqa: E402
from comfyui_headroom.memory.tiled_vae.kl import KLTiledDecoder, estimate_head, estimate_stage  # noqa: E402
from comfyui_headroom.memory.tiled_vae.measure import PeakLiveBytes  # noqa: E402
from comfyui_headroom.memory.tiled_vae.tiles import spans  # noqa: E402
from headroom_testing.harness import Host, find_host_root  # noqa: E402

MiB = 1 << 20
# Latent shapes: (batch, channels, [frames,] height, width); channels are filled in per VAE.
SIZES = {
    "cpu": {
        "tiny": {"image": (24, 20), "video": (2, 17, 8)},
        "realistic": {"image": (64, 64), "video": (2, 32, 32)},  # 512x512; 5 frames of 256x256
    },
    "cuda": {
        "tiny": {"image": (32, 32), "video": (2, 32, 32)},
        "realistic": {"image": (128, 128), "video": (9, 60, 104)},  # 1024x1024; 33 frames of 832x480
    },
}
SMALL_BUDGET = 256 * MiB  # activations: forces many tiles at the realistic sizes


def build_vaes(host: Host, names: list[str]) -> dict[str, Any]:
    import comfy.sd
    import comfy.utils

    from headroom_testing.tiny_models import (
        build_tiny_vae,
        build_wan21_vae,
        flux_vae_state_dict,
        supported_builders,
    )

    vaes: dict[str, Any] = {}
    if "sd" in names:
        path = build_tiny_vae(host.models_dir, dtype=torch.float32)
        vaes["sd"] = comfy.sd.VAE(sd=comfy.utils.load_torch_file(str(path)))
    if "flux" in names and not host.legacy:
        vaes["flux"] = comfy.sd.VAE(sd=flux_vae_state_dict(seed=1))
    if "wan21" in names and "build_wan21_vae" in supported_builders():
        path = build_wan21_vae(host.models_dir, dtype=torch.float32)
        vaes["wan21"] = comfy.sd.VAE(sd=comfy.utils.load_torch_file(str(path)))
    return vaes


def timed(fn: Any) -> tuple[Any, float]:
    sync()
    start = time.perf_counter()
    out = fn()
    sync()
    return out, time.perf_counter() - start


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def seam_energy(out: torch.Tensor, full: torch.Tensor, rows: list[int], cols: list[int]) -> float:
    """Mean |gradient| of the error across the given boundary lines / mean |gradient| of the image."""
    err = (out - full).float()
    scale = (full[..., 1:, :] - full[..., :-1, :]).abs().mean() + (
        full[..., 1:] - full[..., :-1]
    ).abs().mean()
    parts = [(err[..., r, :] - err[..., r - 1, :]).abs().mean() for r in rows if 0 < r < err.shape[-2]]
    parts += [(err[..., c] - err[..., c - 1]).abs().mean() for c in cols if 0 < c < err.shape[-1]]
    if not parts:
        return 0.0
    return float(torch.stack(parts).mean() / (scale / 2))


def boundaries(size: int, tile: int) -> list[int]:
    return [a for a, _ in spans(size, tile)][1:]


def host_tiled(host: Host, vae: Any, z: torch.Tensor) -> tuple[torch.Tensor, list[int], list[int]]:
    """What the stock VAEDecodeTiled does with its defaults (512 px tiles, 64 px overlap)."""
    compression = 8
    tile, overlap = 512 // compression, 64 // compression
    if z.ndim == 5:
        # the node's defaults for video: 64 frames, 8 overlap, 256/compression spatial in the fallback
        out = vae.decode_tiled(z, tile_x=tile, tile_y=tile, overlap=overlap, tile_t=16, overlap_t=2)
    else:
        out = vae.decode_tiled(z, tile_x=tile, tile_y=tile, overlap=overlap)
    out = out.movedim(-1, 1) if out.ndim == 4 else out.movedim(-1, 1)
    stride = (tile - overlap) * compression
    rows = list(range(stride, z.shape[-2] * compression, stride))
    cols = list(range(stride, z.shape[-1] * compression, stride))
    return out, rows, cols


def options(vae: Any, device: torch.device, dtype: torch.dtype, **kw: Any) -> DecodeOptions:
    import comfy.ldm.modules.diffusionmodules.model as model_module

    return DecodeOptions(device, dtype, act=model_module.nonlinearity, pin=device.type == "cuda", **kw)


def headroom(vae: Any, z: torch.Tensor, device: torch.device, dtype: torch.dtype, **kw: Any) -> tuple:
    engine = make_tiled_decoder(vae.first_stage_model, options(vae, device, dtype, **kw))
    with torch.no_grad():
        raw, report = engine.decode(z)
    return vae.process_output(raw), report, engine


def final_grid(report: Any, engine: Any, z: torch.Tensor) -> tuple[list[int], list[int]]:
    name, tile, _ = report.stages[-1]
    scale = 8 if isinstance(engine, KLTiledDecoder) else engine.scale
    step = tile if isinstance(engine, KLTiledDecoder) else tile * scale
    height, width = z.shape[-2] * 8, z.shape[-1] * 8
    return boundaries(height, step), boundaries(width, step)


def tile_peaks(engine: Any, z: torch.Tensor, dtype: torch.dtype, device: torch.device) -> tuple[int, int]:
    """Measured (PeakLiveBytes) and predicted activation peak of the largest tile of any stage."""
    bytes_ = torch.empty((), dtype=dtype).element_size()
    if isinstance(engine, KLTiledDecoder):
        worst_measured = worst_predicted = 0
        hw = (z.shape[-2], z.shape[-1])
        for stage in engine.stages:
            tile = engine.stage_tile(stage, hw, bytes_)
            side = min(tile + 2 * stage.halo, max(hw) * 2**stage.level)
            crops = [torch.randn(1, c, side, side, device=device, dtype=dtype) for c in stage.in_channels]
            groups = stage.norm.num_groups
            stats = GroupStats(torch.zeros(1, groups), torch.ones(1, groups))
            with torch.no_grad(), PeakLiveBytes(device.type) as meter:
                h = apply_group_norm(
                    crops[0], stats, stage.norm.weight, stage.norm.bias, engine.options.exact
                )
                out = stage.body(h, *crops[1:])
                del h, out
            worst_measured = max(worst_measured, meter.peak)
            worst_predicted = max(
                worst_predicted, estimate_stage(stage, side - 2 * stage.halo, bytes_, engine.options.exact)
            )
        with torch.no_grad(), PeakLiveBytes(device.type) as meter:
            engine._head(z.to(device, dtype))
        channels = engine.decoder.mid.block_1.in_channels
        head_predicted = z.shape[0] * estimate_head(hw, channels, bytes_)
        return max(worst_measured, meter.peak), max(worst_predicted, head_predicted)
    # Wan: one tile of one batch item through all frames, cache included
    tile = engine.latent_tile((z.shape[-2], z.shape[-1]), bytes_)
    small = z[..., : min(z.shape[-2], tile + 2 * engine.halo), : min(z.shape[-1], tile + 2 * engine.halo)]
    with torch.no_grad():
        parked = engine._head(small.to(device, dtype), _NoProgress())
    out = torch.empty(
        1, 3, 1 + engine.time_factor * (small.shape[2] - 1), *(d * engine.scale for d in small.shape[-2:])
    )
    with torch.no_grad(), PeakLiveBytes(device.type) as meter:
        engine._tiles(parked, 0, max(small.shape[-2:]), out, _NoProgress())
    return meter.peak, engine.tile_bytes(tile, bytes_, tuple(small.shape[-2:]))


class _NoProgress:
    def step(self, units: int = 1) -> None:
        pass


def rss_child(args: argparse.Namespace) -> None:
    """One decode in a fresh process; prints the peak RSS growth over the loaded-model baseline."""
    host = Host(find_host_root(), Path(tempfile.mkdtemp()))
    vae = build_vaes(host, [args.rss_child])[args.rss_child]
    z = make_latent(args.rss_child, json.loads(args.shape))
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    with torch.no_grad():
        if args.method == "full":
            vae.first_stage_model.decode(z)
            predicted = 0
        else:
            _, report, _ = headroom(
                vae, z, torch.device("cpu"), torch.float32, budget_bytes=CPU_AUTO_ACTIVATION_BYTES
            )
            predicted = report.predicted_peak_bytes
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"rss_growth": peak - base, "predicted_tile": predicted}))


def make_latent(name: str, dims: list[int]) -> torch.Tensor:
    channels = {"sd": 4, "flux": 16, "wan21": 16}[name]
    return torch.randn((1, channels, *dims), generator=torch.Generator().manual_seed(0))


def run(args: argparse.Namespace) -> str:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    host = Host(find_host_root(), Path(tempfile.mkdtemp()))
    if device.type == "cuda":
        pass  # the harness forces --cpu; on a GPU machine run the engine on CUDA with the same modules
    vaes = build_vaes(host, args.vaes.split(","))
    dtypes = [torch.float32] + ([torch.bfloat16] if device.type == "cuda" else [])
    rows = []
    for name, vae in vaes.items():
        vae.first_stage_model.to(device)
        for size in args.sizes.split(","):
            dims = SIZES[device.type][size]["video" if name.startswith("wan") else "image"]
            z = make_latent(name, list(dims))
            for dtype in dtypes:
                vae.first_stage_model.to(dtype)
                zd = z.to(device, dtype)
                with torch.no_grad():
                    full, t_full = timed(
                        lambda vae=vae, zd=zd: vae.process_output(vae.first_stage_model.decode(zd).float())
                    )  # noqa: E501
                    again = (
                        vae.process_output(vae.first_stage_model.decode(zd).float())
                        if dtype != torch.float32
                        else full
                    )
                spread = (again - full).abs().max().item()
                full = full.cpu()
                label = f"{name} {tuple(z.shape)} {str(dtype).replace('torch.', '')}"
                runs = {
                    "exact, auto budget": {
                        "budget_bytes": CPU_AUTO_ACTIVATION_BYTES if device.type == "cpu" else None
                    },
                    f"exact, {SMALL_BUDGET // MiB} MiB": {"budget_bytes": SMALL_BUDGET},
                    f"fast, {SMALL_BUDGET // MiB} MiB": {
                        "budget_bytes": SMALL_BUDGET,
                        "exact": False,
                        "stats": "merge",
                    },
                }
                for run_name, kw in runs.items():
                    if device.type == "cuda" and kw.get("budget_bytes") is None:
                        free, _ = torch.cuda.mem_get_info()
                        kw["budget_bytes"] = int(free * 0.8)
                    if device.type == "cuda":
                        torch.cuda.reset_peak_memory_stats()
                        base = torch.cuda.memory_allocated()
                    (out, report, engine), t = timed(
                        lambda vae=vae, zd=zd, dtype=dtype, kw=kw: headroom(vae, zd, device, dtype, **kw)
                    )  # noqa: E501
                    out = out.cpu()
                    rows_b, cols_b = final_grid(report, engine, z)
                    measured, predicted = tile_peaks(engine, z, dtype, device)
                    if device.type == "cuda":
                        measured = torch.cuda.max_memory_allocated() - base
                    rows.append({
                        "case": label, "method": f"Headroom {run_name}", "tiles": report.max_tiles_in_a_stage,
                        "max_abs_diff": (out - full).abs().max().item(),
                        "seam": seam_energy(out, full, rows_b, cols_b),
                        "time_ratio": t / t_full, "peak_MiB": measured / MiB,
                        "predicted_MiB": predicted / MiB, "budget_MiB": kw["budget_bytes"] / MiB,
                        "spread": spread,
                    })  # fmt: skip
                    print(rows[-1], flush=True)
                with torch.no_grad():
                    (tiled, rows_h, cols_h), t = timed(lambda vae=vae, zd=zd: host_tiled(host, vae, zd))
                tiled = tiled.cpu().float().reshape(full.shape)
                rows.append({
                    "case": label, "method": "host decode_tiled (VAEDecodeTiled defaults)", "tiles": None,
                    "max_abs_diff": (tiled - full).abs().max().item(),
                    "seam": seam_energy(tiled, full, rows_h, cols_h),
                    "time_ratio": t / t_full, "peak_MiB": None, "predicted_MiB": None, "budget_MiB": None,
                    "spread": spread,
                })  # fmt: skip
                print(rows[-1], flush=True)
                rows.append({"case": label, "method": "full decode (s)", "time": t_full})
        vae.first_stage_model.to("cpu", torch.float32)
    rss = []
    if args.rss:
        for name in vaes:
            dims = SIZES[device.type]["realistic"]["video" if name.startswith("wan") else "image"]
            for method in ("full", "headroom"):
                cmd = [
                    sys.executable,
                    __file__,
                    "--rss-child",
                    name,
                    "--shape",
                    json.dumps(list(dims)),
                    "--method",
                    method,
                ]
                out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=os.environ.copy())
                rss.append((name, dims, method, json.loads(out.stdout.strip().splitlines()[-1])))
                print(rss[-1], flush=True)
    return render(rows, rss, host, device, args)


def fmt(value: Any, digits: str = ".3g") -> str:
    return "—" if value is None else format(value, digits)


def render(rows: list[dict], rss: list, host: Host, device: torch.device, args: argparse.Namespace) -> str:
    lines = [
        "# Tiled VAE decode benchmark",
        "",
        f"- date: {datetime.date.today().isoformat()}",
        f"- machine: {platform.platform()}, {os.cpu_count()} CPUs visible, torch {torch.__version__}, "
        f"device {device}",
        f"- host: ComfyUI {host.version} ({host.root})",
        f"- command: `{' '.join(['python', 'bench/tiled_vae.py', *sys.argv[1:]])}`"
        + (f" with COMFYUI_ROOT={os.environ['COMFYUI_ROOT']}" if os.environ.get("COMFYUI_ROOT") else ""),
        "",
        "| case | method | tiles (max per stage) | max abs diff | seam energy | time / full | tile peak MiB "
        "(measured) | predicted MiB | budget MiB |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "time" in r:
            lines.append(f"| {r['case']} | full decode: {r['time']:.2f} s | | 0 | 0 | 1 | | | |")
            continue
        lines.append(
            f"| {r['case']} | {r['method']} | {fmt(r['tiles'], 'd') if r['tiles'] else '—'} | "
            f"{fmt(r['max_abs_diff'])} | {fmt(r['seam'])} | {fmt(r['time_ratio'], '.2f')} | "
            f"{fmt(r['peak_MiB'], '.1f')} | {fmt(r['predicted_MiB'], '.1f')} | "
            f"{fmt(r['budget_MiB'], '.0f')} |"
        )
    if rss:
        lines += ["", "Whole-process peak RSS growth over the loaded model (child processes, CPU):", ""]
        lines += ["| VAE | latent | method | RSS growth MiB | predicted tile MiB |", "|---|---|---|---|---|"]
        for name, dims, method, data in rss:
            lines.append(
                f"| {name} | {tuple(dims)} | {method} | {data['rss_growth'] / MiB:.0f} | "
                f"{data['predicted_tile'] / MiB:.0f} |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="tiny,realistic")
    parser.add_argument("--vaes", default="sd,flux,wan21")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--rss", action="store_true", help="also measure whole-process peak RSS (slow)")
    parser.add_argument("--rss-child", help=argparse.SUPPRESS)
    parser.add_argument("--shape", help=argparse.SUPPRESS)
    parser.add_argument("--method", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rss_child:
        rss_child(args)
        return
    table = run(args)
    print(table)
    if args.out:
        args.out.write_text(table)


if __name__ == "__main__":
    main()
