"""Predicted wall time against published run times, with the error on runs the model was not fitted to.

    python bench/wall_time.py [--out bench/results/wall_time.md] [--fit]

The cases (``bench/wall_time_cases.py``) are ComfyUI templates timed in their own notes and runs published
by model authors, benchmark repositories, papers and issues (``bench/data/published_runs.json``), each
planned as a user would, with ``--gpu`` naming the card of the run and 64 GB of RAM, and compared like
with like: the plan's compute of the sampler step, of the sampler or of the whole pipeline (text encode,
sampling, decode) where the source timed models already loaded, the ComfyUI baseline's wall (its loads,
offloads and casts, with the plan's compute) for a ComfyUI first or second run.

The time model (``memory/planning/compute.py``) has few parameters, each a physical quantity with a
bound: per kind of spec sheet (consumer, full rate) the share of the bf16 peak that matmuls and attention
reach (at most 1); one share for convolutions (at most 1); a fixed overhead per model call (at most
0.25 s); and the publishers' machines' disk and pageable-copy rates (first runs only). ``--fit`` fits them
by bounded least squares on log(predicted / measured), each source weighted by one over the square root
of its rows (so one big table does not outvote ten small ones), and reports each parameter's valley: the
range over which, the others refitted, the cost stays within 5% of the best. The headline is held-out:
each independent source left out in turn (fitted on the others, predicted on it), and each family.
"""

from __future__ import annotations

import argparse
import datetime
import math
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import least_squares

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT.parent))
sys.path.insert(0, str(ROOT / "bench"))

from wall_time_cases import Case, all_cases, card_name  # noqa: E402

from comfyui_headroom.memory.planning import gpus  # noqa: E402
from comfyui_headroom.memory.planning.baselines import comfyui_reactive  # noqa: E402
from comfyui_headroom.memory.planning.costmodel import Budget, Hardware, Tier  # noqa: E402
from comfyui_headroom.memory.planning.pipeline import plan_workflow  # noqa: E402
from comfyui_headroom.memory.units import GB, GiB  # noqa: E402

RAM = 64 * GiB
RESULTS = "bench/results/wall_time.md"
TOLERANCE = 0.25
LOSS, F_SCALE = "linear", 1.0  # plain least squares (soft_l1 was tried: no better held out)
VALLEY = 1.05  # a parameter's valley: the values whose refitted cost is within 5% of the best
# (name, lower bound, upper bound, start): the physical limits of each fitted parameter
PARAMS: tuple[tuple[str, float, float, float], ...] = (
    ("matmul", 0.05, 1.0, 0.8),  # share of the sustained peak a GEMM reaches
    ("attention", 0.05, 1.0, 0.6),  # share an SDPA kernel reaches (long sequences, head dim 128)
    ("conv", 0.02, 1.0, 0.3),  # share a VAE's convolutions reach
    ("memory", 0.05, 1.0, 0.8),  # share of the memory bandwidth elementwise kernels reach
    ("hopper_sdpa", 0.2, 1.0, 0.6),  # SDPA's FlashAttention-2 kernels on Hopper, of its peak
    ("watts_12nm", 0.2, 5.0, 2.0),  # board watts a sustained dense TFLOPS costs (Volta, Turing)
    ("watts_8nm", 0.2, 5.0, 1.2),  # (Ampere)
    ("watts_4nm", 0.2, 5.0, 1.0),  # (Ada, Hopper, Blackwell)
    ("overhead_s", 0.0, gpus.MAX_OVERHEAD_S, 0.02),
    ("disk_gbs", 0.2, 7.0, 1.0),  # SATA SSD to PCIe 4 NVMe, read through the page cache
    ("pageable_gbs", 1.0, 26.0, 3.0),  # a pageable copy never beats a pinned one on PCIe 4 x16
)
NAMES = [p[0] for p in PARAMS]
Theta = dict[str, float]
SHARES = ("matmul", "attention", "conv", "memory")


def time_model(theta: Theta) -> gpus.TimeModel:
    kernels = replace(
        gpus.MODEL.kernels, matmul=theta["matmul"], attention=theta["attention"], conv=theta["conv"],
        memory=theta["memory"], overhead_s=theta["overhead_s"], source="fit",
    )  # fmt: skip
    watts = {p: theta[f"watts_{p}"] for p in ("12nm", "8nm", "4nm")}
    return gpus.TimeModel(kernels, watts, theta["hopper_sdpa"], "fit")


