"""Plan versus actual: one row per node of a run (what it measured next to what was planned), as JSON,
CSV, and the text the Memory Monitor node prints."""

from __future__ import annotations

from typing import Any, Protocol

from ..units import format_bytes
from .compare import compare_runs
from .probe import Sample
from .runs import RunRecord


class PeakSource(Protocol):
    """Where a report gets a run's peaks from (``hub.Telemetry``)."""

    def prompt_peaks(self, run: RunRecord) -> dict[str, int]: ...


REPORT_COLUMNS = (
    "order", "node", "class_type", "status", "planned_order", "duration_s", "planned_wall_s",
    "vram_peak", "planned_vram_peak", "vram_delta", "rss_peak", "ram_peak", "planned_placements",
    "planned_reasons", "residency_events", "cached_from", "bounded_by",
)  # fmt: skip


def plan_vs_actual(run: RunRecord) -> list[dict[str, Any]]:
    """One row per node that ran or was planned, in the order they ran, then planned nodes that did not run.

    A node the host served from its cache is "cached" (with the prompt that computed it): it used no time
    or memory in this run, so it has no measured or planned figures. A planned node that did not run (not
    reached, or cached on a host that does not report it) is "not run"; a node that ran but was not planned
    is a frontend-only or unknown node the planner left out (planned fields empty).
    """
    planned = run.planned
    rows: list[dict[str, Any]] = []
    for order, record in enumerate(list(run.nodes.values()), 1):
        p = planned.node(record.node_id) if planned else None
        if record.status == "cached":
            rows.append(
                {
                    **dict.fromkeys(REPORT_COLUMNS),
                    "order": order,
                    "node": record.node_id,
                    "class_type": record.class_type,
                    "status": "cached",
                    "planned_order": p.order if p else None,
                    "planned_placements": dict(p.placements) if p else {},
                    "planned_reasons": dict(p.reasons) if p else {},
                    "residency_events": [e.as_dict() for e in record.events],
                    "cached_from": record.cached_from,
                }
            )
            continue
        vram = record.device_peak if record.device_peak is not None else record.peak.get("allocated")
        rows.append(
            {
                "order": order,
                "node": record.node_id,
                "class_type": record.class_type,
                "status": record.status,
                "planned_order": p.order if p else None,
                "duration_s": record.duration_s,
                "planned_wall_s": p.wall_s if p else None,
                "vram_peak": vram,
                "planned_vram_peak": p.vram_peak if p else None,
                "vram_delta": vram - p.vram_peak if p and vram is not None else None,
                "rss_peak": record.peak.get("rss"),
                "ram_peak": record.peak.get("ram_used"),
                "planned_placements": dict(p.placements) if p else {},
                "planned_reasons": dict(p.reasons) if p else {},
                "residency_events": [e.as_dict() for e in record.events],
                "cached_from": None,
                "bounded_by": record.bound,
            }
        )
    ran = set(run.nodes)
    for p in planned.nodes if planned else ():
        if p.node_id not in ran:
            rows.append(
                {
                    **dict.fromkeys(REPORT_COLUMNS),
                    "node": p.node_id,
                    "class_type": p.class_type,
                    "status": "not run",
                    "planned_order": p.order,
                    "planned_wall_s": p.wall_s,
                    "planned_vram_peak": p.vram_peak,
                    "planned_placements": dict(p.placements),
                    "planned_reasons": dict(p.reasons),
                    "residency_events": [],
                }
            )
    return rows


def report_json(
    run: RunRecord, telemetry: PeakSource | None = None, previous: RunRecord | None = None
) -> dict[str, Any]:
    """A run for the timeline and the JSON report, with how it compares with ``previous`` (compare.py)."""
    planned = run.planned
    return {
        "compared": compare_runs(previous, run),
        "prompt_id": run.prompt_id,
        "workflow_id": run.workflow_id,
        "started": run.started,
        "plan": None
        if planned is None
        else {"fits": planned.fits, "budget_vram": planned.budget_vram, "min_vram": planned.min_vram},
        "plan_note": run.plan_note,
        "preflight": planned.preflight if planned else None,
        "peaks": telemetry.prompt_peaks(run) if telemetry else {},
        "nodes": plan_vs_actual(run),
        "events": [e.as_dict() for e in run.events],
    }


