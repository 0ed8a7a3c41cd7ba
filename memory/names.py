"""Names that several layers must spell alike: the node ids, the Offload Loader's inputs (the node
declares them, the planner reads them from workflows, the host layer from the node's call), the
websocket events and the read-only routes (the server sends and serves them, ``js/lib/names.js``
mirrors them for the browser; tests/unit/test_names.py compares the two)."""

from __future__ import annotations

# The pack's node ids (frozen: saved workflows name them); every layer reads them from here.
NODE_IDS: dict[str, str] = {
    "offload_loader": "HeadroomOffloadLoader",
    "streaming_sampler": "HeadroomStreamingSampler",
    "stream_model": "HeadroomStreamModel",
    "stream_clip": "HeadroomStreamCLIP",
    "tiled_vae_decode": "HeadroomTiledVAEDecode",
    "memory_monitor": "HeadroomMemoryMonitor",
}
OFFLOAD_LOADER = NODE_IDS["offload_loader"]
STREAM_MODEL = NODE_IDS["stream_model"]

# The Offload Loader's inputs: per component kind, its file inputs and its residency choice.
OFFLOAD_CHECKPOINT_INPUT = "checkpoint"
OFFLOAD_FILE_INPUTS: dict[str, tuple[str, ...]] = {
    "diffusion_model": ("diffusion_model",),
    "text_encoder": ("text_encoder_1", "text_encoder_2", "text_encoder_3"),
    "vae": ("vae",),
}
OFFLOAD_RESIDENCY_INPUTS: dict[str, str] = {
    "diffusion_model": "model_residency",
    "text_encoder": "text_encoder_residency",
    "vae": "vae_residency",
}

# Websocket events the server sends, by what they carry.
EVENTS: dict[str, str] = {
    "sample": "headroom.sample",
    "node": "headroom.node",
    "preflight": "headroom.preflight",
    "residency": "headroom.residency",
    "node_text": "headroom.node_text",
}
# Routes, as aiohttp patterns: all read-only but ram_budget (POST: the frontend's RAM budget setting) and
# fit (POST: plan the open workflow's prompt without queueing it).
ROUTES: dict[str, str] = {
    "status": "/headroom/status",
    "plan": "/headroom/plan/{prompt_id}",
    "report": "/headroom/report/{prompt_id}",
    "residency": "/headroom/residency/{prompt_id}",
    "ram": "/headroom/ram/{prompt_id}",
    "ram_budget": "/headroom/ram_budget",
    "runs": "/headroom/runs",
    # the CUDA allocator's history: GET its state, POST {"record": true|false} to arm or disarm it for the
    # next prompt, {"stop": true} to end a recording now; GET .../{prompt_id} the snapshot file
    "memory_history": "/headroom/memory_history",
    "memory_history_file": "/headroom/memory_history/{prompt_id}",
    "fit": "/headroom/fit",
}