def default_theta() -> Theta:
    m = gpus.MODEL
    out = {name: start for name, _, _, start in PARAMS}
    out.update(
        matmul=m.kernels.matmul, attention=m.kernels.attention, conv=m.kernels.conv, memory=m.kernels.memory
    )
    out.update(overhead_s=m.kernels.overhead_s, hopper_sdpa=m.hopper_sdpa)
    out.update({f"watts_{p}": w for p, w in m.watts_per_tflops.items()})
    out.update(disk_gbs=DISK_GBS, pageable_gbs=PAGEABLE_GBS)
    return out


def load_template(case: Case) -> dict[str, Any]:
    import json

    import comfyui_workflow_templates_json as package

    path = Path(package.__file__).resolve().parent / "templates" / f"{case.template}.json"
    workflow = json.loads(path.read_text(encoding="utf-8"))
    nodes = list(workflow.get("nodes", []))
    for sub in workflow.get("definitions", {}).get("subgraphs", []):
        nodes += sub.get("nodes", [])
    by_id = {str(n["id"]): n for n in nodes}
    for where, value in case.edits.items():
        node, index = where.split(":")
        by_id[node]["widgets_values"][int(index)] = value
        for slot in by_id[node].get("inputs", []):  # a widget fed by a link (a subgraph input) is set here
            if slot.get("widget"):
                slot["link"] = None
    return workflow


def card_of(case: Case) -> gpus.Gpu:
    """The card a row names, found exactly in the table."""
    card = gpus.find_gpu(card_name(case.gpu))
    if card is None:
        raise ValueError(f"{case.name}: card {case.gpu!r} is not in the table")
    return card


# The publishers' machines' disk and pageable-copy rates, fitted with the shares (first runs only)
DISK_GBS = 1.265
PAGEABLE_GBS = 2.291


@dataclass
class Result:
    case: Case
    predicted_s: float
    notes: tuple[str, ...] = ()

    @property
    def ratio(self) -> float:
        return self.predicted_s / self.case.measured_s


def predict(case: Case, theta: Theta) -> Result:
    """The product's own prediction of ``case`` at the parameters ``theta``."""
    card = card_of(case)
    card = replace(card, efficiency=gpus.card_efficiency(card, time_model(theta)))
    hw = replace(
        Hardware.for_gpu(card),
        disk=theta["disk_gbs"] * GB,
        h2d_pageable=theta["pageable_gbs"] * GB,
        d2h=theta["pageable_gbs"] * GB,
        fp8_matmul=case.fp8_matmul,
    )
    workflow = load_template(case) if case.template else case.prompt
    planned = plan_workflow(workflow, None, hw)
    workload = planned.workload
    steps = workload.steps
    if case.kind in ("pipeline", "compute"):
        return Result(case, sum(s.compute_s for s in steps), workload.notes)
    if case.kind in ("sampler", "step"):
        sampler = max(steps, key=lambda s: s.compute_s)
        per = sampler.compute_s / (sampler.evaluations if case.kind == "step" else 1)
        return Result(case, per, workload.notes)
    if case.kind == "second run":
        workload = replace(workload, initial={c.id: Tier.RAM for c in workload.components})
    budget = Budget.from_card(card.vram, RAM)
    return Result(case, comfyui_reactive(workload, budget, hw).wall_s, workload.notes)


def features(case: Case) -> dict[str, float]:
    """The prediction as ``rest + sum(f / effective share)`` over the kernel classes and the rates,
    ``+ calls x overhead``: each term read off the product by halving one share at a time from a model
    where every share is 1 and no card is power-limited (a share s costs f/s, so halving it adds f)."""
    base: Theta = {name: 1.0 for name in NAMES}
    base.update(overhead_s=0.0, watts_12nm=1e-3, watts_8nm=1e-3, watts_4nm=1e-3)
    at_base = predict(case, base).predicted_s
    out: dict[str, float] = {}
    for name in (*SHARES, "disk_gbs", "pageable_gbs"):
        out[name] = predict(case, {**base, name: 0.5}).predicted_s - at_base
    out["overhead_s"] = (predict(case, {**base, "overhead_s": 0.1}).predicted_s - at_base) / 0.1
    out["rest"] = at_base - sum(v for k, v in out.items() if k != "overhead_s")
    card = card_of(case)
    out["_watts"], out["_peak"], out["_hopper"] = card.watts, card.bf16, float(card.arch == "hopper")
    out["_process"] = ("12nm", "8nm", "4nm").index(gpus.PROCESS.get(card.arch, "4nm"))
    return out