def report_csv(run: RunRecord) -> str:
    """plan_vs_actual as CSV: one row per node; placements and events as compact text cells."""
    import csv
    import io

    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=REPORT_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in plan_vs_actual(run):
        cells = dict(row)
        cells["planned_placements"] = "; ".join(f"{k}={v}" for k, v in row["planned_placements"].items())
        # a reason holds "; " itself: reasons are set apart by " | "
        cells["planned_reasons"] = " | ".join(f"{k}: {v}" for k, v in row["planned_reasons"].items())
        cells["residency_events"] = "; ".join(
            f"{e['component']}:{e['tier_from']}->{e['tier_to']}" for e in row["residency_events"]
        )
        cells["bounded_by"] = row["bounded_by"]["line"] if row["bounded_by"] else None
        cells = {k: inert_cell(v) for k, v in cells.items()}  # text only: numbers stay numbers
        for key in ("duration_s", "planned_wall_s"):
            if isinstance(cells[key], float):
                cells[key] = f"{cells[key]:.4f}"
        writer.writerow({k: "" if v is None else v for k, v in cells.items()})
    return out.getvalue()


# A text cell starting with one of these is a formula to a spreadsheet (=HYPERLINK(...), @SUM(...)), or
# starts one after a tab or carriage return (OWASP's CSV injection list).
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def inert_cell(value: Any) -> Any:
    """A text cell a spreadsheet shows as text: a leading quote before a formula's first character (the
    text after it is unchanged); anything else as it is."""
    if isinstance(value, str) and value.startswith(_FORMULA_STARTS):
        return "'" + value
    return value


def _mib(n: int | None) -> str:
    return "-" if n is None else format_bytes(n, "MiB", 0, grouped=True)


def prompt_titles(prompt: Any) -> dict[str, str]:
    """The titles an API prompt gives its nodes (``_meta.title``, as the frontend writes it), by node id."""
    out: dict[str, str] = {}
    for node_id, node in prompt.items() if isinstance(prompt, dict) else ():
        meta = node.get("_meta") if isinstance(node, dict) else None
        title = meta.get("title") if isinstance(meta, dict) else None
        if isinstance(title, str) and title.strip():
            out[str(node_id)] = title.strip()[:60]
    return out


def text_report(
    run: RunRecord | None,
    now: Sample,
    prompt_peaks: dict[str, int],
    node_id: str | None = None,
    titles: dict[str, str] | None = None,
    compared: list[str] | None = None,
) -> str:
    """What the Memory Monitor node prints: memory now, the prompt's peaks, and plan-vs-actual so far.
    Nodes are named as the canvas names them (``titles``: their titles by id), else by their class (N15)."""
    titles = titles or {}
    where = f"at node {node_id} ({titles.get(node_id, 'VRAM Stats')})" if node_id else "now"
    lines = [f"Headroom memory {where}:"]
    labels = {
        "device_used": "device used (all processes)", "allocated": "torch allocated",
        "reserved": "torch reserved", "rss": "process RSS", "ram_used": "system RAM used",
        "pinned": "pinned by Headroom",
    }  # fmt: skip
    for name, label in labels.items():
        value = getattr(now, name)
        if value is not None:
            peak = prompt_peaks.get(name)
            tail = f" (peak this prompt {_mib(peak)})" if peak is not None else ""
            lines.append(f"  {label}: {_mib(value)}{tail}")
    if now.device_total is None:
        lines.append("  no GPU telemetry on this machine (CPU only, or no CUDA device)")
    if run is None:
        return "\n".join(lines)
    rows = [r for r in plan_vs_actual(run) if r["status"] != "not run"]
    if run.planned is None:
        lines.append(f"plan: none ({run.plan_note or 'not planned'})")
    else:
        fits = {True: "fits", False: "does NOT fit", None: "not checked"}[run.planned.fits]
        lines.append(
            f"plan: {fits}; budget {_mib(run.planned.budget_vram)}, minimum {_mib(run.planned.min_vram)}"
        )
    host = (run.planned.preflight or {}).get("host") if run.planned else None
    if host:
        lines.append(f"host: {host['settings']}")
        lines += [f"  {line}" for line in host["advice"]]
    lines.append(f"nodes so far: {len(rows)}")
    for r in rows:
        duration = r["status"] if r["duration_s"] is None else f"{r['duration_s']:.3f} s"
        planned = f" (planned {_mib(r['planned_vram_peak'])})" if r["planned_vram_peak"] is not None else ""
        name = titles.get(str(r["node"]), r["class_type"])
        lines.append(
            f"  {r['node']:>6} {name[:28]:<28} {duration:>10}"
            f"  VRAM {_mib(r['vram_peak'])}{planned}  RSS {_mib(r['rss_peak'])}"
        )
        if r.get("bounded_by"):
            lines.append(f"{'':>9}{r['bounded_by']['line']}")
    if compared:
        lines.append("since the last run of this workflow:")
        lines += [f"  {line}" for line in compared]
    notes = {r["bounded_by"].get("spill_note") for r in rows if r.get("bounded_by")} - {None, ""}
    for note in sorted(notes):  # the nodes' lines name a spill where the OS reports one; else say why not
        lines.append(f"  spill into shared memory: {note}")
    return "\n".join(lines)
