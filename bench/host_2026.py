"""The host the user has (issue #28): predicted transfer seconds of the 2026 host (ComfyUI 0.33, DynamicVRAM
and the RAM-pressure cache, `memory/planning/paging_host.py`), alone and with Headroom's release, next to
the 0.3.x reactive loader and Headroom's own plan, on the official templates most reported in 2026 (Wan 2.2
14B's two experts, LTX-2.3, HunyuanVideo 1.5, Qwen-Image, Flux-dev) at common machines.

    python bench/host_2026.py [--out bench/results/host_2026.md]

Every figure is the cost model's (PCIe 4: pinned 25 GB/s, pageable 12 GB/s, disk 3 GB/s): a prediction
of moved bytes over link rates, not a measurement. The first run reads the weights from disk on every
host; the repeat run (same workflow, new seed: the host serves the encode from its cache) is where the
hosts' RAM policies differ. Headroom's plan streams with its own engine, which runs on hosts that do not
page (0.3.x, --disable-dynamic-vram, GGUF); on a DynamicVRAM host Headroom acts through the host's levers
instead, the "2026 + Headroom" column.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from comfyui_headroom.memory.planning.baselines import comfyui_reactive  # noqa: E402
from comfyui_headroom.memory.planning.costmodel import Budget, Hardware  # noqa: E402
from comfyui_headroom.memory.planning.host_advice import rerun_nodes  # noqa: E402
from comfyui_headroom.memory.planning.host_settings import HostSettings  # noqa: E402
from comfyui_headroom.memory.planning.paging_host import paging_host  # noqa: E402
from comfyui_headroom.memory.planning.pipeline import plan_workflow  # noqa: E402
from comfyui_headroom.memory.planning.planner import plan  # noqa: E402
from comfyui_headroom.memory.units import GB, GiB, format_bytes  # noqa: E402

TEMPLATES = (
    "video_wan2_2_14B_t2v",
    "video_wan2_2_14B_i2v",
    "video_ltx2_3_t2v",
    "video_hunyuan_video_1.5_720p_t2v",
    "image_qwen_image",
    "flux_dev_full_text_to_image",
)
MACHINES = ((12, 32), (16, 32), (16, 64), (24, 64))  # (VRAM GB, RAM GB)


def _templates() -> Path:
    try:
        import comfyui_workflow_templates_json as package
    except ImportError:
        sys.exit("pip install comfyui-workflow-templates-json first")
    return Path(package.__file__).parent / "templates"


def rows() -> list[str]:
    hw = Hardware.pcie(4)
    out = []
    for name in TEMPLATES:
        path = _templates() / f"{name}.json"
        if not path.exists():
            out.append(f"| {name} | - | not in this templates package | | | | |")
            continue
        planned = plan_workflow(path, None, hw)
        rerun = rerun_nodes(planned.graph, planned.order)
        for vram, ram in MACHINES:
            budget = Budget.from_card(int(vram * GB), int(ram * GB))
            ours = plan(planned.workload, budget, hw)
            old = comfyui_reactive(planned.workload, budget, hw)
            host = paging_host(planned.workload, budget, hw, HostSettings(), rerun=rerun)
            kept = paging_host(planned.workload, budget, hw, HostSettings(), rerun=rerun, headroom=True)
            reloads = format_bytes(sum(host.reloads.values())) if host.reloads else "nothing"
            cells = [
                f"{ours.transfer_s:.1f}" if ours.feasible else "does not fit",
                f"{old.transfer_s:.1f}" if old.fits else f"OOM ({old.transfer_s:.1f})",
                f"{host.runs_s[0]:.1f} / {host.runs_s[1]:.1f}",
                f"{kept.runs_s[1]:.1f}",
                f"{reloads} / {format_bytes(sum(kept.reloads.values())) if kept.reloads else 'nothing'}",
            ]
            out.append(f"| {name} | {vram} GB / {ram} GB | " + " | ".join(cells) + " |")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    lines = [
        f"# The host the user has: predicted transfer seconds ({datetime.date.today()})",
        "",
        f"- command: `python bench/host_2026.py{' --out ' + str(args.out) if args.out else ''}`",
        f"- machine: {platform.machine()}, Python {platform.python_version()} (a prediction: the machine "
        "does not matter)",
        "- the cost model's figures (PCIe 4: pinned 25, pageable 12, disk 3 GB/s); transfer only, no compute",
        "",
        "| template | VRAM / RAM | Headroom plan | 0.3.x | 2026 host: run 1 / repeat | 2026 + Headroom: "
        "repeat | repeat run reloads: host / + Headroom |",
        "|---|---|---|---|---|---|---|",
        *rows(),
        "",
        f"RAM figures are the machine's (GB = 10^9 bytes; {GiB / GB:.3f} GB per GiB). The 2026 host's "
        "numbers assume no swap (its Linux pinned cap) and no page cache for re-reads.",
    ]
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
