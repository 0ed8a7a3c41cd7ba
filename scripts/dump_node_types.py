"""Write memory/data/node_types.json from a real ComfyUI: what the planner must know about each node class.

Usage: COMFYUI_ROOT=/path/to/ComfyUI python scripts/dump_node_types.py [--out memory/data/node_types.json]
       COMFYUI_ROOT=/path/to/ComfyUI python scripts/dump_node_types.py --pack   (Headroom's own nodes,
       to memory/data/headroom_nodes.json, so the planner and scripts/api_to_ui.py know them too)

The host is imported in-process on CPU with its built-in extras (comfy_extras) and its API nodes (the
official templates use them), without custom nodes. ``--keep-from OLD.json`` keeps the classes of an
older table that this host no longer has (saved workflows still name them), listed under "older".
For every class in ``nodes.NODE_CLASS_MAPPINGS`` it records what the executor itself
looks at (``OUTPUT_NODE == True``, whether ``FUNCTION`` is a coroutine, ``"lazy"`` in ``INPUT_TYPES()``)
and what the frontend needs to map ``widgets_values`` to input names (the /object_info view of the
node, ``node_info``). Options lists, tooltips and defaults are dropped to keep the file small.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import importlib.abc
import importlib.machinery
import inspect
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

PACK_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = PACK_ROOT / "memory" / "data" / "node_types.json"
PACK_OUT = PACK_ROOT / "memory" / "data" / "headroom_nodes.json"  # --pack: our own nodes, same format

# Input types the frontend draws as a widget (and serialises into widgets_values) rather than a socket.
# COMBO covers list-typed inputs. Other custom widget types of 0.3.64 (e.g. the image-compare preview)
# do not serialise a value the executor reads, so they are treated as sockets.
WIDGET_TYPES = {"INT", "FLOAT", "BOOLEAN", "STRING", "COMBO", "COLOR", "LOAD_3D"}
# The V3 API's dynamic combo (0.3x hosts: SaveVideo's format, ...) is drawn as a combo widget whose
# value chooses which nested inputs follow (named "<combo>.<input>"); it is recorded as a COMBO widget
# with its options (key -> nested input rows) as a fourth element. Drawn as widgets as well: COLOR
# (V3 Color) and LOAD_3D (the 3D viewport's state); a V3 MultiType input ("FLOAT,INT") draws the
# widget its first type names ("widgetType").
DYNAMIC_COMBO = "COMFY_DYNAMICCOMBO_V3"
# A V3 MatchType input or output takes the type of what is linked to it (the If/Else switch, image
# resize): recorded as "*", which the planner passes through.
MATCH_TYPE = "COMFY_MATCHTYPE_V3"
UPLOAD_OPTIONS = ("image_upload", "video_upload", "animated_image_upload", "audio_upload", "mesh_upload")


def import_host(root: Path) -> Any:
    """Import ComfyUI from ``root`` on CPU with its built-in extra nodes; returns the ``nodes`` module."""
    sys.path.insert(0, str(root))
    sys.path.insert(0, str(PACK_ROOT / "tests"))
    from headroom_testing.harness import install_optional_placeholders

    install_optional_placeholders()  # torchvision, torchaudio: classes importing them are still described
    from comfy.cli_args import args

    args.cpu = True  # before comfy.model_management is first imported
    # main.py imports the host's `utils` package first; without that, a comfy_extras import puts
    # comfy/utils.py in sys.modules as `utils` and server.py (needed by nodes_images) fails to import.
    importlib.import_module("utils.install_util")
    import nodes

    asyncio.run(nodes.init_extra_nodes(init_custom_nodes=False, init_api_nodes=True))
    return nodes


def node_info(cls: type) -> dict[str, Any]:
    """The /object_info entry of a class, as server.py builds it (V3 classes describe themselves)."""
    if hasattr(cls, "GET_NODE_INFO_V1"):
        return cls.GET_NODE_INFO_V1()
    types = cls.INPUT_TYPES()
    return {
        "input": types,
        "input_order": {key: list(value) for key, value in types.items()},
        "output": cls.RETURN_TYPES,
    }


def input_flags(
    name: str, type_name: Any, options: dict[str, Any], optional: bool, lazy: bool
) -> tuple[str, str]:
    """(type, flags) of one input. Flags: w widget, c control_after_generate value follows,
    u upload-button value follows, l lazy, o optional."""
    kind = "COMBO" if isinstance(type_name, (list, tuple)) or type_name == DYNAMIC_COMBO else str(type_name)
    kind = "*" if kind == MATCH_TYPE else kind
    flags = ""
    drawn = kind in WIDGET_TYPES or options.get("widgetType") in WIDGET_TYPES
    widget = drawn and not options.get("forceInput") and not options.get("defaultInput")
    if widget:
        flags += "w"
        # The frontend's rule: INT widgets named seed/noise_seed get one unless the spec says otherwise.
        control = options.get("control_after_generate")
        if control is None and kind == "INT":
            control = name in ("seed", "noise_seed")
        if control:
            flags += "c"
        if any(options.get(name) for name in UPLOAD_OPTIONS):
            flags += "u"
    if lazy:
        flags += "l"
    if optional:
        flags += "o"
    return kind, flags


def input_rows(described: dict[str, Any], raw_types: dict[str, Any], order: dict | None) -> list[list]:
    """One row per input of an INPUT_TYPES-shaped dict, dynamic combos with their options' rows."""
    rows: list[list] = []
    for section in ("required", "optional"):
        specs = described.get(section) or {}
        for input_name in (order or {}).get(section) or list(specs):
            spec = specs[input_name]
            options = spec[1] if len(spec) > 1 and isinstance(spec[1], dict) else {}
            raw = (raw_types.get(section) or {}).get(input_name) or ()
            raw_options = raw[1] if len(raw) > 1 and isinstance(raw[1], dict) else {}
            lazy = bool(raw_options.get("lazy"))
            kind, flags = input_flags(input_name, spec[0], options, section == "optional", lazy)
            row: list = [input_name, kind, flags]
            if spec[0] == DYNAMIC_COMBO and options.get("options"):
                nested = {o["key"]: input_rows(o.get("inputs") or {}, {}, None) for o in options["options"]}
                row.append(nested)
            rows.append(row if flags or len(row) > 3 else row[:2])
    return rows


