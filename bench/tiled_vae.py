"""Tiled VAE decode benchmark (issue #5): exactness, seams, compute and memory, side by side.

    python bench/tiled_vae.py [--sizes tiny,realistic,large] [--vaes sd,flux,wan21,...] [--out FILE] [--rss]
    COMFYUI_ROOT=/path/to/ComfyUI python bench/tiled_vae.py ...     # a current host (video VAEs need one)

VAEs: sd, flux (KL image), wan21, wan22, hunyuan (HunyuanVideo), ltxv (a small LTXV built from config
metadata, LTX-Video 0.9.1 layer kinds), ltxv2 (the host's full-size LTXV config "version 2"), ltx2 (a
small LTX-2 / 2.3 VAE from config metadata, 0.18+ hosts), hunyuan15 (HunyuanVideo 1.5's VAE, the host's
classes at a quarter of their widths: comfy.sd.VAE builds only the full widths, so the host's own tiled
decode is not measured on it; hosts whose up path carries its causal cache).

For each VAE the host builds (random weights, tests/headroom_testing/tiny_models.py) and each size:
the host's full decode; Headroom exact at the default tile (the "auto" budget) and at a small budget
that forces many tiles; Headroom fast; the host's own tiled decode (what VAEDecodeTiled calls). Reported:
max abs diff and seam energy vs the full decode, time / full-decode time (all in this one run), and the
per-tile activation peak measured with PeakLiveBytes vs the engine's prediction and the budget. With
``--rss`` the whole-process peak RSS of a full and a tiled decode is measured in child processes.
Runs on the CPU in float32; uses CUDA when present (then also bfloat16, and max_memory_allocated).

Max abs diff 0 means bitwise. That holds for a tiled decode only where the CPU's convolution kernels
round alike for every tile shape (the header's "CPU kernels" line: measured on AVX2; on AVX-512 expect
about 1e-6, see tests/headroom_testing/exactness.py).

Seam energy: the mean |gradient| of the error image (method - full decode) on the method's tile
boundary lines, divided by the mean |gradient| of the full decode. 0 means no seam at all.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import math
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from comfyui_headroom.memory.tiled_vae import DecodeOptions, make_tiled_decoder  # noqa: E402
from comfyui_headroom.memory.tiled_vae.budget import CPU_AUTO_ACTIVATION_BYTES  # noqa: E402
from comfyui_headroom.memory.tiled_vae.groupnorm import GroupStats, apply_group_norm  # noqa: E402
from comfyui_headroom.memory.tiled_vae.hunyuan15 import Hunyuan15TiledDecoder  # noqa: E402
from comfyui_headroom.memory.tiled_vae.kl import KLTiledDecoder, estimate_head  # noqa: E402
from comfyui_headroom.memory.tiled_vae.ltxv import LTXVTiledDecoder, apply_norm, whole_mean  # noqa: E402
from comfyui_headroom.memory.tiled_vae.tiles import spans  # noqa: E402
from headroom_testing.exactness import bitwise_when_split  # noqa: E402
from headroom_testing.harness import Host, find_host_root, scratch_dir  # noqa: E402
from headroom_testing.measure import PeakLiveBytes  # noqa: E402

MiB = 1 << 20
SEED = 1234
# Latent shapes: (batch, channels, [frames,] height, width); channels are filled in per VAE.
# Video latents are given for an 8x VAE; 16x (Wan 2.2) and 32x (LTXV) VAEs get the same output size.
SIZES = {
    "cpu": {
        "tiny": {"image": (24, 20), "video": (2, 8, 40)},  # video: short and wide (CPU strips)
        "realistic": {"image": (64, 64), "video": (2, 32, 32)},  # 512x512; 5 frames of 256x256
        "large": {"image": (128, 128), "video": (2, 64, 64)},  # 1024x1024; 5 frames of 512x512
        "long": {"image": (64, 64), "video": (9, 8, 8)},  # video: 33 frames of 64x64 (cut in time)
    },
    "cuda": {
        "tiny": {"image": (32, 32), "video": (2, 32, 32)},
        "realistic": {"image": (128, 128), "video": (9, 60, 104)},  # 1024x1024; 33 frames of 832x480
        "large": {"image": (256, 256), "video": (21, 90, 160)},  # 2048x2048; 81 frames of 1280x720
        "long": {"image": (128, 128), "video": (33, 60, 104)},  # 129 frames of 832x480
    },
}
CHANNELS = {
    "sd": 4,
    "flux": 16,
    "wan21": 16,
    "wan22": 48,
    "hunyuan": 16,
    "ltxv": 128,
    "ltxv2": 128,
    "ltx2": 128,
    "hunyuan15": 32,
}
# output px per latent px where not 8
SPATIAL = {"wan22": 16, "ltxv": 16, "ltxv2": 32, "ltx2": 16, "hunyuan15": 16}
SMALL_BUDGET = 256 * MiB  # activations: forces many tiles at the realistic sizes
TINY_BUDGET = 16 * MiB
LONG_BUDGET = 128 * MiB


def build_vaes(host: Host, names: list[str]) -> dict[str, Any]:
    import comfy.sd
    import comfy.utils

    from headroom_testing.tiny_models import (
        build_tiny_vae,
        build_wan21_vae,
        flux_vae_state_dict,
        host_video_vaes,
        hunyuan_video_vae_state_dict,
        ltxv_vae,
        supported_builders,
        wan22_vae_state_dict,
    )
    from headroom_testing.tiny_video_vaes import hunyuan15_missing, hunyuan15_vae

    video = host_video_vaes()
    vaes: dict[str, Any] = {}
    if "sd" in names:
        path = build_tiny_vae(host.models_dir, dtype=torch.float32)
        vaes["sd"] = comfy.sd.VAE(sd=comfy.utils.load_torch_file(str(path)))
    if "flux" in names and not host.legacy:
        vaes["flux"] = comfy.sd.VAE(sd=flux_vae_state_dict(seed=1))
    if "wan21" in names and "build_wan21_vae" in supported_builders():
        path = build_wan21_vae(host.models_dir, dtype=torch.float32)
        vaes["wan21"] = comfy.sd.VAE(sd=comfy.utils.load_torch_file(str(path)))
    if "wan22" in names and "wan22" in video:
        vaes["wan22"] = comfy.sd.VAE(sd=wan22_vae_state_dict(seed=3, dtype=torch.bfloat16))
    if "hunyuan" in names and "hunyuan_video" in video:
        vaes["hunyuan"] = comfy.sd.VAE(sd=hunyuan_video_vae_state_dict(seed=4))
    if "hunyuan15" in names and hunyuan15_missing() is None:
        vaes["hunyuan15"] = hunyuan15_vae(seed=7)
    for name, config in (("ltxv", "0.9.1"), ("ltxv2", 2), ("ltx2", "2")):
        if name in names and "ltxv" in video:
            state_dict, metadata = ltxv_vae(config, seed=5)
            vaes[name] = comfy.sd.VAE(sd=state_dict, metadata=metadata)
    missing = [n for n in names if n not in vaes]
    if missing:
        print(f"not on this host ({host.version}): {', '.join(missing)}", flush=True)
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
    """What the stock VAEDecodeTiled does with its defaults (512 px tiles, 64 px overlap; for video 64
    frames with 8 overlapping), converted to latent units as the node converts them."""
    compression = vae.spacial_compression_decode() if hasattr(vae, "spacial_compression_decode") else 8
    tile, overlap = 512 // compression, 64 // compression
    if z.ndim == 5:
        time = vae.temporal_compression_decode() or 4
        out = vae.decode_tiled(
            z, tile_x=tile, tile_y=tile, overlap=overlap, tile_t=64 // time, overlap_t=8 // time
        )
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


def final_grid(report: Any, engine: Any, out: torch.Tensor) -> tuple[list[int], list[int]]:
    """The output rows/columns where the last stage's tiles meet (strips: columns only)."""
    _, tile, _ = report.stages[-1]
    if isinstance(engine, LTXVTiledDecoder):
        step = tile * engine.patch
    elif isinstance(engine, KLTiledDecoder):
        step = tile
    else:
        step = tile * engine.scale
    height, width = out.shape[-2:]
    return ([] if engine.strips else boundaries(height, step)), boundaries(width, step)


