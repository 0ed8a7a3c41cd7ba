"""Turn an API prompt into a UI workflow a person can drag onto the ComfyUI canvas.

    python scripts/api_to_ui.py "example_workflows/api/Flux Dev text to image.json" out.json [sizes.json]

Widget values go in the order the node table (memory/data/node_types.json) gives, with the
"control after generate" value after seeds. Nodes are laid out in columns by dependency depth, each
column as wide as its widest node and each node stacked under the previous one by its real height, so
that nothing overlaps once the frontend has grown every node to its ``computeSize()``. Real sizes come
from the browser (``sizes.json``: node id -> [w, h], measured by scripts/make_examples.py); without
them the size is estimated the way frontend 1.27 computes it. Loader nodes get
``properties.models`` (name, url, directory), which the frontend's missing-models dialog offers to
download. tests/unit/test_examples.py checks that each UI workflow parses to exactly its API twin.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from comfyui_headroom.memory.workflow.node_types import NodeType, lookup

# LiteGraph's constants in frontend 1.27: the title bar is drawn above a node's pos.
TITLE_HEIGHT, SLOT_HEIGHT, WIDGET_HEIGHT = 30, 20, 20
GAP_X, GAP_Y, MARGIN = 80, 50, 40
NOTE_SIZE = (440, 520)
# Download links, exactly as the official templates (comfyui-workflow-templates) give them for the same
# files: flux_dev_full_text_to_image.json and video_wan2_2_14B_t2v.json.
HF = "https://huggingface.co"
FLUX = f"{HF}/Comfy-Org/flux1-dev/resolve/main"
FLUX_TE = f"{HF}/comfyanonymous/flux_text_encoders/resolve/main"
LUMINA = f"{HF}/Comfy-Org/Lumina_Image_2.0_Repackaged/resolve/main/split_files"
WAN21 = f"{HF}/Comfy-Org/Wan_2.1_ComfyUI_repackaged/resolve/main/split_files"
WAN22 = f"{HF}/Comfy-Org/Wan_2.2_ComfyUI_Repackaged/resolve/main/split_files"
SDXL = f"{HF}/stabilityai/stable-diffusion-xl-base-1.0/resolve/main"
HY15 = (
    f"{HF}/Comfy-Org/HunyuanVideo_1.5_repackaged/resolve/main/split_files"  # video_hunyuan_video_1.5_720p_t2v
)
# image_flux2_klein_image_edit_4b_distilled
KLEIN = f"{HF}/black-forest-labs/FLUX.2-klein-4b-fp8/resolve/main"
FLUX2 = f"{HF}/Comfy-Org/flux2-dev/resolve/main/split_files"  # image_flux2_klein_text_to_image
ZIMAGE = f"{HF}/Comfy-Org/z_image_turbo/resolve/main/split_files"  # image_z_image_turbo_int8
MODEL_LINKS = {  # file name -> (models/ folder, url)
    "flux-2-klein-4b-fp8.safetensors": ("diffusion_models", f"{KLEIN}/flux-2-klein-4b-fp8.safetensors"),
    "qwen_3_4b_fp8_mixed.safetensors": (
        "text_encoders", f"{ZIMAGE}/text_encoders/qwen_3_4b_fp8_mixed.safetensors",
    ),
    "flux2-vae.safetensors": ("vae", f"{FLUX2}/vae/flux2-vae.safetensors"),
    "hunyuanvideo1.5_720p_t2v_fp16.safetensors": (
        "diffusion_models", f"{HY15}/diffusion_models/hunyuanvideo1.5_720p_t2v_fp16.safetensors",
    ),
    "qwen_2.5_vl_7b_fp8_scaled.safetensors": (
        "text_encoders", f"{HY15}/text_encoders/qwen_2.5_vl_7b_fp8_scaled.safetensors",
    ),
    "byt5_small_glyphxl_fp16.safetensors": (
        "text_encoders", f"{HY15}/text_encoders/byt5_small_glyphxl_fp16.safetensors",
    ),
    "hunyuanvideo15_vae_fp16.safetensors": ("vae", f"{HY15}/vae/hunyuanvideo15_vae_fp16.safetensors"),
    "sd_xl_base_1.0.safetensors": (
        "checkpoints", f"{SDXL}/sd_xl_base_1.0.safetensors",
    ),
    "flux1-dev.safetensors": ("diffusion_models", f"{FLUX}/flux1-dev.safetensors"),
    "ae.safetensors": ("vae", f"{LUMINA}/vae/ae.safetensors"),
    "clip_l.safetensors": ("text_encoders", f"{FLUX_TE}/clip_l.safetensors"),
    "t5xxl_fp16.safetensors": ("text_encoders", f"{FLUX_TE}/t5xxl_fp16.safetensors"),
    "umt5_xxl_fp8_e4m3fn_scaled.safetensors": (
        "text_encoders", f"{WAN21}/text_encoders/umt5_xxl_fp8_e4m3fn_scaled.safetensors",
    ),
    "wan2.2_t2v_high_noise_14B_fp8_scaled.safetensors": (
        "diffusion_models", f"{WAN22}/diffusion_models/wan2.2_t2v_high_noise_14B_fp8_scaled.safetensors",
    ),
    "wan2.2_t2v_low_noise_14B_fp8_scaled.safetensors": (
        "diffusion_models", f"{WAN22}/diffusion_models/wan2.2_t2v_low_noise_14B_fp8_scaled.safetensors",
    ),
    "wan_2.1_vae.safetensors": ("vae", f"{WAN22}/vae/wan_2.1_vae.safetensors"),
}  # fmt: skip


def estimate_size(spec: NodeType, linked: set[str]) -> tuple[int, int]:
    """LGraphNode.computeSize() of frontend 1.27 without a browser: socket rows, then each widget
    (20 px + 4, a multiline text box 100 px), 8 + 6 px of padding; the width is a guess (the frontend
    measures the text), wide enough for most model file names in the combos."""
    sockets = [f for f in spec.inputs if not f.widget and f.name in linked]
    rows = max(len(sockets), len(spec.outputs), 1)
    widgets = [f for f in spec.inputs if f.widget]
    heights = [100 if f.type == "STRING" and f.name == "text" else WIDGET_HEIGHT for f in widgets]
    heights += [WIDGET_HEIGHT] * sum(1 for f in widgets if f.control or f.upload)
    height = rows * SLOT_HEIGHT + (sum(h + 4 for h in heights) + 8 if heights else 0) + 6
    return 320, height


def node_models(values: list) -> list[dict]:
    """The download entries for the model files this node's widgets name (the frontend offers those
    whose name is one of the node's widget values)."""
    names = [v for v in values if isinstance(v, str) and v in MODEL_LINKS]
    return [
        {"name": n, "url": MODEL_LINKS[n][1], "directory": MODEL_LINKS[n][0]} for n in dict.fromkeys(names)
    ]


