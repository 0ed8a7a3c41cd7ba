"""Which of the host's own settings fit this workflow on this machine, and why: one line each, with the
figure it comes from. Every figure is the paging-host model (``paging_host``) run again with that one
setting changed, so a line never states a figure the model did not compute.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import asdict, dataclass
from typing import Any

from ..units import GiB, format_bytes
from .baselines import Outcome, comfyui_reactive
from .costmodel import Budget, Hardware, Tier
from .host_settings import HostSettings
from .paging_host import HostNode, HostOutcome, paging_host
from .workload import Workload


@dataclass(frozen=True)
class HostAdvice:
    setting: str  # the flag (or "pinned cap", "Headroom retention")
    verdict: str  # "use", "keep" (the current setting is the better one), "avoid" or "info"
    line: str  # one line, with its figure
    seconds: float = 0.0  # the repeat-run seconds it saves (negative: costs)


def _reloaded(o: HostOutcome) -> str:
    items = sorted(o.reloads.items(), key=lambda kv: -kv[1])
    return ", ".join(f"{label} {format_bytes(n)}" for label, n in items) or "nothing"


def host_advice(
    w: Workload, budget: Budget, hw: Hardware, settings: HostSettings, rerun: Collection[str] | None = None
) -> list[HostAdvice]:
    """The settings lines for the paging host; for another host, one line saying what it is."""
    if not settings.paging:
        # what turned DynamicVRAM off: the flag only when it was the flag (a --cpu server is no
        # --disable-dynamic-vram one: the leftover of M14)
        off_by = settings.dynamic_off_by or "--disable-dynamic-vram"
        why = "the 0.3.x reactive loader" if settings.host == "0.3" else f"DynamicVRAM off ({off_by})"
        return [
            HostAdvice(
                "host",
                "info",
                f"{why}: the host loads whole models per node; the 2026 settings "
                "below do not apply (Headroom's streamer is the engine here)",
            )
        ]

    def run(changed: HostSettings, headroom: bool = False) -> HostOutcome:
        return paging_host(w, budget, hw, changed, rerun=rerun, headroom=headroom)

    base = run(settings)
    ram = budget.ram
    out: list[HostAdvice] = []

    # the cache mode: what the repeat run reloads under each
    other = settings.with_(cache="classic" if settings.cache == "ram" else "ram", high_ram=False)
    alt = run(other)
    gain = base.runs_s[1] - alt.runs_s[1]
    flag = "--cache-classic" if other.cache == "classic" else "--cache-ram"
    if gain > 0.05:
        out.append(
            HostAdvice(
                flag,
                "use",
                f"{flag}: the repeat run reloads {_reloaded(alt)} instead of "
                f"{_reloaded(base)}: saves {gain:.1f} s per run",
                gain,
            )
        )
    else:
        current = "the RAM-pressure cache" if settings.cache == "ram" else f"--cache-{settings.cache}"
        out.append(
            HostAdvice(
                flag,
                "keep",
                f"keep {current}: {flag} reloads {_reloaded(alt)} in the repeat run "
                f"({_seconds(gain, 'per run')})",
                gain,
            )
        )

    # --high-ram: pins without a budget, so the host buffers may pass the RAM
    high = run(settings.with_(high_ram=True, fast_disk=False))
    if high.ram_peak > ram - settings.ram_headroom(ram) - 2 * GiB:
        out.append(
            HostAdvice(
                "--high-ram",
                "avoid",
                f"--high-ram: no: it pins {format_bytes(high.ram_peak)} of "
                f"host buffers in {format_bytes(ram)} of RAM (the OS would swap)",
                base.runs_s[1] - high.runs_s[1],
            )
        )
    else:
        saves = base.runs_s[1] - high.runs_s[1]
        verdict = "use" if saves > 0.05 else "keep"
        out.append(
            HostAdvice(
                "--high-ram",
                verdict,
                f"--high-ram: its {format_bytes(high.ram_peak)} of pins fit "
                f"{format_bytes(ram)} of RAM: {_seconds(saves, 'per repeat run')}",
                saves,
            )
        )

    # --fast-disk: uploads from the file instead of pinned RAM
    fast = run(settings.with_(fast_disk=not settings.fast_disk))
    saves = base.runs_s[0] + base.runs_s[1] - fast.runs_s[0] - fast.runs_s[1]
    flag = "--disable-fast-disk" if settings.fast_disk else "--fast-disk"
    per = sum(n.uploads.get("disk", 0) for n in fast.run(1))
    verdict = "use" if saves > 0.05 else "avoid"
    if settings.fast_disk_auto and not settings.fast_disk and saves <= 0.05:
        # this host may have turned fast-disk on by itself: the opt-out is the line to offer
        flag, verdict, saves = "--disable-fast-disk", "use", -saves
    out.append(
        HostAdvice(
            flag,
            verdict,
            f"{flag}: with fast-disk {format_bytes(per)} come from the file in the first run at "
            f"{hw.disk / 1e9:.1f} GB/s, RAM peak {format_bytes(fast.ram_peak)} instead of "
            f"{format_bytes(base.ram_peak)}: {_seconds(saves, 'over two runs')}",
            saves,
        )
    )

    # --vram-headroom: each GB kept free is a GB more copied per evaluation
    more = run(settings.with_(vram_headroom=settings.vram_headroom + 1))
    cost = more.runs_s[0] - base.runs_s[0]
    card = budget.vram + budget.reserve
    peak = max(w.steps, key=lambda s: s.activation, default=None)
    room = settings.usable_vram(card) - (peak.activation if peak else 0)
    out.append(
        HostAdvice(
            "--vram-headroom",
            "info",
            f"--vram-headroom {settings.vram_headroom:g}: each GB more "
            f"costs {cost:.1f} s per run; raise it only by what other programs hold on the GPU "
            f"({format_bytes(room)} left for weights beside the largest activations"
            + (f", node {peak.node_id} {peak.label})" if peak else ")"),
            -cost,
        )
    )
    reserve = settings.reserve(card)
    out.append(
        HostAdvice(
            "--reserve-vram",
            "info",
            f"--reserve-vram {reserve / GiB:.1f}: the host's reserve; "
            f"lowering it by 0.5 GB gives weights 0.5 GB more (only if the desktop does not use "
            f"this GPU)",
        )
    )

    # the pinned budget
    cap = settings.pinned_cap(ram)
    pinned_peak = max((n.pinned for n in base.nodes), default=0)
    pageable = sum(n.uploads.get("pageable", 0) for n in base.run(1))
    out.append(
        HostAdvice(
            "pinned cap",
            "info",
            f"pinned cap {format_bytes(cap)} (the host's formula for "
            f"{format_bytes(ram)} of RAM): {format_bytes(pinned_peak)} pinned at the peak; "
            f"{format_bytes(pageable)} uploaded from unpinned buffers in the first run",
        )
    )

    # Headroom's own lever on this host
    kept = run(settings, headroom=True)
    saves = base.runs_s[1] - kept.runs_s[1]
    what = "Headroom's retention (a model not needed again, here or in the next run, gives its pins back)"
    if not base.reloads:
        line = f"{what}: nothing to keep, the host's repeat run reloads nothing here"
    else:
        line = (
            f"{what}: the repeat run reloads {_reloaded(kept)} instead of {_reloaded(base)}: "
            f"{_seconds(saves, 'per run')}"
        )
    out.append(HostAdvice("Headroom retention", "use" if saves > 0.05 else "info", line, saves))
    return out


def host_node_json(node: HostNode) -> dict[str, Any]:
    data = asdict(node)
    data.pop("disk_read_direct", None)
    return data


def host_json(o: Outcome, advice: list[HostAdvice]) -> dict[str, Any]:
    """A host prediction for the plan's JSON: per node (both runs), the reloads and the settings lines."""
    data: dict[str, Any] = {
        "transfer_s": o.transfer_s,
        "wall_s": o.wall_s,
        "fits": o.fits,
        "oom_at": o.oom_step,
        "ram_peak": o.ram_peak,
    }
    if isinstance(o, HostOutcome):
        data.update(
            settings={**asdict(o.settings), "flags": o.settings.flags(), "text": o.settings.describe()},
            runs_s=o.runs_s,
            reloads=o.reloads,
            nodes=[host_node_json(n) for n in o.nodes],
        )
    data["advice"] = [asdict(a) for a in advice]
    return data