def tile_peaks(engine: Any, z: torch.Tensor, dtype: torch.dtype, device: torch.device) -> tuple[int, int]:
    """Measured (PeakLiveBytes) and predicted activation peak of the largest tile of any stage (and the
    head, which runs whole)."""
    bytes_ = torch.empty((), dtype=dtype).element_size()
    hw = (z.shape[-2], z.shape[-1])
    frames = z.shape[2] if z.ndim == 5 else 1
    if isinstance(engine, KLTiledDecoder):
        worst_measured = worst_predicted = 0
        for stage, (geo, estimate, layout) in zip(
            engine.stages, engine.layouts(tuple(z.shape), bytes_), strict=True
        ):
            rows = geo.height if engine.strips else min(layout.tile + 2 * stage.halo, geo.height)
            side = min(layout.tile + 2 * stage.halo, geo.width)
            n = geo.crop_range(layout.frames)[1]
            lead = (1, n) if z.ndim == 5 else (1,)
            crops = [
                torch.randn(lead[0], c, *lead[1:], rows, side, device=device, dtype=dtype)
                for c in stage.in_channels
            ]
            groups = stage.norm.num_groups
            stats = GroupStats(torch.zeros(1, groups), torch.ones(1, groups))
            with torch.no_grad(), PeakLiveBytes(device.type) as meter:
                h = apply_group_norm(
                    crops[0], stats, stage.norm.weight, stage.norm.bias, engine.options.exact
                )
                out = stage.body(h, *crops[1:])
                del h, out
            worst_measured = max(worst_measured, meter.peak)
            worst_predicted = max(worst_predicted, estimate(side - 2 * stage.halo, n))
        with torch.no_grad(), PeakLiveBytes(device.type) as meter:
            engine._head(z.to(device, dtype))
        channels = engine.decoder.mid.block_1.in_channels
        head_predicted = z.shape[0] * estimate_head(hw, channels, bytes_, frames)
        return max(worst_measured, meter.peak), max(worst_predicted, head_predicted)
    if isinstance(engine, Hunyuan15TiledDecoder):  # the whole tiled decode against the engine's figure
        with torch.no_grad(), PeakLiveBytes(device.type) as meter:
            engine.decode(z.to(device, dtype))
        return meter.peak, engine.predicted_peak(tuple(z.shape), bytes_)
    if isinstance(engine, LTXVTiledDecoder):
        shape = tuple(z.shape)
        worst_measured = worst_predicted = 0
        with torch.no_grad(), PeakLiveBytes(device.type) as meter:
            _, bodies = engine._head(z.to(device, dtype))
        head_measured = meter.peak
        for plan, body, (geo, estimate, layout) in zip(
            engine.plan, bodies, engine.layouts(shape, bytes_), strict=True
        ):
            rows = geo.height if engine.strips else min(layout.tile + 2 * plan.halo, geo.height)
            side = min(layout.tile + 2 * plan.halo, geo.width)
            n = geo.crop_range(layout.frames)[1]
            channels = {
                "x": plan.block.in_channels if plan.kind == "res_b" else plan.channels,
                "t": plan.channels,
            }
            crops = [
                torch.randn(z.shape[0], channels[k], n, rows, side, device=device, dtype=dtype)
                for k in plan.inputs
            ]
            with torch.no_grad(), PeakLiveBytes(device.type) as meter:
                copies = [c.clone() for c in crops]
                h = apply_norm(plan.norm, copies[0], whole_mean(plan.norm, crops[0]))
                out = body(h, *copies[1:], (0, rows, 0, side))
                del h, out, copies
            worst_measured = max(worst_measured, meter.peak)
            worst_predicted = max(worst_predicted, estimate(layout.tile, n))
        head_predicted = engine.head_bytes(shape, bytes_)
        return max(worst_measured, head_measured), max(worst_predicted, head_predicted)
    # Wan: one tile of one batch item through all frames, cache included
    tile = engine.latent_tile(hw, bytes_)
    rows = hw[0] if engine.strips else min(hw[0], tile + 2 * engine.halo)
    small = z[..., :rows, : min(hw[1], tile + 2 * engine.halo)]
    with torch.no_grad():
        parked = engine._head(small.to(device, dtype), _NoProgress())
    out = torch.empty(
        1, 3, 1 + engine.time_factor * (small.shape[2] - 1), *(d * engine.scale for d in small.shape[-2:])
    )
    with torch.no_grad(), PeakLiveBytes(device.type) as meter:
        engine._tiles(parked, slice(0, 1), max(small.shape[-2:]), out, _NoProgress())
    return meter.peak, engine.tile_bytes(tile, bytes_, hw)


