// Names the server spells the same way: mirrored from memory/names.py (tests/unit/test_names.py compares).

// The pack's node ids (frozen: saved workflows name them).
export const NODE_IDS = {
  offload_loader: "HeadroomOffloadLoader",
  streaming_sampler: "HeadroomStreamingSampler",
  stream_model: "HeadroomStreamModel",
  stream_clip: "HeadroomStreamCLIP",
  tiled_vae_decode: "HeadroomTiledVAEDecode",
  memory_monitor: "HeadroomMemoryMonitor",
};
export const EVENTS = {
  sample: "headroom.sample",
  node: "headroom.node",
  preflight: "headroom.preflight",
  residency: "headroom.residency",
  node_text: "headroom.node_text",
};

export const ROUTES = {
  status: "/headroom/status",
  plan: "/headroom/plan/{prompt_id}",
  report: "/headroom/report/{prompt_id}",
  residency: "/headroom/residency/{prompt_id}",
  ram: "/headroom/ram/{prompt_id}",
  ram_budget: "/headroom/ram_budget",
  runs: "/headroom/runs",
  memory_history: "/headroom/memory_history",
  memory_history_file: "/headroom/memory_history/{prompt_id}",
  fit: "/headroom/fit",
};

// A route with its {prompt_id} filled in (URL-encoded).
export function route(name, promptId) {
  return ROUTES[name].replace("{prompt_id}", encodeURIComponent(promptId ?? ""));
}
