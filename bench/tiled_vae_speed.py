"""Tiled VAE decode speed, measured robustly: tiled vs full decode, interleaved over repeats (issue #32).

    COMFYUI_ROOT=/path/to/ComfyUI python bench/tiled_vae_speed.py [--cases sd,flux,hunyuan,...]
        [--repeats 5] [--out FILE]

Each case decodes one latent three ways in every repeat: the host's full decode, Headroom's exact tiled
decode (a budget that cuts it into many tiles, or for video into runs of frames) and the host's own
tiled decode (what VAEDecodeTiled calls, its defaults). The order of the three rotates from repeat to
repeat, and each repeat's ratio compares decodes that ran seconds apart: on a machine other work also
loads, a slow stretch hits the decodes of one repeat alike instead of making one method look slow. The
table gives the median of the per-repeat ratios (tiled / full) with their spread (min-max), and the
max abs difference of each method from the full decode.

Cases (random weights, the host's own classes, tests/headroom_testing/tiny_models.py):
  sd, flux     full-size KL VAEs, 512x512 (64x64 latent), a 340 MiB activation budget: 61 tiles
  sd-256       the SD VAE at 256x256 in 61 tiles (80 MiB): tiles a quarter the area, the same halos
  hunyuan      full-size HunyuanVideo VAE (Kandinsky 5 video decodes with it), 9 frames of 64x64,
               runs of at most 5 frames (hunyuan-short-runs: runs of 2 frames and 32 px strips)
  wan21        full-size Wan 2.1 VAE, 5 frames of 64x128, tiles of 64 px (Wan is decoded frame by
               frame with its causal cache: never cut in time)
  ltxv, ltx2   small LTXV 0.9.1 / LTX-2 VAEs built from config metadata, 21 frames of 384x96,
               runs of at most 8 frames at every stage (ltx2-strips: and strips of 16 px)
  wan22        full-size Wan 2.2 VAE (48 channels, 16x), 5 frames of 64x128, tiles of 64 px
  wan21-cut, wan22-cut  the same at 4x the width (256 / 512 px) in two tiles across: a spatial cut
  wan21-480p-cut  one 832x480 frame (Wan decodes frame by frame, so a frame's ratio is a clip's) in
               tiles of 512 px, two across: a spatial cut at a real frame size, where a GPU budget cuts
  hunyuan15    HunyuanVideo 1.5's VAE at a quarter of its widths, 17 frames of 64x512, in runs of 2
               latent frames as the host's up path runs them (its causal cache carried), one tile
               (hunyuan15-strips: and two strips of 256 px; hunyuan15-480p-strips: one 832x480 frame in
               two strips of 512 px, a spatial cut at a real frame size)
"""

from __future__ import annotations

import argparse
import datetime
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from comfyui_headroom.memory.tiled_vae import DecodeOptions, make_tiled_decoder  # noqa: E402
from headroom_testing.harness import Host, find_host_root, scratch_dir  # noqa: E402

MiB = 1 << 20
# case -> (latent shape, Headroom options beyond device/dtype)
CASES: dict[str, tuple[tuple[int, ...], dict[str, Any]]] = {
    "sd": ((1, 4, 64, 64), {"budget_bytes": 340 * MiB}),
    "sd-256": ((1, 4, 32, 32), {"budget_bytes": 80 * MiB}),
    "flux": ((1, 16, 64, 64), {"budget_bytes": 340 * MiB}),
    "hunyuan": ((1, 16, 3, 8, 8), {"frames": 5}),
    "hunyuan-short-runs": ((1, 16, 3, 8, 8), {"tile": 32, "frames": 2}),
    "wan21": ((1, 16, 2, 8, 16), {"tile": 64}),
    "wan21-cut": ((1, 16, 2, 8, 32), {"tile": 128}),
    "wan21-480p-cut": ((1, 16, 1, 60, 104), {"tile": 512}),
    "wan22": ((1, 48, 2, 4, 8), {"tile": 64}),
    "wan22-cut": ((1, 48, 2, 4, 32), {"tile": 256}),
    "hunyuan15": ((1, 32, 5, 4, 32), {}),
    "hunyuan15-strips": ((1, 32, 5, 4, 32), {"tile": 256}),
    "hunyuan15-480p-strips": ((1, 32, 1, 30, 52), {"tile": 512}),
    "ltxv": ((1, 128, 6, 24, 6), {"frames": 8}),
    "ltx2": ((1, 128, 6, 24, 6), {"frames": 8}),
    "ltx2-strips": ((1, 128, 6, 24, 6), {"tile": 16, "frames": 8}),
}


def build(host: Host, name: str) -> Any:
    import comfy.sd
    import comfy.utils

    from headroom_testing import tiny_models as tm
    from headroom_testing.tiny_video_vaes import hunyuan15_vae

    if name.startswith("sd"):
        return comfy.sd.VAE(
            sd=comfy.utils.load_torch_file(str(tm.build_tiny_vae(host.models_dir, dtype=torch.float32)))
        )
    if name == "flux":
        return comfy.sd.VAE(sd=tm.flux_vae_state_dict(seed=1))
    if name.startswith("hunyuan15"):
        return hunyuan15_vae(7)
    if name.startswith("hunyuan"):
        return comfy.sd.VAE(sd=tm.hunyuan_video_vae_state_dict(seed=4))
    if name.startswith("wan21"):
        path = tm.build_wan21_vae(host.models_dir, dtype=torch.float32)
        return comfy.sd.VAE(sd=comfy.utils.load_torch_file(str(path)))
    if name.startswith("wan22"):
        return comfy.sd.VAE(sd=tm.wan22_vae_state_dict(seed=6))
    state_dict, metadata = tm.ltxv_vae("0.9.1" if name == "ltxv" else "2", seed=5)  # ltx2, ltx2-strips
    return comfy.sd.VAE(sd=state_dict, metadata=metadata)