class _NoProgress:
    def step(self, units: int = 1) -> None:
        pass


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def rss_child(args: argparse.Namespace) -> None:
    """One decode in a fresh process; prints the peak RSS growth over the loaded model.

    Building the random-weight VAE peaks higher than the decode may (state dict plus model), so the
    kernel's high-water mark is reset first (``/proc/self/clear_refs`` 5, Linux) and VmHWM read after.
    """
    host = Host(find_host_root(), scratch_dir("headroom-tiled-vae-"))
    vae = build_vaes(host, [args.rss_child])[args.rss_child]
    z = make_latent(args.rss_child, json.loads(args.shape))
    gc.collect()
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")
    base = _status_kib("VmRSS") * 1024
    start = time.perf_counter()
    with torch.no_grad():
        if args.method == "full":
            vae.first_stage_model.decode(z)
            predicted = 0
        else:
            _, report, _ = headroom(
                vae, z, torch.device("cpu"), torch.float32, budget_bytes=args.rss_budget * MiB
            )
            predicted = report.predicted_peak_bytes
    seconds = time.perf_counter() - start
    peak = _status_kib("VmHWM") * 1024
    out_bytes = 3 * 4 * math.prod(d for d in vae_output_shape(args.rss_child, z))
    print(
        json.dumps(
            {"rss_growth": peak - base, "predicted_tile": predicted, "seconds": seconds, "output": out_bytes}
        )
    )


