"""Headroom: run ComfyUI workflows whose models are bigger than the GPU.

ComfyUI imports this file from ``custom_nodes/<any folder name>``; ``pip install -e .`` makes the same
folder importable as ``comfyui_headroom``. Nothing here imports ComfyUI (or torch) at import time, so the
command line (``python -m comfyui_headroom``) and ``memory/`` start without a host.
"""

from __future__ import annotations

from typing import Any

# The only frontend registration: served at /extensions/<folder name>/ (no [tool.comfy] web, which
# would load the same scripts a second time under the project name).
WEB_DIRECTORY = "./js"

_NODE_NAMES = ("NODE_CLASS_MAPPINGS", "NODE_DISPLAY_NAME_MAPPINGS")

# ComfyUI and pip import this file as a package. pytest may also import it on its own when it collects
# the checkout; with no parent package there is nothing to register.
if __package__:
    from .version import __version__


def _load_nodes() -> None:
    """Import the node layer (and so torch) and install the monitor: what a host loading the pack needs.

    Every host reads NODE_CLASS_MAPPINGS right after importing the pack (nodes.load_custom_node, with
    hasattr/getattr), so the monitor is installed at the same point of start-up as an eager import would
    install it, while the command line, which never reads it, never imports the node layer.
    """
    from .nodes import NODE_CLASS_MAPPINGS, NODE_DISPLAY_NAME_MAPPINGS
    from .nodes.host import install_monitor

    # Inside a host: executor hooks for the Memory Monitor, plus /headroom/* routes, headroom.* events and
    # preflight when a PromptServer runs (it is created before custom nodes load). Outside one: nothing.
    install_monitor()
    globals().update(
        NODE_CLASS_MAPPINGS=NODE_CLASS_MAPPINGS, NODE_DISPLAY_NAME_MAPPINGS=NODE_DISPLAY_NAME_MAPPINGS
    )


def __getattr__(name: str) -> Any:
    """PEP 562: the node mappings on first access; any other unknown name is an AttributeError (hosts
    probe optional names such as ``comfy_entrypoint`` with hasattr)."""
    if name not in _NODE_NAMES or not __package__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        _load_nodes()
    except AttributeError as exc:  # hasattr() would swallow it and the host would skip the pack silently
        raise ImportError(f"Headroom: loading the nodes failed: {exc}") from exc
    return globals()[name]


def __dir__() -> list[str]:
    return sorted({*globals(), *_NODE_NAMES})


__all__ = ["NODE_CLASS_MAPPINGS", "NODE_DISPLAY_NAME_MAPPINGS", "WEB_DIRECTORY", "__version__"]
