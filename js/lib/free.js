// "Free VRAM": ask the host to unload every model and free its cached memory (POST /free), then say what
// that did on this server. No host imports: the caller passes the api and app (unit-tested under Node).
import { ROUTES } from "./names.js";

/** The toast after POST /free: truthful on a server without a GPU, where only RAM is freed. */
export function freeToast(ok, hasGpu) {
  if (!ok) return { severity: "error", summary: "Headroom: could not unload the models", life: 5000 };
  return {
    severity: "success",
    summary: hasGpu ? "Headroom: models unloaded; VRAM freed" : "Headroom: models unloaded; RAM freed — no GPU on this server",
    life: 4000,
  };
}

/** Whether the server has a CUDA device, from GET /headroom/status; null when it cannot tell. */
export async function serverHasGpu(api) {
  try {
    const response = await api.fetchApi(`${ROUTES.status}?limit=1`);
    if (!response.ok) return null;
    return Boolean((await response.json()).sources?.cuda);
  } catch {
    return null;
  }
}

/** Unload models and free memory; shows and returns the toast. `after` runs once the host answered. */
export async function freeVram({ api, app, after } = {}) {
  api = api ?? globalThis.comfyAPI?.api?.api;
  app = app ?? globalThis.app;
  let ok = false;
  try {
    const response = await api.fetchApi("/free", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ unload_models: true, free_memory: true }),
    });
    ok = response.ok;
  } catch {
    ok = false;
  }
  const hasGpu = ok ? await serverHasGpu(api) : null;
  const toast = freeToast(ok, hasGpu !== false);
  app?.extensionManager?.toast?.add(toast);
  const state = globalThis.headroom;
  if (state) state.lastFree = toast; // for the browser test and debugging
  if (after) setTimeout(after, 500);
  return toast;
}
