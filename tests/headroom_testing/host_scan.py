"""The host's ``ux_friendly_pick_node`` as ComfyUI writes it: a scan of every ready node at each step.

``memory.order`` keeps heaps that give the same pick in near-linear time; this quadratic copy is the
reference the tests compare it with and the "before" of ``bench/planner_scaling.py``.
"""

from __future__ import annotations

from comfyui_headroom.memory.workflow.graph import Graph
from comfyui_headroom.memory.workflow.order import _ExecutionList, select_outputs


def scan_order(graph: Graph) -> list[str]:
    """The predicted order with the host's per-step scan (comfy_execution/graph.py)."""
    execution = _ExecutionList(graph, ())
    for node_id in select_outputs(graph):
        execution.add_node(node_id)
    outputs, blocks, order = execution.outputs, execution.blocking, []
    while execution.pending:
        ready = sorted(execution.ready, key=execution.pending.__getitem__)
        picked = next((n for n in ready if n in execution.first), None)
        picked = picked or next((n for n in ready if outputs & set(blocks[n])), None)
        picked = picked or next((n for n in ready if any(outputs & set(blocks[b]) for b in blocks[n])), None)
        picked = picked or ready[0]
        if not execution.is_cached(picked):
            if execution.needs_lazy(picked):
                continue
            order.append(picked)
        execution.complete(picked)
    return order