def describe(name: str, cls: type) -> dict[str, Any]:
    info = node_info(cls)
    raw_types = cls.INPUT_TYPES()  # what ExecutionList reads for "lazy"
    inputs = input_rows(info["input"], raw_types, info.get("input_order"))
    entry: dict[str, Any] = {
        "i": inputs,
        "r": ["*" if t == MATCH_TYPE else str(t) if isinstance(t, str) else "COMBO" for t in info["output"]],
    }
    # Exactly the tests of execution.py's validate_prompt / graph.py's ux_friendly_pick_node.
    if getattr(cls, "OUTPUT_NODE", False) is True:
        entry["out"] = 1
    if inspect.iscoroutinefunction(getattr(cls, cls.FUNCTION)):
        entry["async"] = 1
    # What makes caching.py's input signature of a node unique to it (IsChangedCache and
    # CacheKeySetInputSignature): a fingerprint/IS_CHANGED value, or the node id itself.
    if has_fingerprint(cls):
        entry["chg"] = 1
    hidden = (raw_types.get("hidden") or {}).values()
    if getattr(cls, "NOT_IDEMPOTENT", False) or "UNIQUE_ID" in hidden:
        entry["uid"] = 1
    return entry


def has_fingerprint(cls: type) -> bool:
    try:
        from comfy_api.internal import _ComfyNodeInternal, first_real_override
    except ImportError:  # hosts before the V3 API
        return hasattr(cls, "IS_CHANGED")
    if issubclass(cls, _ComfyNodeInternal) and first_real_override(cls, "fingerprint_inputs") is not None:
        return True
    return hasattr(cls, "IS_CHANGED")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=os.environ.get("COMFYUI_ROOT"), help="ComfyUI checkout")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--pack", action="store_true", help="describe Headroom's own nodes instead")
    parser.add_argument("--keep-from", type=Path, help="an older table whose classes this host lacks stay in")
    ns = parser.parse_args(argv)
    ns.out = ns.out or (PACK_OUT if ns.pack else DEFAULT_OUT)
    if not ns.root:
        parser.error("set COMFYUI_ROOT (or --root) to a ComfyUI checkout")
    root = Path(ns.root).resolve()
    nodes = import_host(root)
    logging.disable(logging.CRITICAL)
    try:
        version = __import__("comfyui_version").__version__
    except ImportError:
        version = "unknown"
    names = sorted(nodes.NODE_CLASS_MAPPINGS)
    if ns.pack:
        before = set(names)
        asyncio.run(nodes.load_custom_node(str(PACK_ROOT)))
        names = sorted(set(nodes.NODE_CLASS_MAPPINGS) - before)
    types, failed = {}, []
    for name in names:
        try:
            types[name] = describe(name, nodes.NODE_CLASS_MAPPINGS[name])
        except Exception as exc:  # one broken class must not lose the others; listed below
            failed.append(f"{name}: {exc!r}")
    data: dict[str, Any] = {"host": f"ComfyUI {version}", "format": 1, "types": types}
    if ns.keep_from:
        older = json.loads(ns.keep_from.read_text(encoding="utf-8"))
        kept = {name: entry for name, entry in older["types"].items() if name not in types}
        types.update(kept)
        data["older"] = {"host": older.get("older", {}).get("host", older["host"]), "types": sorted(kept)}
    ns.out.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(data, separators=(",", ":"), sort_keys=False)
    ns.out.write_text(text.replace('},"', '},\n"') + "\n", encoding="utf-8")
    print(f"{len(types)} node types from ComfyUI {version} -> {ns.out} ({len(text) // 1024} KiB)")
    for line in failed:
        print("skipped", line, file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
