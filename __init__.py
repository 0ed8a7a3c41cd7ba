"""Headroom: run ComfyUI workflows whose models are bigger than the GPU.

ComfyUI imports this file from ``custom_nodes/<any folder name>``; ``pip install -e .`` makes the same
folder importable as ``comfyui_headroom``. Nothing here imports ComfyUI at import time, so the
command line (``python -m comfyui_headroom``) and ``memory/`` work without a host.
"""

from .nodes import NODE_CLASS_MAPPINGS, NODE_DISPLAY_NAME_MAPPINGS
from .version import __version__

# The only frontend registration: served at /extensions/<folder name>/ (no [tool.comfy] web, which
# would load the same scripts a second time under the project name).
WEB_DIRECTORY = "./js"

__all__ = ["NODE_CLASS_MAPPINGS", "NODE_DISPLAY_NAME_MAPPINGS", "WEB_DIRECTORY", "__version__"]