def linear(f: dict[str, float], theta: Theta) -> float:
    process = ("12nm", "8nm", "4nm")[int(f["_process"])]
    reach = min(1.0, f["_watts"] / (theta[f"watts_{process}"] * f["_peak"]))
    hopper = theta["hopper_sdpa"] if f["_hopper"] else 1.0
    t = f["rest"] + f["overhead_s"] * theta["overhead_s"]
    t += f["matmul"] / (theta["matmul"] * reach) + f["attention"] / (theta["attention"] * reach * hopper)
    t += f["conv"] / (theta["conv"] * reach) + f["memory"] / theta["memory"]
    return t + f["disk_gbs"] / theta["disk_gbs"] + f["pageable_gbs"] / theta["pageable_gbs"]


def _weights(cases: Sequence[Case]) -> np.ndarray:
    count: dict[str, int] = {}
    for c in cases:
        count[c.source_id] = count.get(c.source_id, 0) + 1
    return np.array([1 / math.sqrt(count[c.source_id]) for c in cases])


def fit(
    cases: Sequence[Case], feats: Sequence[dict[str, float]], fixed: Theta | None = None
) -> tuple[Theta, float]:
    """(parameters, cost) minimising the weighted sum of squared log ratios within the bounds; ``fixed``
    holds parameters at a value (the valley's profile)."""
    fixed = fixed or {}
    free = [p for p in PARAMS if p[0] not in fixed]
    measured = np.array([c.measured_s for c in cases])
    w = _weights(cases)

    def theta_of(x: np.ndarray) -> Theta:
        return {**fixed, **{p[0]: float(v) for p, v in zip(free, x, strict=True)}}

    def residuals(x: np.ndarray) -> np.ndarray:
        t = theta_of(x)
        pred = np.array([max(linear(f, t), 1e-9) for f in feats])
        return w * np.log(pred / measured)

    x0 = np.array([min(max(p[3], p[1]), p[2]) for p in free])
    res = least_squares(
        residuals, x0, bounds=([p[1] for p in free], [p[2] for p in free]), loss=LOSS, f_scale=F_SCALE
    )
    return theta_of(res.x), float(2 * res.cost)


def valleys(
    cases: Sequence[Case], feats: Sequence[dict[str, float]], best: Theta, cost: float
) -> dict[str, tuple[float, float]]:
    """Per parameter, the range of values whose cost (the others refitted) stays within VALLEY of the best."""
    out = {}
    for name, lo, hi, _ in PARAMS:
        grid = np.linspace(lo, hi, 25)
        inside = [float(v) for v in grid if fit(cases, feats, {name: float(v)})[1] <= cost * VALLEY + 1e-12]
        out[name] = (min(inside + [best[name]]), max(inside + [best[name]]))
    return out


def held_out(
    cases: Sequence[Case],
    feats: Sequence[dict[str, float]],
    group: Callable[[Case], str],
    scored: Sequence[Case] | None = None,
) -> dict[int, Theta]:
    """For each case of ``scored`` (default: ``cases``), the parameters fitted on ``cases`` without its
    group (its source, or its family)."""
    scored = cases if scored is None else scored
    out: dict[int, Theta] = {}
    for key in sorted({group(c) for c in scored}):
        train = [i for i, c in enumerate(cases) if group(c) != key]
        theta, _ = fit([cases[i] for i in train], [feats[i] for i in train])
        for i, c in enumerate(scored):
            if group(c) == key:
                out[i] = theta
    return out


