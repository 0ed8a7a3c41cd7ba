"""comfy-aimdo 0.6's page-out callback and simple VRAM headroom on a real device (#40 item 6;
nodes/host/aimdo_hooks.py): with Headroom's counter on ``ModelVBAR.__init__``, raising the headroom
until a second VBAR's faults must take the first one's pages makes aimdo call the callback, and the
node's "bounded by" line says what was paged out. The CPU tests use stand-ins
(tests/unit/test_aimdo_hooks.py).

Its own file (one pytest process per file in scripts/gpu-check): comfy-aimdo takes the device before torch
makes its CUDA context, as the host's main.py does. The GPU image installs aimdo 0.6.0 from .gpu-wheels."""

from __future__ import annotations

import inspect
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from comfyui_headroom.memory.telemetry.bounds import bounded_by
from headroom_testing.aimdo_device import PAGE, aimdo_on_device

pytestmark = pytest.mark.gpu


def _side_aimdo(tmp: Path) -> str:
    """comfy-aimdo 0.6.0 from the wheel scripts/gpu-check carried beside the host's pin
    (gpu_hosts.SIDE_WHEELS), first on this process's path before anything imports comfy_aimdo; what was
    done, or why not."""
    received = Path(os.environ.get("HEADROOM_GPU_RECEIVED", "/tmp/headroom-carry"))
    found = sorted(received.glob("comfy_aimdo-0.6*.whl.side"))
    if not found:
        return f"no comfy-aimdo 0.6 side wheel in {received}"
    wheel = tmp / found[-1].name.removesuffix(".side")
    shutil.copyfile(found[-1], wheel)
    target = tmp / "aimdo06"
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--target", str(target)]
    if subprocess.call([*cmd, str(wheel)]) != 0:
        return f"pip could not install {wheel.name}"
    sys.path.insert(0, str(target))
    return f"using {wheel.name}"


def test_page_outs_under_a_raised_headroom_reach_headrooms_counter(tmp_path: Path) -> None:
    print(_side_aimdo(tmp_path))
    control, model_vbar = aimdo_on_device()
    import torch

    if "pageout_callback" not in inspect.signature(model_vbar.ModelVBAR.__init__).parameters:
        pytest.skip("this comfy-aimdo's ModelVBAR takes no pageout_callback (0.6.0 and later do)")
    from comfyui_headroom.nodes.host import aimdo_hooks
    from comfyui_headroom.nodes.host.patches import REGISTRY

    assert aimdo_hooks.count_pageouts() == "on"
    host_headroom = control.get_simple_vram_headroom()
    try:
        start = aimdo_hooks.pageout_gauges()
        first = model_vbar.ModelVBAR(64 * PAGE, 0)
        first.prioritize()
        if hasattr(model_vbar, "vbars_reset_watermark_limits"):
            model_vbar.vbars_reset_watermark_limits()
        a = first.alloc(24 * PAGE)
        assert model_vbar.vbar_fault(a) is not None, "the first fault found no room on an idle device"
        free, _total = torch.cuda.mem_get_info()
        control.set_simple_vram_headroom(max(0, free - 32 * PAGE))  # leaves room for ~32 pages in all
        model_vbar.vbar_unpin(a)  # the first model's node is over: its pages may go
        second = model_vbar.ModelVBAR(64 * PAGE, 0)
        second.prioritize()
        b = second.alloc(24 * PAGE)
        model_vbar.vbar_fault(b)  # takes the first VBAR's pages (or answers OOM: still counted)
        end = aimdo_hooks.pageout_gauges()
        assert end["aimdo_pageouts"] > start["aimdo_pageouts"], (start, end, first.loaded_size())
        bound = bounded_by(1.0, {}, gauges=(start, end))
        assert bound.aimdo_pageouts and "comfy-aimdo paged out" in bound.line
        print(
            f"page-outs {end['aimdo_pageouts'] - start['aimdo_pageouts']}, {bound.aimdo_pageout_bytes} bytes"
        )
    finally:
        control.set_simple_vram_headroom(host_headroom)
        REGISTRY.uninstall(prefix="aimdo.")
