"""Headroom: run ComfyUI workflows whose models are bigger than the GPU.

ComfyUI imports this file from ``custom_nodes/<any folder name>``; ``pip install -e .`` makes the same
folder importable as ``comfyui_headroom``. Nothing here imports ComfyUI at import time, so the
command line (``python -m comfyui_headroom``) and ``memory/`` work without a host.
"""

# The only frontend registration: served at /extensions/<folder name>/ (no [tool.comfy] web, which
# would load the same scripts a second time under the project name).
WEB_DIRECTORY = "./js"

# ComfyUI and pip import this file as a package. pytest also imports it on its own when it collects
# the checkout as a test package; with no parent package there is nothing to register.
if __package__:
    from .nodes import NODE_CLASS_MAPPINGS, NODE_DISPLAY_NAME_MAPPINGS
    from .nodes.host import install_monitor
    from .version import __version__

    # Inside a host: executor hooks for the Memory Monitor, plus /headroom/* routes, headroom.* events and
    # preflight when a PromptServer runs (it is created before custom nodes load). Outside one: nothing.
    install_monitor()

__all__ = ["NODE_CLASS_MAPPINGS", "NODE_DISPLAY_NAME_MAPPINGS", "WEB_DIRECTORY", "__version__"]