def node_text(n: HostNode) -> str:
    ups = ", ".join(f"{format_bytes(b)} from {src}" for src, b in n.uploads.items() if b) or "nothing"
    text = f"run {n.run} node {n.node_id} {n.label}: uploads {ups}; RAM {format_bytes(n.ram)}"
    if n.streamed:
        text += f"; {format_bytes(n.streamed)} copied at every evaluation"
    if n.reloaded:
        text += "; reloads " + ", ".join(f"{k} {format_bytes(v)}" for k, v in n.reloaded.items())
    if n.freed_ram:
        text += "; frees " + ", ".join(f"{k} {format_bytes(v)}" for k, v in n.freed_ram.items()) + " of RAM"
    return text


SEED_INPUTS = ("seed", "noise_seed")


def rerun_nodes(graph: Any, order: list[str]) -> set[str]:
    """The nodes a repeat run of the same workflow executes again when only the seed changes (the frontend's
    "control after generate"): every node with a seed input and every node downstream of one; the host
    serves the others from its cache. ``graph``: a ``workflow.graph.Graph``."""
    feeds: dict[str, set[str]] = {}
    for node_id, node in graph.nodes.items():
        for value in node.inputs.values():
            source = getattr(value, "node", None)
            if isinstance(source, str):
                feeds.setdefault(source, set()).add(node_id)
    todo = [nid for nid, node in graph.nodes.items() if any(k in node.inputs for k in SEED_INPUTS)]
    seen: set[str] = set()
    while todo:
        nid = todo.pop()
        if nid not in seen:
            seen.add(nid)
            todo.extend(feeds.get(nid, ()))
    return {nid for nid in order if nid in seen}