def host_tiled(vae: Any, z: torch.Tensor) -> torch.Tensor:
    """VAEDecodeTiled's defaults (512 px tiles, 64 px overlap; 64 frames with 8 overlapping)."""
    compression = vae.spacial_compression_decode()
    tile, overlap = 512 // compression, 64 // compression
    if z.ndim == 5:
        time_ = vae.temporal_compression_decode() or 4
        return vae.decode_tiled(
            z, tile_x=tile, tile_y=tile, overlap=overlap, tile_t=64 // time_, overlap_t=8 // time_
        )
    return vae.decode_tiled(z, tile_x=tile, tile_y=tile, overlap=overlap)


def measure(
    vae: Any, z: torch.Tensor, opts: dict[str, Any], repeats: int, host_repeats: int | None = None
) -> dict[str, Any]:
    import comfy.ldm.modules.diffusionmodules.model as model_module

    options = DecodeOptions(torch.device("cpu"), torch.float32, act=model_module.nonlinearity, **opts)
    report: dict[str, Any] = {}

    def full() -> torch.Tensor:
        return vae.process_output(vae.first_stage_model.decode(z).float())

    def tiled() -> torch.Tensor:
        raw, report["report"] = make_tiled_decoder(vae.first_stage_model, options).decode(z)
        return vae.process_output(raw)

    def host() -> torch.Tensor | str:
        try:
            return host_tiled(vae, z).movedim(-1, 1)
        except RuntimeError as exc:  # the small LTXVs: 16x in space, the host tiles for LTXV's 32x
            return f"n/a: the host's tiled decode fails ({str(exc).splitlines()[0][:60]}...)"
        except AttributeError:  # a model built outside comfy.sd.VAE (hunyuan15): no host tiled decode
            return "n/a: built outside the host's VAE object"

    methods: dict[str, Callable[[], Any]] = {"full": full, "tiled": tiled, "host": host}
    times: dict[str, list[float]] = {k: [] for k in methods}
    outputs: dict[str, Any] = {}
    names = list(methods)
    for r in range(repeats):
        for name in names[r % 3 :] + names[: r % 3]:  # rotate the order
            if name == "host" and host_repeats is not None and r >= host_repeats:
                continue
            torch.manual_seed(0)  # LTXV 0.9.1 draws noise in its decode: every decode the same
            start = time.perf_counter()
            with torch.inference_mode():  # as the host's executor runs nodes (its tiled decode needs it)
                out = methods[name]()
            times[name].append(time.perf_counter() - start)
            outputs.setdefault(name, out)
    want = outputs["full"]
    result: dict[str, Any] = {"full_s": statistics.median(times["full"]), "report": report["report"]}
    for name in ("tiled", "host"):
        ratios = [t / f for t, f in zip(times[name], times["full"], strict=False)]
        got = outputs[name]
        if isinstance(got, str):
            diff = got
        elif got.shape == want.shape:
            diff = (got.float() - want.float()).abs().max().item()
        else:
            diff = f"shape {tuple(got.shape)}"
        result[name] = (statistics.median(ratios), min(ratios), max(ratios), diff)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--host-repeats", type=int, help="time the host's tiled decode in the first N repeats only"
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    host = Host(find_host_root(), scratch_dir("headroom-vae-speed-"))
    torch.set_grad_enabled(False)
    lines = [
        f"- date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
        f"- machine: {platform.platform()}, {torch.get_num_threads()} torch threads, "
        f"torch {torch.__version__}",
        f"- host: ComfyUI {host.version} ({host.root})",
        f"- command: `python bench/tiled_vae_speed.py --cases {args.cases} --repeats {args.repeats}"
        + (f" --host-repeats {args.host_repeats}" if args.host_repeats else "")
        + "`",
        "",
        "| case | latent | Headroom tiles (chunks) | full decode s (median) | Headroom / full: median "
        "(min-max) | Headroom max abs diff | host tiled / full: median (min-max) | host tiled max abs diff |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in [c for c in args.cases.split(",") if c]:
        shape, opts = CASES[name]
        vae = build(host, name)
        z = torch.randn(shape, generator=torch.Generator().manual_seed(0))
        r = measure(vae, z, opts, args.repeats, args.host_repeats)
        rep = r["report"]
        cuts = max(rep.chunks.values(), default=1)
        tiled, hosted = r["tiled"], r["host"]

        def fmt(v: Any) -> str:
            return f"{v:.2g}" if isinstance(v, float) else str(v)

        host_ratio = (  # a host decode that failed has no time worth a ratio
            "—" if isinstance(hosted[3], str) else f"{hosted[0]:.2f} ({hosted[1]:.2f}-{hosted[2]:.2f})"
        )
        lines.append(
            f"| {name} | {tuple(shape)} | {rep.tiles_run} ({cuts} runs of frames) | {r['full_s']:.2f} | "
            f"**{tiled[0]:.2f}** ({tiled[1]:.2f}-{tiled[2]:.2f}) | {fmt(tiled[3])} | "
            f"{host_ratio} | {fmt(hosted[3])} |"
        )
        print(lines[-1], flush=True)
        del vae
    table = "\n".join(lines) + "\n"
    print(table)
    if args.out:
        args.out.write_text(table)


if __name__ == "__main__":
    main()
