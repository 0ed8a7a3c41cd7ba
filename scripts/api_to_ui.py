"""Turn an API prompt into a UI workflow a person can drag onto the ComfyUI canvas.

    python scripts/api_to_ui.py workflows/api/flux_dev_t2i.json workflows/flux_dev_t2i.json

Widget values go in the order the node table (memory/data/node_types.json) gives, with the
"control after generate" value after seeds; nodes are laid out in columns by dependency depth.
tests/unit/test_examples.py checks that each UI workflow parses to exactly its API twin.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from comfyui_headroom.memory.workflow.node_types import lookup


def convert(prompt: dict) -> dict:
    ids = {node_id: int(node_id) for node_id in prompt}
    depth: dict[str, int] = {}

    def level(node_id: str) -> int:
        if node_id not in depth:
            ups = [v[0] for v in prompt[node_id]["inputs"].values() if isinstance(v, list) and len(v) == 2]
            depth[node_id] = 1 + max((level(u) for u in ups), default=-1)
        return depth[node_id]

    links, nodes, rows = [], [], {}
    out_links: dict[tuple[str, int], list[int]] = {}
    for node_id in sorted(prompt, key=lambda n: (level(n), ids[n])):
        node = prompt[node_id]
        spec = lookup(node["class_type"])
        if spec is None:
            raise SystemExit(f"node {node_id}: {node['class_type']} is not in the node table")
        inputs, widgets = [], []
        for field in spec.inputs:
            value = node["inputs"].get(field.name)
            if isinstance(value, list) and len(value) == 2 and isinstance(value[0], str):
                links.append([len(links) + 1, ids[value[0]], value[1], ids[node_id], len(inputs), field.type])
                out_links.setdefault((value[0], value[1]), []).append(len(links))
                entry = {"name": field.name, "type": field.type, "link": len(links)}
                if field.widget:
                    entry["widget"] = {"name": field.name}
                inputs.append(entry)
                if not field.widget:
                    continue
            elif not field.widget:
                continue
            if value is None and field.optional:
                raise SystemExit(f"node {node_id}: give the optional widget {field.name} a value")
            widgets.append(None if isinstance(value, list) else value)
            if field.control:
                widgets.append("fixed")
            if field.upload:
                widgets.append("image")
        column = level(node_id)
        row = rows.get(column, 0)
        rows[column] = row + 1
        outputs = [{"name": t, "type": t, "links": [], "slot_index": k} for k, t in enumerate(spec.outputs)]
        nodes.append({
            "id": ids[node_id], "type": node["class_type"], "pos": [60 + 360 * column, 60 + 220 * row],
            "size": [320, 140], "flags": {}, "order": len(nodes), "mode": 0, "inputs": inputs,
            "outputs": outputs,
            "properties": {"Node name for S&R": node["class_type"]}, "widgets_values": widgets,
        })  # fmt: skip
    by_id = {n["id"]: n for n in nodes}
    for (node_id, slot), link_ids in out_links.items():
        by_id[ids[node_id]]["outputs"][slot]["links"] = link_ids
    return {
        "last_node_id": max(ids.values()), "last_link_id": len(links), "nodes": nodes, "links": links,
        "groups": [], "config": {}, "extra": {"ds": {"scale": 0.8, "offset": [0, 0]}}, "version": 0.4,
    }  # fmt: skip


if __name__ == "__main__":
    source, target = Path(sys.argv[1]), Path(sys.argv[2])
    target.write_text(json.dumps(convert(json.loads(source.read_text())), indent=1) + "\n")