HOST_NAMES = {"comfyui": "ComfyUI 0.3.x", "comfyui_2026": "ComfyUI 2026"}


def host_lines(
    hosts: dict[str, Outcome], advice: list[HostAdvice], settings: HostSettings, why: bool
) -> list[str]:
    """The text: one line per host baseline (first and repeat run), the settings lines, and with ``why``
    what the paging host does at each node."""
    lines = []
    for name, o in hosts.items():
        fit = "fits" if o.fits else f"out of memory at {o.oom_step}"
        name = HOST_NAMES.get(name, name)
        text = f"{name}: transfer {o.transfer_s:.1f} s, {fit}, RAM peak {format_bytes(o.ram_peak)}"
        if isinstance(o, HostOutcome):
            text += f"; repeat run {o.runs_s[1]:.1f} s, reloads {_reloaded(o)}"
        lines.append(text)
    lines.append(f"host settings for {settings.describe()}:")
    lines += [f"  {a.line}" for a in advice]
    for o in hosts.values():
        if why and isinstance(o, HostOutcome):
            lines += [f"  host: {node_text(n)}" for n in o.nodes if n.uploads or n.freed_ram or n.reloaded]
    return lines


def reactive_host(
    w: Workload, budget: Budget, hw: Hardware, rerun: Collection[str] | None = None
) -> HostOutcome:
    """The 0.3.x reactive loader over the same two runs: the first (``comfyui_reactive``), then the repeat
    with every model the first run loaded still in RAM (0.3.x's classic cache keeps the loaders' outputs,
    offloaded to RAM); what it reads from disk again is what does not fit the RAM budget. The repeat starts
    with nothing on the device (not modelled: what stays loaded between runs)."""
    if rerun is None:
        first = next((i for i, s in enumerate(w.steps) if s.evaluations > 1), 0)
        rerun = {s.node_id for s in w.steps[first:]}
    used = {cid for step in w.steps for cid in step.uses}
    repeat = Workload(w.components, tuple(s for s in w.steps if s.node_id in rerun), w.notes,
                      initial=dict.fromkeys(used, Tier.RAM))  # fmt: skip
    runs = [(1, w, comfyui_reactive(w, budget, hw)), (2, repeat, comfyui_reactive(repeat, budget, hw))]
    one = runs[0][2]
    out = HostOutcome("comfyui", one.transfer_s, one.wall_s, one.oom_step, one.ram_peak, list(one.per_step_s),
                      settings=HostSettings(host="0.3"))  # fmt: skip
    for number, work, outcome in runs:
        out.runs_s.append(outcome.transfer_s)
        for step, seconds, moved in zip(
            work.steps, outcome.per_step_s, outcome.per_step_uploads, strict=True
        ):
            node = HostNode(number, step.node_id, step.label, seconds=seconds)
            node.uploads = {k: v for k, v in moved.items() if v}
            node.disk_read = moved.get("disk", 0)
            if number > 1 and node.disk_read:
                labels = ", ".join(w.component(c).label for c in step.uses)
                node.reloaded[labels] = node.disk_read
            out.nodes.append(node)
    return out


def host_report(
    w: Workload, budget: Budget, hw: Hardware, settings: HostSettings, rerun: Collection[str] | None = None
) -> tuple[dict[str, Outcome], list[HostAdvice]]:
    """Both host baselines (the 0.3.x reactive loader, the 2026 paging host with ``settings``' flags where
    it pages, else its defaults) and the settings lines for the host ``settings`` describe."""
    paging = settings if settings.paging else HostSettings()
    hosts: dict[str, Outcome] = {
        "comfyui": reactive_host(w, budget, hw, rerun),
        "comfyui_2026": paging_host(w, budget, hw, paging, rerun=rerun),
    }
    return hosts, host_advice(w, budget, hw, settings, rerun)


def hosts_json(hosts: dict[str, Outcome], advice: list[HostAdvice], settings: HostSettings) -> dict[str, Any]:
    return {
        "host": settings.host,
        "settings": {**asdict(settings), "flags": settings.flags(), "text": settings.describe()},
        "baselines": {name: host_json(o, []) for name, o in hosts.items()},
        "advice": [asdict(a) for a in advice],
    }


def _seconds(saved: float, span: str) -> str:
    """What a setting does to the time, in words: "saves 4.2 s per run", "costs 1.3 s over two runs"."""
    if abs(saved) < 0.05:
        return f"no time saved or lost {span}"
    return f"{'saves' if saved > 0 else 'costs'} {abs(saved):.1f} s {span}"
