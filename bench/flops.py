"""FLOPs of one model call, counted on the host's own classes (issue #26: a wall time users can trust).

    COMFYUI_ROOT=/work/hosts/c064 python bench/flops.py [--out bench/results/flops.md] [--only flux ...]

The models of ``bench/activations.py`` (``activation_models.py``: the ComfyUI host's classes at their
released width and depth) run on torch's ``meta`` device under a TorchDispatchMode that adds up the
FLOPs of every op torch's own ``torch.utils.flop_counter`` has a formula for (matmuls, linear layers,
convolutions), and of attention (``_scaled_dot_product_flash_attention_for_cpu``, which meta runs in
place of the CUDA kernels: 4 x batch x heads x queries x keys x head dim). Per family it fits

    matmul FLOPs    = m1 * cells + m0
    attention FLOPs = a2 * cells**2 + a1 * cells + a0

over the sizes measured (cells: the latent cells the planner counts, batch 1, one call) and prints the
residuals; ``memory/planning/compute.py`` keeps the coefficients (``MEASURED_FLOPS``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT.parent))
sys.path.insert(0, str(ROOT / "bench"))

from activation_models import Case, cases, cells  # noqa: E402
from activations import import_host  # noqa: E402

_ATTENTION = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default


class FlopCount(TorchDispatchMode):
    """Matmul (linear, bmm, conv) and attention FLOPs of every op run inside it (shapes only)."""

    def __init__(self) -> None:
        super().__init__()
        self.matmul = 0
        self.attention = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func is _ATTENTION:
            q, k = args[0], args[1]  # (batch, heads, tokens, head dim)
            self.attention += 4 * q.shape[0] * q.shape[1] * q.shape[2] * k.shape[2] * q.shape[3]
        elif func._overloadpacket in flop_registry:
            self.matmul += flop_registry[func._overloadpacket](*args, **kwargs, out_val=out)
        return out


def count(case: Case, size: tuple[int, int, int]) -> tuple[int, int]:
    with torch.device("meta"):
        model = case.build(torch.bfloat16, "meta", False)
    meter = FlopCount()
    with torch.no_grad(), meter:
        case.call(model, case, size, torch.bfloat16, "meta", 1)
    return meter.matmul, meter.attention


def vae_cases() -> list[tuple[str, Any, tuple[int, ...], int]]:
    """(name, decoder builder, latent shape, output pixels) of the host's VAEs: the SD/Flux KL decoder and
    the Wan 2.1 and 2.2 causal video decoders (comfy/sd.py's configurations)."""
    import comfy.ldm.wan.vae
    import comfy.ldm.wan.vae2_2
    from comfy.ldm.models.autoencoder import AutoencoderKL

    kl = {"double_z": True, "z_channels": 16, "resolution": 256, "in_channels": 3, "out_ch": 3, "ch": 128,
          "ch_mult": [1, 2, 4, 4], "num_res_blocks": 2, "attn_resolutions": [], "dropout": 0.0}  # fmt: skip
    wan = {"z_dim": 16, "dim_mult": [1, 2, 4, 4], "num_res_blocks": 2, "attn_scales": [],
           "temperal_downsample": [False, True, True], "dropout": 0.0}  # fmt: skip
    return [
        ("kl (SD, Flux)", lambda: AutoencoderKL(ddconfig=kl, embed_dim=16), (1, 16, 128, 128), 1024 * 1024),
        ("wan21_vae", lambda: comfy.ldm.wan.vae.WanVAE(dim=96, **wan), (1, 16, 6, 60, 104), 480 * 832 * 21),
        ("wan22_vae", lambda: comfy.ldm.wan.vae2_2.WanVAE(dim=160, **{**wan, "z_dim": 48}),
         (1, 48, 6, 44, 80), 704 * 1280 * 21),
    ]  # fmt: skip


def count_vae(build: Any, shape: tuple[int, ...]) -> int:
    with torch.device("meta"):
        model = build().to(torch.bfloat16)
    meter = FlopCount()
    with torch.no_grad(), meter:
        model.decode(torch.zeros(shape, dtype=torch.bfloat16, device="meta"))
    return meter.matmul + meter.attention


def fit(xs: list[int], ys: list[int], degree: int) -> list[float]:
    degree = min(degree, len(xs) - 1)
    coeffs = np.polyfit(np.array(xs, dtype=float), np.array(ys, dtype=float), degree)
    return [float(c) for c in coeffs[::-1]] + [0.0] * (3 - degree - 1)  # constant, linear, square


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--only", nargs="*", default=None)
    args = parser.parse_args(argv)
    ops = import_host()
    rows, table = [], {}
    for case in cases(ops):
        if case.text or (args.only and case.family not in args.only):
            continue
        xs, mm, at = [], [], []
        for size in case.sizes:
            m, a = count(case, size)
            xs.append(cells(case, size))
            mm.append(m)
            at.append(a)
            print(f"{case.family:14} {size}: cells {xs[-1]:>7}  matmul {m:.4g}  attention {a:.4g}")
        m0, m1, _ = fit(xs, mm, 1)
        a0, a1, a2 = fit(xs, at, 2)
        worst = max(
            max(abs(m0 + m1 * x - y) / y for x, y in zip(xs, mm, strict=True)),
            max(abs(a0 + a1 * x + a2 * x * x - y) / max(y, 1) for x, y in zip(xs, at, strict=True)),
        )
        table[case.family] = (m1, m0, a2, a1, a0)
        rows.append(
            f"| {case.family} | {case.label} | {len(xs)} | {m1:.4g} | {m0:.4g} | {a2:.4g} | {a1:.4g} | "
            f"{a0:.4g} | {100 * worst:.2f}% |"
        )
    vae_rows = []
    for name, build, shape, pixels in vae_cases() if not args.only else ():
        flops = count_vae(build, shape)
        vae_rows.append(f"| {name} | {shape} | {pixels:,} | {flops:.4g} | {flops / pixels:.4g} |")
        print(vae_rows[-1])
    text = "\n".join(
        [
            "# FLOPs of one model call, counted on the host's classes (bench/flops.py)",
            "",
            f"Date {datetime.date.today()}, {platform.machine()}, torch {torch.__version__},",
            "host ComfyUI at COMFYUI_ROOT, meta device, bf16, batch 1, one call (no CFG).",
            "Command: `COMFYUI_ROOT=/work/hosts/c064 python bench/flops.py --out bench/results/flops.md`",
            "",
            "matmul = m1 x cells + m0; attention = a2 x cells^2 + a1 x cells + a0 (cells: latent cells).",
            "",
            "| family | model | sizes | m1 | m0 | a2 | a1 | a0 | worst fit error |",
            "|---|---|---|---|---|---|---|---|---|",
            *rows,
            "",
            "Decoders (one decode; the video decoders run their causal chunks in turn):",
            "",
            "| decoder | latent | output pixels | FLOPs | FLOPs per pixel |",
            "|---|---|---|---|---|",
            *vae_rows,
            "",
            "```json",
            json.dumps({k: [float(f"{v:.6g}") for v in c] for k, c in table.items()}),
            "```",
            "",
        ]
    )
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
