"""Build memory/data/model_urls.json: where the official templates download each catalog file from.

The templates (pip install comfyui-workflow-templates-json) list, on their loader nodes, each model
file with its URL (``properties.models``). Only files the catalog sizes are kept: the "make it fit"
remedies (memory/planning/remedies.py) offer a lower-precision file with its size and this link.

Usage: python scripts/build_model_urls.py [--out memory/data/model_urls.json]
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "memory" / "data" / "model_urls.json"


def _models(data: Any) -> Iterator[dict[str, Any]]:
    """Every ``properties.models`` entry of a workflow, subgraphs included."""
    if isinstance(data, dict):
        models = (
            data.get("properties", {}).get("models") if isinstance(data.get("properties"), dict) else None
        )
        if isinstance(models, list):
            yield from (m for m in models if isinstance(m, dict))
        for value in data.values():
            yield from _models(value)
    elif isinstance(data, list):
        for value in data:
            yield from _models(value)


def main() -> None:
    import comfyui_workflow_templates_json as package

    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    catalog = json.loads((ROOT / "memory" / "data" / "model_catalog.json").read_text())["files"]
    urls: dict[str, str] = {}
    folder = Path(package.__file__).parent / "templates"
    for path in sorted(folder.glob("*.json")):
        for model in _models(json.loads(path.read_text(encoding="utf-8"))):
            name, url = model.get("name"), model.get("url")
            if name in catalog and isinstance(url, str) and url.startswith("https://"):
                urls.setdefault(name, url)
    from importlib.metadata import version as dist_version

    version = dist_version("comfyui-workflow-templates-json")
    out = {
        "generated_by": "scripts/build_model_urls.py",
        "templates": version,
        "urls": dict(sorted(urls.items())),
    }
    args.out.write_text(json.dumps(out, indent=0) + "\n", encoding="utf-8")
    print(f"{len(urls)} of {len(catalog)} catalog files have a URL -> {args.out}")


if __name__ == "__main__":
    main()