def vae_output_shape(name: str, z: torch.Tensor) -> tuple[int, ...]:
    """(frames, height, width) of the decoded output."""
    scale = SPATIAL.get(name, 8)
    frames = 1
    if z.ndim == 5:
        frames = 1 + (8 if name.startswith("ltxv") else 4) * (z.shape[2] - 1)
    return (frames, z.shape[-2] * scale, z.shape[-1] * scale)


def make_latent(name: str, dims: list[int]) -> torch.Tensor:
    """A latent of ``dims`` (given for an 8x VAE: shrunk for 16x and 32x ones, same output size)."""
    dims = list(dims)
    shrink = SPATIAL.get(name, 8) // 8
    dims[-2:] = [max(1, d // shrink) for d in dims[-2:]]
    return torch.randn((1, CHANNELS[name], *dims), generator=torch.Generator().manual_seed(0))


def is_video(name: str) -> bool:
    return name not in ("sd", "flux")


def run(args: argparse.Namespace) -> str:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    host = Host(find_host_root(), scratch_dir("headroom-tiled-vae-"))
    if device.type == "cuda":
        pass  # the harness forces --cpu; on a GPU machine run the engine on CUDA with the same modules
    names = [n for n in args.vaes.split(",") if n]
    sizes = [n for n in args.sizes.split(",") if n]
    vaes = build_vaes(host, names) if sizes else {}  # --sizes "" with --rss: the children build them
    dtypes = [torch.float32] + ([torch.bfloat16] if device.type == "cuda" else [])
    rows = []
    for name, vae in vaes.items():
        vae.first_stage_model.to(device)
        for size in sizes:
            dims = SIZES[device.type][size]["video" if is_video(name) else "image"]
            z = make_latent(name, list(dims))
            for dtype in dtypes:
                # to the device again: the host's decode_tiled below loads the VAE where the harness's
                # host runs (the CPU), which moved it back after the first dtype on an H200
                vae.first_stage_model.to(device, dtype)
                zd = z.to(device, dtype)
                with torch.no_grad():
                    torch.manual_seed(SEED)  # LTXV draws noise in its decode: every decode gets the same
                    full, t_full = timed(
                        lambda vae=vae, zd=zd: vae.process_output(vae.first_stage_model.decode(zd).float())
                    )  # noqa: E501
                    torch.manual_seed(SEED)
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
                if name.startswith("ltxv"):  # small LTXV: 256 MiB fits one strip; show a cut decode too
                    runs[f"exact, {TINY_BUDGET // MiB} MiB"] = {"budget_bytes": TINY_BUDGET}
                if size == "long":  # a budget that needs cuts in time
                    runs[f"exact, {LONG_BUDGET // MiB} MiB"] = {"budget_bytes": LONG_BUDGET}
                for run_name, kw in runs.items():
                    if device.type == "cuda" and kw.get("budget_bytes") is None:
                        free, _ = torch.cuda.mem_get_info()
                        kw["budget_bytes"] = int(free * 0.8)
                    if device.type == "cuda":
                        torch.cuda.reset_peak_memory_stats()
                        base = torch.cuda.memory_allocated()
                    torch.manual_seed(SEED)
                    (out, report, engine), t = timed(
                        lambda vae=vae, zd=zd, dtype=dtype, kw=kw: headroom(vae, zd, device, dtype, **kw)
                    )  # noqa: E501
                    out = out.cpu()
                    rows_b, cols_b = final_grid(report, engine, out)
                    measured, predicted = tile_peaks(engine, z, dtype, device)
                    if device.type == "cuda":
                        measured = torch.cuda.max_memory_allocated() - base
                    least = engine.minimum_peak(tuple(z.shape), torch.empty((), dtype=dtype).element_size())
                    if kw["budget_bytes"] < least:  # the engine runs its smallest tiles; the node refuses
                        run_name += f" (under the smallest tiles' {least / MiB:.0f} MiB: the node refuses it)"
                    tiles = max((n for _, _, n in report.stages), default=0)
                    rows.append({
                        "case": label, "method": f"Headroom {run_name}", "tiles": tiles,
                        "chunks": max(report.chunks.values(), default=1),
                        "max_abs_diff": (out - full).abs().max().item(),
                        "seam": seam_energy(out, full, rows_b, cols_b),
                        "time_ratio": t / t_full, "peak_MiB": measured / MiB,
                        "predicted_MiB": predicted / MiB, "budget_MiB": kw["budget_bytes"] / MiB,
                        "spread": spread,
                    })  # fmt: skip
                    print(rows[-1], flush=True)
                if not hasattr(vae, "decode_tiled"):  # hunyuan15: built outside comfy.sd.VAE
                    rows.append({"case": label, "method": "full decode (s)", "time": t_full})
                    continue
                with torch.no_grad():
                    torch.manual_seed(SEED)
                    (tiled, rows_h, cols_h), t = timed(lambda vae=vae, zd=zd: host_tiled(host, vae, zd))
                method = "host decode_tiled (VAEDecodeTiled defaults)"
                if tiled.numel() != full.numel():
                    # the host sizes its tiled output from the family's fixed ratios (LTXV: 32x, 8x in
                    # time), which a small LTXV config (16x, 4x) does not have: nothing to compare
                    method += f": n/a, it returns {tuple(tiled.shape)} for {tuple(full.shape)}"
                    diff = seam = None
                else:
                    tiled = tiled.cpu().float().reshape(full.shape)
                    diff, seam = (tiled - full).abs().max().item(), seam_energy(tiled, full, rows_h, cols_h)
                rows.append({
                    "case": label, "method": method, "tiles": None, "max_abs_diff": diff, "seam": seam,
                    "time_ratio": t / t_full, "peak_MiB": None, "predicted_MiB": None, "budget_MiB": None,
                    "spread": spread,
                })  # fmt: skip
                print(rows[-1], flush=True)
                rows.append({"case": label, "method": "full decode (s)", "time": t_full})
        vae.first_stage_model.to("cpu", torch.float32)
    rss = []
    if args.rss:
        for name in names:
            dims = SIZES[device.type][args.rss_size]["video" if is_video(name) else "image"]
            for method in args.rss_methods.split(","):
                cmd = [
                    sys.executable,
                    __file__,
                    "--rss-child",
                    name,
                    "--shape",
                    json.dumps(list(dims)),
                    "--method",
                    method,
                    "--rss-budget",
                    str(args.rss_budget),
                ]
                out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=os.environ.copy())
                shape = tuple(make_latent(name, list(dims)).shape)
                label = method if method == "full" else f"headroom, {args.rss_budget} MiB tile budget"
                rss.append((name, shape, label, json.loads(out.stdout.strip().splitlines()[-1])))
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
        # "0" in the diff column is bitwise; whether a tiled decode can be depends on the CPU's kernels
        f"- CPU kernels: {bitwise_when_split()[1]}",
        f"- command: `{' '.join(['python', 'bench/tiled_vae.py', *sys.argv[1:]])}`"
        + (f" with COMFYUI_ROOT={os.environ['COMFYUI_ROOT']}" if os.environ.get("COMFYUI_ROOT") else ""),
        "",
        "| case | method | tiles (max per stage) | time chunks (max) | max abs diff | seam energy "
        "| time / full | tile peak MiB (measured) | predicted MiB | budget MiB |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "time" in r:
            lines.append(f"| {r['case']} | full decode: {r['time']:.2f} s | | | 0 | 0 | 1 | | | |")
            continue
        lines.append(
            f"| {r['case']} | {r['method']} | {fmt(r['tiles'], 'd') if r['tiles'] else '—'} | "
            f"{r.get('chunks') or '—'} | "
            f"{fmt(r['max_abs_diff'])} | {fmt(r['seam'])} | {fmt(r['time_ratio'], '.2f')} | "
            f"{fmt(r['peak_MiB'], '.1f')} | {fmt(r['predicted_MiB'], '.1f')} | "
            f"{fmt(r['budget_MiB'], '.0f')} |"
        )
    if rss:
        lines += [
            "",
            "Whole-process peak RSS growth over the loaded model (child processes, CPU, float32):",
            "",
        ]
        lines += [
            "| VAE | latent | method | RSS growth MiB | predicted tile peak MiB | output MiB | decode s |",
            "|---|---|---|---|---|---|---|",
        ]
        for name, dims, method, data in rss:
            lines.append(
                f"| {name} | {tuple(dims)} | {method} | {data['rss_growth'] / MiB:.0f} | "
                f"{data['predicted_tile'] / MiB:.0f} | {data['output'] / MiB:.0f} | {data['seconds']:.1f} |"
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
    parser.add_argument("--rss-size", default="realistic", help="the size the --rss decodes use")
    parser.add_argument("--rss-methods", default="full,headroom", help="which --rss decodes to run")
    parser.add_argument(
        "--rss-budget", type=int, default=CPU_AUTO_ACTIVATION_BYTES // MiB, help="--rss tile budget, MiB"
    )
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