def summary(ratios: Sequence[float]) -> str:
    if not ratios:
        return "no cases"
    n = len(ratios)
    w25 = sum(abs(r - 1) <= TOLERANCE for r in ratios)
    w50 = sum(0.5 <= r <= 1.5 for r in ratios)
    return (
        f"median {statistics.median(ratios):.2f}, {w25} of {n} ({100 * w25 / n:.0f}%) within +-25%, "
        f"{w50} of {n} within +-50%, range {min(ratios):.2f}-{max(ratios):.2f}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--fit", action="store_true", help="fit the parameters (else the table's defaults)")
    args = parser.parse_args(argv)
    every = all_cases()
    used = [c for c in every if not c.skip and not c.assumed]
    wider = [c for c in every if not c.skip]
    feats = [features(c) for c in used]
    best, cost = fit(used, feats)
    theta = best if args.fit else default_theta()
    loso = held_out(used, feats, lambda c: c.source_id)
    lofo = held_out(used, feats, lambda c: c.family)
    in_sample = [predict(c, theta) for c in used]
    out_source = [predict(c, loso[i]) for i, c in enumerate(used)]
    out_family = [predict(c, lofo[i]) for i, c in enumerate(used)]
    wide = held_out(used, feats, lambda c: c.source_id, wider)
    out_wide = [predict(c, wide[i]) for i, c in enumerate(wider)]
    valley = valleys(used, feats, best, cost) if args.fit else {}
    sources = sorted({c.source_id for c in used})
    cards = sorted({card_of(c).name for c in used})
    lines = [
        "# Predicted wall time against published run times (bench/wall_time.py)",
        "",
        f"Date {datetime.date.today()}. Command: `python bench/wall_time.py --fit --out {RESULTS}` (planning",
        "only: no GPU runs here; the measurements are the published ones named per row). Each case is",
        "planned with `--gpu` naming the card of the run and 64 GB of RAM, compared like with like (the",
        "sampler step, the sampler, the pipeline with models loaded, or a ComfyUI first or second run).",
        "",
        f"**Held out, each source left out in turn: {summary([r.ratio for r in out_source])}.** "
        f"{len(used)} cases from {len(sources)} independent sources on {len(cards)} cards "
        f"({', '.join(cards)}).",
        "",
        f"- Each family left out in turn: {summary([r.ratio for r in out_family])}.",
        f"- The wider set, {len(wider)} cases: the above and {len(wider) - len(used)} rows whose source does"
        " not state every setting (the row assumed some) or that the row doubts, never fitted on, each"
        f" source left out: {summary([r.ratio for r in out_wide])}.",
        f"- In sample (fitted on every case, the table's figures): {summary([r.ratio for r in in_sample])}.",
    ]
    for arch in sorted({card_of(c).arch for c in used}):
        sub = [r.ratio for r, c in zip(out_source, used, strict=True) if card_of(c).arch == arch]
        lines.append(f"- Held out by source, {arch} cards: {summary(sub)}.")
    held = sorted(r.ratio for r in out_source)
    low, high = np.percentile(held, 10), np.percentile(held, 90)
    lines.append(
        f"- 80% of the held-out (source) ratios lie in [{low:.2f}, {high:.2f}]: the range every answer gives"
        " (`memory/planning/timing.py`, `HELD_OUT_RATIO`)."
    )
    lines += [
        "",
        "## The parameters",
        "",
        "| parameter | fitted | valley (cost within 5%) | bound |",
        "|---|---|---|---|",
    ]
    for name, lo, hi, _ in PARAMS:
        v = valley.get(name)
        span = f"{v[0]:.3f}-{v[1]:.3f}" if v else "-"
        if v and v[0] <= lo and v[1] >= hi:
            span += " (not identified: no case constrains it)"
        lines.append(f"| {name} | {best[name]:.3f} | {span} | {lo:g}-{hi:g} |")
    lines += [
        "",
        "Shares are of the card's published dense bf16 peak (FP32 accumulate) or memory bandwidth; the",
        "overhead is seconds per model call; disk and pageable are the publishers' machines' rates in GB/s",
        "(first and second runs only). Weighted least squares on log(predicted/measured), each source",
        "weighted by one over the square root of its rows. A figure no case constrains (its valley is its"
        " whole bound) is not taken from the fit: the table keeps its own, with why",
        "(memory/planning/gpus.py).",
        "Each row's quote, settings and notes: bench/data/published_runs.json.",
        "",
        "## Every case",
        "",
        "| case | setup | GPU | time of | measured s | predicted s | ratio in sample | held out (source) "
        "| held out (family) | source |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r, s, f in zip(in_sample, out_source, out_family, strict=True):
        c = r.case
        lines.append(
            f"| {c.name} | {c.setup} | {c.gpu} | {c.kind} | {c.measured_s:g} | {r.predicted_s:.3g} | "
            f"{r.ratio:.2f} | {s.ratio:.2f} | {f.ratio:.2f} | {c.source_id}: {c.source} |"
        )
    lines += [
        "",
        f"## Rows with assumed settings ({len(wider) - len(used)}: scored, never fitted)",
        "",
        "| case | setup | GPU | time of | measured s | held out (source) | what was assumed | source |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in out_wide:
        c = r.case
        if c.assumed:
            lines.append(
                f"| {c.name} | {c.setup} | {c.gpu} | {c.kind} | {c.measured_s:g} | {r.ratio:.2f} | "
                f"{c.assumed} | {c.source_id}: {c.source} |"
            )
    skipped = [c for c in every if c.skip]
    lines += [
        "",
        f"## Not used ({len(skipped)} rows)",
        "",
        "| case | GPU | time of | measured s | why | source |",
        "|---|---|---|---|---|---|",
    ]
    for c in skipped:
        lines.append(
            f"| {c.name} | {c.gpu} | {c.kind} | {c.measured_s:g} | {c.skip} | {c.source_id}: {c.source} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    if args.fit:
        print("fitted: " + ", ".join(f"{k} {v:.3f}" for k, v in best.items()))
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
