"""ComfyUI adapters, one module per node. They translate host objects and hold no policy."""

from __future__ import annotations

import importlib
import logging

log = logging.getLogger("headroom")

_NODE_MODULES = (
    "offload_loader",
    "streaming_sampler",
    "stream_model",
    "stream_clip",
    "tiled_vae_decode",
    "memory_monitor",
)

NODE_CLASS_MAPPINGS: dict[str, type] = {}
NODE_DISPLAY_NAME_MAPPINGS: dict[str, str] = {}

for _name in _NODE_MODULES:
    try:
        _node = importlib.import_module(f".{_name}", __name__).NODE_CLASS
    except Exception:  # one broken node must not take the others, or the host, down with it
        log.exception("Headroom: the node module %s failed to import; that node is disabled", _name)
        continue
    NODE_CLASS_MAPPINGS[_node.NODE_ID] = _node
    NODE_DISPLAY_NAME_MAPPINGS[_node.NODE_ID] = _node.DISPLAY_NAME
