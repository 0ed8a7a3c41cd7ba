// Per-node badges after a run: the peak VRAM (or RSS on machines without a GPU) and the time of each node.
// Pure: records in, badge text out (unit-tested under Node). The entry point puts them on node.badges.
import { formatBytes, formatSeconds } from "./format.js";

/** "VRAM 1.2 GiB · 350 ms"; falls back to RSS when the machine reports no device memory. */
export function badgeText(record) {
  if (!record) return "";
  const time = formatSeconds(record.duration_s);
  if (Number.isFinite(record.vram_peak)) return `VRAM ${formatBytes(record.vram_peak)} · ${time}`;
  if (Number.isFinite(record.rss_peak)) return `RSS ${formatBytes(record.rss_peak)} · ${time}`;
  return record.duration_s === null || record.duration_s === undefined ? "" : time;
}

const MAX_WORKFLOWS = 32;

/**
 * headroom.node records by workflow, then node id: node ids repeat across workflows, so a run's badges
 * belong to the workflow it was queued from (the frontend's graph id, sent back by the server as
 * workflow_id). A new prompt of a workflow replaces that workflow's records; the host's cached nodes come
 * again as "cached" records with the figures of the run that computed them. `current()` names the
 * workflow on screen: the default for reads, and for records that carry no workflow (a script's prompt).
 */
export class BadgeStore {
  constructor(current = () => "") {
    this.current = current;
    this.workflows = new Map(); // workflow id -> {promptId, records: Map(node id -> record)}
  }

  /** Record a headroom.node event; returns true when the badges of a previous prompt were dropped. */
  add(record, workflowId = record.workflow_id ?? this.current()) {
    const key = String(workflowId ?? "");
    let entry = this.workflows.get(key);
    let cleared = false;
    if (!entry || (record.prompt_id && record.prompt_id !== entry.promptId)) {
      cleared = (entry?.records.size ?? 0) > 0;
      entry = { promptId: record.prompt_id ?? null, records: new Map() };
      this.workflows.delete(key); // re-inserted last: the oldest workflow is dropped first
      this.workflows.set(key, entry);
      for (const old of this.workflows.keys()) {
        if (this.workflows.size <= MAX_WORKFLOWS) break;
        this.workflows.delete(old);
      }
    }
    entry.records.set(String(record.node), record);
    return cleared;
  }

  /** The server's kept runs (GET /headroom/runs, oldest first): each workflow's last run again. Runs
   * queued without a workflow (scripts) are left out: nothing says which workflow they belong to. */
  restore(runs) {
    for (const run of runs ?? []) {
      if (!run.workflow_id) continue;
      for (const node of run.nodes ?? []) this.add({ ...node, prompt_id: run.prompt_id, workflow_id: run.workflow_id });
    }
  }

  recordsOf(workflowId = this.current()) {
    return this.workflows.get(String(workflowId ?? ""))?.records ?? new Map();
  }

  /** The records of the workflow on screen (the sidebar's per-node list). */
  get records() {
    return this.recordsOf();
  }

  get(nodeId, workflowId = this.current()) {
    return this.recordsOf(workflowId).get(String(nodeId)) ?? null;
  }

  /** The badge of node `nodeId`; none when the record is of another node class (a workflow loaded in
   * place of another keeps the graph's id, so ids can match across workflows: the class tells them apart). */
  text(nodeId, workflowId = this.current(), classType = null) {
    const record = this.get(nodeId, workflowId);
    if (record?.class_type && classType && record.class_type !== classType) return "";
    return badgeText(record);
  }
}
