"""Put a card's measured efficiency in the table the planner reads (issue #26).

    python scripts/gpu_efficiency.py merge bench/results/gpu-check/gpu_throughput.json [--data FILE]

``bench/gpu_throughput_gpu.py --json`` (a step of scripts/gpu-check) measures a card's bf16 matmul and
attention throughput at diffusion shapes; this turns them into the card's efficiency shares
(``gpus.efficiency_from_kernels``) and writes them under the card's table name in
memory/data/gpu_efficiency.json, which ``gpus.find_gpu`` reads before the defaults. Commit the file.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT.parent))

from comfyui_headroom.memory.planning.gpus import MEASURED_PATH, efficiency_from_kernels, find_gpu  # noqa: E402


def merge(result: dict, data: Path) -> str:
    card = find_gpu(str(result.get("device") or ""))
    if card is None:
        raise SystemExit(
            f"error: {result.get('device')!r} is not a card of memory/planning/gpus.py: add it first"
        )
    best = result["best_tflops"]
    source = (
        f"measured by bench/gpu_throughput_gpu.py on {result['device']} {datetime.date.today()}: "
        f"bf16 matmul {best['bf16_matmul']:.0f}, attention {best['bf16_attention']:.0f} TFLOPS"
    )
    eff = efficiency_from_kernels(card, best["bf16_matmul"], best["bf16_attention"], source)
    table = json.loads(data.read_text()) if data.exists() else {"cards": {}}
    table.setdefault("cards", {})[card.name] = {
        "matmul": round(eff.matmul, 3), "attention": round(eff.attention, 3), "source": source,
    }  # fmt: skip
    data.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    return f"{card.name}: matmul {eff.matmul:.3f}, attention {eff.attention:.3f} -> {data}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("merge", help="a gpu_throughput.json into the table")
    m.add_argument("result", type=Path)
    m.add_argument("--data", type=Path, default=MEASURED_PATH)
    args = parser.parse_args(argv)
    print(merge(json.loads(args.result.read_text()), args.data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