def convert(prompt: dict, sizes: dict[str, list[float]] | None = None, note: str | None = None) -> dict:
    """The UI workflow of ``prompt``; ``sizes`` (node id -> [w, h], measured) raises the estimated sizes,
    ``note`` (markdown) adds a MarkdownNote left of the graph."""
    sizes = sizes or {}
    ids = {node_id: int(node_id) for node_id in prompt}
    depth: dict[str, int] = {}

    def level(node_id: str) -> int:
        if node_id not in depth:
            ups = [v[0] for v in prompt[node_id]["inputs"].values() if isinstance(v, list) and len(v) == 2]
            depth[node_id] = 1 + max((level(u) for u in ups), default=-1)
        return depth[node_id]

    links, nodes, size_of = [], [], {}
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
        linked = {i["name"] for i in inputs}
        guess = estimate_size(spec, linked)  # a floor: roomier prompt boxes and combos than the minimum
        size_of[node_id] = [
            int(max(a, b) + 0.999) for a, b in zip(sizes.get(node_id, guess), guess, strict=True)
        ]
        outputs = [{"name": t, "type": t, "links": [], "slot_index": k} for k, t in enumerate(spec.outputs)]
        properties: dict = {"Node name for S&R": node["class_type"]}
        if models := node_models(widgets):
            properties["models"] = models
        nodes.append({
            "id": ids[node_id], "type": node["class_type"], "pos": [0, 0], "size": size_of[node_id],
            "flags": {}, "order": len(nodes), "mode": 0, "inputs": inputs, "outputs": outputs,
            "properties": properties, "widgets_values": widgets,
        })  # fmt: skip
    by_id = {n["id"]: n for n in nodes}
    for (node_id, slot), link_ids in out_links.items():
        by_id[ids[node_id]]["outputs"][slot]["links"] = link_ids
    _lay_out(nodes, {ids[k]: level(k) for k in prompt}, left=MARGIN + (NOTE_SIZE[0] + GAP_X if note else 0))
    last_id = max(ids.values())
    if note:
        last_id += 1
        nodes.insert(0, {
            "id": last_id, "type": "MarkdownNote", "pos": [MARGIN, MARGIN + TITLE_HEIGHT],
            "size": list(NOTE_SIZE), "flags": {}, "order": 0, "mode": 0, "inputs": [], "outputs": [],
            "title": "About this workflow", "properties": {}, "widgets_values": [note],
            "color": "#432", "bgcolor": "#653",
        })  # fmt: skip
        for order, node in enumerate(nodes):
            node["order"] = order
    # The view it opens at: 75 % with the top-left corner clear of the sidebar and the menu. (Fitting a
    # wide graph into the window zooms below 60 %, where the frontend drops all text from the nodes.)
    return {
        "last_node_id": last_id, "last_link_id": len(links), "nodes": nodes, "links": links,
        "groups": [], "config": {}, "extra": {"ds": {"scale": 0.75, "offset": [100, 90]}}, "version": 0.4,
    }  # fmt: skip


def _lay_out(nodes: list[dict], depth: dict[int, int], left: int) -> None:
    """Columns by depth, each as wide as its widest node; nodes stacked by their height plus the title
    bar drawn above pos, with gaps, so no two boxes (title included) meet."""
    x = left
    for column in sorted(set(depth.values())):
        members = [n for n in nodes if depth[n["id"]] == column]
        y = MARGIN
        for node in members:
            node["pos"] = [x, y + TITLE_HEIGHT]
            y += TITLE_HEIGHT + node["size"][1] + GAP_Y
        x += max(n["size"][0] for n in members) + GAP_X


if __name__ == "__main__":
    source, target = Path(sys.argv[1]), Path(sys.argv[2])
    measured = json.loads(Path(sys.argv[3]).read_text()) if len(sys.argv) > 3 else None
    workflow = convert(json.loads(source.read_text()), measured)
    target.write_text(json.dumps(workflow, indent=1) + "\n")
