"""comfy-aimdo on the CUDA device for a GPU test: its library loaded and device 0 taken before torch makes
its CUDA context (as the host's main.py does), or the test skipped saying what is missing."""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

import pytest

MiB = 2**20
PAGE = 32 * MiB  # aimdo's VBAR page (comfy_aimdo/model_vbar.py: VBAR_PAGE_SIZE)


def aimdo_on_device() -> tuple[ModuleType, ModuleType]:
    """comfy-aimdo's ``control`` and ``model_vbar`` modules, ready on device 0."""
    if importlib.util.find_spec("comfy_aimdo") is None:
        pytest.skip("comfy-aimdo is not installed (pip install comfy-aimdo)")
    import comfy_aimdo.control as control

    if not control.init():
        pytest.skip("comfy-aimdo's library did not load on this machine")
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device (none on this machine)")
    assert control.init_device(0), "comfy-aimdo could not take device 0"
    import comfy_aimdo.model_vbar as model_vbar

    if model_vbar.lib is None:  # imported before the library loaded
        model_vbar = importlib.reload(model_vbar)
    return control, model_vbar
