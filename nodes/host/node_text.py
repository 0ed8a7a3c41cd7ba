"""What a Stream Model or Stream CLIP node did, said on that node. Its streaming happens later, in the
sampler or encode node that runs its model, so the node's own run can only say it is armed: when that
sampling or encode ends, the text goes to the browser as a node_text event (memory/names.py) for the node."""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable
from typing import Any

from ...memory.names import EVENTS
from ...memory.process_state import PROCESS

_log = logging.getLogger("headroom")
_lock = threading.Lock()
# the process's monitor, given by state.py (which imports this module: no import back)
_monitor: Callable[[], Any] | None = None
# a streaming state (StreamedModel, StreamedClip) -> (prompt id, workflow id, node id, text of a run)
_owners: weakref.WeakKeyDictionary[Any, tuple[str | None, str | None, str, Callable[[Any], str]]] = (
    PROCESS.hold(
        "host.node_text: streaming owners",
        weakref.WeakKeyDictionary(),
        "which node each live streaming state reports to; weak, it dies with the state (a reset would "
        "leave a streaming model's text with no node)",
    )
)


def connect(monitor: Callable[[], Any]) -> None:
    """Where the texts go: the process's monitor (its telemetry says which node runs; it pushes)."""
    global _monitor
    _monitor = monitor


def _running_node() -> tuple[str | None, str | None, str | None]:
    """(prompt id, workflow id, node id) of the node running now, from the monitor's telemetry."""
    if _monitor is None:
        return None, None, None
    run = _monitor().telemetry.current
    if run is None:
        return None, None, None
    running = [node_id for node_id, r in run.nodes.items() if r.status == "running"]
    return run.prompt_id, run.workflow_id, (running[-1] if running else None)


def own(stream: Any, describe: Callable[[Any], str]) -> None:
    """Called by the Stream node as it runs: ``stream``'s later runs are said on this node."""
    try:
        prompt_id, workflow_id, node_id = _running_node()
        if node_id is not None:
            with _lock:
                _owners[stream] = (prompt_id, workflow_id, node_id, describe)
    except Exception as exc:  # telemetry never breaks a run
        _log.debug("Headroom: no node text for this stream node: %s", exc)


def ended(stream: Any, run: Any) -> None:
    """A sampling or encode of ``stream`` ended: send its text to the node that armed it."""
    try:
        with _lock:
            owner = _owners.get(stream)
        if owner is None:
            return
        prompt_id, workflow_id, node_id, describe = owner
        # the prompt running now: a Stream node the host served from its cache armed the model in an
        # earlier prompt (the cache is keyed by node id, so the node id is still this prompt's)
        now_prompt, now_workflow, _ = _running_node()
        if now_prompt is not None:
            prompt_id, workflow_id = now_prompt, now_workflow
        if _monitor is None:
            return
        payload = {"prompt_id": prompt_id, "workflow_id": workflow_id, "node": node_id, "text": describe(run)}
        _monitor().push(EVENTS["node_text"], payload)
    except Exception as exc:
        _log.debug("Headroom: could not send a stream node's text: %s", exc)
