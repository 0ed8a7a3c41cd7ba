// Per-node badges after a run: the peak VRAM (or RSS on machines without a GPU) and the time of each node.
// Pure: records in, badge text out (unit-tested under Node). The entry point puts them on node.badges.
import { formatBytes, formatSeconds } from "./format.js";

/** "VRAM 1.2 GiB · 350 ms"; falls back to RSS when the machine reports no device memory. */
export function badgeText(record) {
  if (!record) return "";
  const time = formatSeconds(record.duration_s);
  if (Number.isFinite(record.vram_peak)) return `VRAM ${formatBytes(record.vram_peak)} · ${time}`;
  if (Number.isFinite(record.rss_peak)) return `RSS ${formatBytes(record.rss_peak)} · ${time}`;
  return time;
}

/** Node id -> the latest headroom.node record of the current prompt; a new prompt clears the old ones. */
export class BadgeStore {
  constructor() {
    this.promptId = null;
    this.records = new Map();
  }

  /** Record a headroom.node event; returns true when the badges of a previous prompt were dropped. */
  add(record) {
    let cleared = false;
    if (record.prompt_id && record.prompt_id !== this.promptId) {
      cleared = this.records.size > 0;
      this.records.clear();
      this.promptId = record.prompt_id;
    }
    this.records.set(String(record.node), record);
    return cleared;
  }

  get(nodeId) {
    return this.records.get(String(nodeId)) ?? null;
  }

  text(nodeId) {
    return badgeText(this.get(nodeId));
  }
}
