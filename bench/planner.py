"""Planner benchmark over every official workflow template (issue #3).

    python bench/planner.py [--templates DIR] [--out bench/results/planner.md]

For each template of the newest ``comfyui-workflow-templates-json`` and each VRAM size in
{6, 8, 12, 16, 24, 48} GB with 32 GB RAM on PCIe 4: does it parse, does it fit, the minimum VRAM,
predicted transfer seconds for Headroom / ComfyUI's reactive policy / diffusers model offload / the
lower bound, and planning time (parse + order + components + plan). Where brute force is small
enough, Headroom's plan is also checked against it.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import importlib.util
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from comfyui_headroom.memory.planning.baselines import BASELINES  # noqa: E402
from comfyui_headroom.memory.planning.costmodel import Budget, Hardware  # noqa: E402
from comfyui_headroom.memory.planning.pipeline import plan_workflow  # noqa: E402
from comfyui_headroom.memory.planning.planner import plan  # noqa: E402
from comfyui_headroom.memory.units import GiB  # noqa: E402
from comfyui_headroom.memory.workflow.graph import WorkflowError  # noqa: E402
from headroom_testing.bruteforce import brute_force, search_space  # noqa: E402

VRAM_GB = (6, 8, 12, 16, 24, 48)
RAM = 32 * GiB
BRUTE_FORCE_LIMIT = 20_000


def templates_dir() -> Path:
    spec = importlib.util.find_spec("comfyui_workflow_templates_json")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("pip install comfyui-workflow-templates-json (the newest) first")
    return Path(next(iter(spec.submodule_search_locations))) / "templates"


def template_files(folder: Path) -> list[Path]:
    """The templates index.json lists (the folder also holds search settings and translations)."""
    index = json.loads((folder / "index.json").read_text(encoding="utf-8"))
    names = {t["name"] for category in index for t in category["templates"]}
    return sorted(folder / f"{name}.json" for name in names)


def run(folder: Path) -> dict:
    hw = Hardware.pcie(4)
    rows, failures, times, checks = [], collections.Counter(), [], []
    for path in template_files(folder):
        start = time.perf_counter()
        try:
            workload = plan_workflow(path, None, hw).workload  # planned below, once per budget
        except (WorkflowError, ValueError) as exc:
            failures[f"{path.stem}: {str(exc).replace(str(path), '').lstrip(': ')[:160]}"] += 1
            rows.append({"template": path.stem, "parsed": False, "error": str(exc)})
            continue
        prep = time.perf_counter() - start
        used = sorted({c for s in workload.steps for c in s.uses})
        row = {
            "template": path.stem,
            "parsed": True,
            "components": len(used),
            "per_vram": {},
            "notes": [note_kind(n) for n in workload.notes],
            "unknown_types": unknown_types(workload.notes),
        }
        for gb in VRAM_GB:
            budget = Budget.from_card(gb * GiB, RAM)
            t0 = time.perf_counter()
            result = plan(workload, budget, hw)
            times.append(prep + time.perf_counter() - t0)
            outcomes = {name: policy(workload, budget, hw) for name, policy in BASELINES.items()}
            row["per_vram"][gb] = {
                "fits": result.feasible,
                "min_vram": result.min_vram,
                "headroom_s": result.transfer_s,
                **{f"{n}_s": o.transfer_s for n, o in outcomes.items()},
                **{f"{n}_fits": o.fits for n, o in outcomes.items()},
            }
            if result.feasible and search_space(workload) <= BRUTE_FORCE_LIMIT:
                checks.append(result.transfer_s / max(brute_force(workload, budget, hw), 1e-12))
        rows.append(row)
    return {"rows": rows, "failures": failures, "times": times, "checks": checks}


# What a note says, by its wording (memory/planning/extract.py, latents.py, catalog.py), first match wins.
NOTE_KINDS = (
    ("node types unknown to the planner", "unknown to the planner"),
    ("latent size not known before the run (default assumed)", "the latent's size is not known"),
    ("latent size planned from an assumption (aspect, switch branch)", " planned ("),
    ("steps not known before the run (default assumed)", "its steps are not known"),
    ("a value not known before the run (default assumed)", "is not known before the run"),
    ("a model part sized by its released twin", "the same part released on its own"),
    ("model size from a template's note or estimated", "size estimated"),
    ("model loaded but not used", "nothing computes with it"),
    ("a model loader the plan does not count", "does not count"),
    ("planner's bounded search", "held at one tier"),
)


def note_kind(note: str) -> str:
    return next((kind for kind, words in NOTE_KINDS if words in note), "other")


def unknown_types(notes: tuple[str, ...]) -> list[str]:
    """The node types the planner's 'unknown to the planner' note lists."""
    for note in notes:
        if "unknown to the planner" in note:
            listed = note.split("): ", 1)[1].split("; their inputs", 1)[0]
            return [name.split(" (x")[0] for name in listed.split(", ")]
    return []


