// Preflight warnings (the headroom.preflight event) as toasts. Pure (unit-tested under Node).

/** A toast for app.extensionManager.toast.add, or null when the prompt fits or was not checked. */
export function preflightToast(event) {
  if (!event || event.fits !== false) return null;
  const where = event.node ? `node ${event.node}${event.class_type ? ` (${event.class_type})` : ""}` : "this workflow";
  return {
    severity: event.level === "error" ? "error" : "warn",
    summary: `Headroom: ${where} will run out of VRAM`,
    detail: event.message,
    life: 12000,
  };
}
