"""Runs compared (#42): a run of a workflow against its previous run, from what telemetry recorded.

The questions users ask most ("why does every run read the models from disk again", "why does RAM grow
from run to run", "why did VRAM jump after the update") are answered per run: what was read from disk
again and the reason the host's model gives for it, how RAM and VRAM changed at the run's end and which
model holds the growth, and the host settings in force as the host reports them. Nothing is guessed: a
figure telemetry did not record is left out and the line says so.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..units import format_bytes
from .runs import NodeRecord, RunRecord

# A change below this is noise of the allocator and the sampler, not growth to explain.
NOTICEABLE = 64 * 2**20


def previous_run(runs: Iterable[RunRecord], run: RunRecord) -> RunRecord | None:
    """The latest run before ``run`` of the same workflow (its frontend id, else the same prompt)."""
    found = None
    for other in runs:
        if other is run:
            break
        same = other.workflow_id == run.workflow_id if run.workflow_id else other.key == run.key
        if same:
            found = other
    return found


def _finished(run: RunRecord) -> list[NodeRecord]:
    return [n for n in run.nodes.values() if n.finished is not None and n.status in ("done", "error")]


def _at_end(run: RunRecord, field: str) -> int | None:
    """``field`` (rss, allocated, device_used...) as the last finished node left it."""
    done = _finished(run)
    return done[-1].after.get(field) if done and field in done[-1].after else None


def _disk_read(run: RunRecord) -> int | None:
    """Bytes the process read over its nodes (the OS's counters), None where none were read out."""
    reads = [n.io["proc_read"] for n in _finished(run) if "proc_read" in n.io]
    return sum(reads) if reads else None


def _loads_from_disk(run: RunRecord) -> dict[str, int]:
    """Per component, the bytes the residency controller moved from disk in this run."""
    out: dict[str, int] = {}
    for event in run.events:
        if event.tier_from == "disk" and event.nbytes > 0:
            out[event.component] = out.get(event.component, 0) + event.nbytes
    return out


def _held(run: RunRecord) -> dict[str, int]:
    """Per component, the bytes it holds at the run's end (its last move's size, where it was kept)."""
    held: dict[str, int] = {}
    for event in run.events:
        if event.tier_to in ("disk", "") or event.action in ("evict", "release"):
            held.pop(event.component, None)
        else:
            held[event.component] = max(held.get(event.component, 0), event.nbytes)
    return held


def _host(run: RunRecord) -> dict[str, Any]:
    preflight = run.planned.preflight if run.planned is not None else None
    host = (preflight or {}).get("host")
    return host if isinstance(host, dict) else {}


def _change(now: int | None, before: int | None) -> int | None:
    return None if now is None or before is None else now - before


def _signed(n: int) -> str:
    return f"{'+' if n >= 0 else '-'}{format_bytes(abs(n), 'GiB')}"


def compare_runs(previous: RunRecord | None, run: RunRecord) -> dict[str, Any]:
    """This run against ``previous`` (None: the first run of its workflow kept here): figures and lines."""
    host = _host(run)
    out: dict[str, Any] = {
        "previous": previous.prompt_id if previous else None,
        "disk_read": _disk_read(run),
        "reloaded": _loads_from_disk(run),
        "ram_change": None,
        "vram_change": None,
        "holder": None,
        "host": host.get("settings"),
        "lines": [],
    }
    lines: list[str] = out["lines"]
    if previous is None:
        lines.append("first run of this workflow here: nothing to compare with")
    read, reloaded = out["disk_read"], out["reloaded"]
    if reloaded:
        files = ", ".join(f"{name} {format_bytes(n, 'GiB')}" for name, n in sorted(reloaded.items()))
        why = _why_reloaded(previous, host)
        lines.append(f"read from disk again: {files} ({why})" if previous else f"read from disk: {files}")
    elif read is not None and previous is not None:
        lines.append(f"read {format_bytes(read, 'GiB')} from disk; no model was loaded from disk again")
    if previous is not None:
        ram = _change(_at_end(run, "rss"), _at_end(previous, "rss"))
        vram = _change(_at_end(run, "device_used"), _at_end(previous, "device_used"))
        if vram is None:
            vram = _change(_at_end(run, "allocated"), _at_end(previous, "allocated"))
        out["ram_change"], out["vram_change"] = ram, vram
        held_now, held_before = _held(run), _held(previous)
        grown = {c: n - held_before.get(c, 0) for c, n in held_now.items() if n > held_before.get(c, 0)}
        holder = max(grown, key=lambda c: grown[c]) if grown else None
        out["holder"] = holder
        parts = []
        for label, change in (("RAM (process)", ram), ("VRAM", vram)):
            if change is None:
                parts.append(f"{label}: not measured")
            else:
                parts.append(f"{label} {_signed(change)} at the end")
        grew = any(c is not None and c > NOTICEABLE for c in (ram, vram))
        if grew and holder:
            parts.append(
                f"held by {holder} ({format_bytes(grown[holder], 'GiB')} more than after the last run)"
            )
        elif grew:
            parts.append("no model Headroom moved holds the growth (the host's own caches)")
        lines.append("; ".join(parts))
    if out["host"]:
        lines.append(f"host settings: {out['host']}")
    return out


def _why_reloaded(previous: RunRecord | None, host: dict[str, Any]) -> str:
    """Why the models were read again: what the host's model predicted for a repeat run, with its settings."""
    predicted = host.get("reloads") if isinstance(host.get("reloads"), dict) else {}
    settings = host.get("settings")
    if previous is None:
        return "the first run"
    if predicted:
        where = f" under {settings}" if settings else ""
        return f"the host does not keep them between runs{where}, as its plan predicted"
    if settings:
        return f"the host freed them after the previous run ({settings})"
    return "they were not kept in RAM after the previous run"