def _version() -> str:
    from importlib.metadata import version

    return version("comfyui-workflow-templates-json")


def report(data: dict, folder: Path, command: str) -> str:
    rows = data["rows"]
    parsed = [r for r in rows if r["parsed"]]
    with_models = [r for r in parsed if r["components"] > 0]
    multi = [r for r in parsed if r["components"] >= 2]
    times = sorted(data["times"])
    lines = [
        "# Planner benchmark",
        "",
        f"- date: {datetime.date.today().isoformat()}",
        f"- machine: {platform.machine()}, {os.cpu_count()} cores, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()} (CPU only; the planner needs no GPU)",
        f"- command: `{command}`",
        f"- templates: {len(rows)} listed in index.json of comfyui-workflow-templates-json {_version()}",
        "- budgets: card VRAM in the table minus a 0.5 GiB reserve, 32 GiB RAM (16 GiB pinnable), PCIe 4.0",
        "",
        "## Parsing",
        "",
        f"- parsed and planned: {len(parsed)}/{len(rows)} ({100 * len(parsed) / max(len(rows), 1):.1f}%); "
        f"{len(with_models)} use local models, {len(multi)} use two or more",
    ]
    for message, count in data["failures"].most_common():
        lines.append(f"- refused ({count}): {message}")
    lines += [
        "",
        "## Fit and transfer, per card",
        "",
        "Transfer sums are over the multi-model templates that every policy compared can run.",
        "",
        "| VRAM | Headroom fits | ComfyUI fits | only ComfyUI fits | model offload fits "
        "| median min VRAM (GiB) | Headroom s | ComfyUI s | Headroom vs ComfyUI | lower bound s |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for gb in VRAM_GB:
        cells = [r["per_vram"][gb] for r in with_models]
        both = [
            r["per_vram"][gb]
            for r in multi
            if r["per_vram"][gb]["fits"] and r["per_vram"][gb]["comfyui_fits"]
        ]
        ours = sum(c["headroom_s"] for c in both)
        theirs = sum(c["comfyui_s"] for c in both)
        bound = sum(c["lower_bound_s"] for c in both)
        saving = f"{100 * (1 - ours / theirs):.0f}% less" if theirs else "-"
        median_min = statistics.median(c["min_vram"] for c in cells) / GiB if cells else 0
        fits = [sum(c[key] for c in cells) for key in ("fits", "comfyui_fits")]
        fits.append(sum(c["comfyui_fits"] and not c["fits"] for c in cells))
        fits.append(sum(c["model_offload_fits"] for c in cells))
        counts = " | ".join(f"{n}/{len(cells)}" for n in fits)
        lines.append(
            f"| {gb} GB | {counts} | {median_min:.1f} | {ours:.0f} | {theirs:.0f} | {saving} | {bound:.0f} |"
        )
    lines += _target_lines(multi)
    lines += _notes_lines(with_models)
    lines += [
        "",
        "## Optimality and planning time",
        "",
        f"- brute force ran on {len(data['checks'])} (template, VRAM) cases; worst Headroom/optimum ratio: "
        f"{max(data['checks'], default=float('nan')):.6f}",
        f"- planning time per (template, VRAM): median {1000 * statistics.median(times):.1f} ms, "
        f"p95 {1000 * times[int(0.95 * (len(times) - 1))]:.1f} ms, max {1000 * times[-1]:.1f} ms",
    ]
    return "\n".join(lines) + "\n"


def _notes_lines(rows: list[dict]) -> list[str]:
    """What the plans could not read and what they assumed: notes by kind, unknown node types."""
    kinds = collections.Counter(k for r in rows for k in r["notes"])
    with_notes = sum(bool(r["notes"]) for r in rows)
    types = collections.Counter(t for r in rows for t in r["unknown_types"])
    lines = [
        "",
        "## What the plans could not read (notes)",
        "",
        f"Templates that use local models: {len(rows)}; with at least one note: {with_notes}; "
        f"notes: {sum(kinds.values())}. Every assumption is a note; none is made silently.",
        "",
        "| note | count |",
        "|---|---:|",
    ]
    lines += [f"| {kind} | {count} |" for kind, count in kinds.most_common()]
    unknown = ", ".join(f"{t} ({n})" for t, n in types.most_common()) or "none"
    lines += ["", f"Node types unknown to the planner in these templates: {len(types)} ({unknown})."]
    return lines


def _target_lines(multi: list[dict]) -> list[str]:
    """The issue's transfer target: summed over multi-model templates at 8-16 GB, where both fit."""
    cells = [r["per_vram"][gb] for r in multi for gb in (8, 12, 16)]
    both = [c for c in cells if c["fits"] and c["comfyui_fits"]]
    ours, theirs = sum(c["headroom_s"] for c in both), sum(c["comfyui_s"] for c in both)
    only_ours = sum(c["fits"] and not c["comfyui_fits"] for c in cells)
    only_theirs = sum(c["comfyui_fits"] and not c["fits"] for c in cells)
    return [
        "",
        f"Multi-model templates at 8, 12 and 16 GB together ({len(both)} runs both fit): Headroom "
        f"{ours:.0f} s vs ComfyUI {theirs:.0f} s of predicted transfer, "
        f"{100 * (1 - ours / theirs):.0f}% less (target: at least 25% less). Runs only Headroom fits: "
        f"{only_ours}; runs only ComfyUI fits: {only_theirs}.",
    ]


def wall_section() -> list[str]:
    """The wall-time check's headline (bench/wall_time.py writes bench/results/wall_time.md)."""
    path = ROOT / "bench" / "results" / "wall_time.md"
    headline = next((line for line in path.read_text().splitlines() if line.startswith("**Within")), None)
    if headline is None:
        return []
    return ["", "## Wall time against published runs", "", f"{headline} Table: [wall_time.md](wall_time.md)."]


def catalog_section() -> list[str]:
    """The model catalog against the templates' published download sizes (scripts/check_model_catalog.py)."""
    spec = importlib.util.spec_from_file_location(
        "check_model_catalog", ROOT / "scripts" / "check_model_catalog.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    folder = module.templates_dir()
    if folder is None:
        return []
    report = module.check(folder, tolerance=0.05)
    return [
        "",
        "## Model sizes against the sizes the templates' notes state",
        "",
        "Per file; only sizes built from the host's classes count (a size taken from the note",
        "itself matches it by construction). Every file, and why each built outlier differs:",
        "[catalog.md](catalog.md).",
        "",
        "```",
        module.stated_summary(module.stated_check(folder)),
        "```",
        "",
        "## Model catalog against the published template sizes",
        "",
        "```",
        report.summary(worst=5),
        "```",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--templates", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "planner.md")
    parser.add_argument("--json", type=Path, default=None, help="also write every row as JSON")
    args = parser.parse_args()
    folder = args.templates or templates_dir()
    data = run(folder)
    text = report(data, folder, "python " + " ".join(sys.argv))
    text += "\n".join(wall_section() + catalog_section()) + "\n"
    print(text)
    args.out.write_text(text)
    if args.json:
        args.json.write_text(json.dumps(data["rows"], indent=1, default=str))


if __name__ == "__main__":
    main()
