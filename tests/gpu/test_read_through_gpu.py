"""The disk tier on a CUDA host without DynamicVRAM (#31): the host's low-VRAM layers keep their weights
on the CPU and cast each to the GPU inside their forward (comfy.ops' cast_bias_weight). With the read-
through hooks each cast copies a pinned copy read through the file, not the mapping's pages: the same
result bit for bit, and a file truncated in the middle of a node is a FileChanged naming it, not SIGBUS.
The speed of it is bench/read_through_gpu.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from comfyui_headroom.memory.residency import footprint, read_through
from headroom_testing.cast_models import mapped_cast_model
from headroom_testing.sigbus import assert_sigbus_or_file_changed, run_child

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (none on this machine)"),
]


def test_low_vram_casts_read_pinned_copies_and_give_the_same_result(tmp_path: Path) -> None:
    model, mf = mapped_cast_model(tmp_path)
    x = torch.randn(8, 256, device="cuda")
    with torch.inference_mode():
        want = model(x)  # the host's casts from the mapping's pages
    assert read_through.install(model, pin=True) == 4
    seen = []
    model[2][0].register_forward_pre_hook(lambda m, a: seen.append((mf.owns(m.weight), m.weight.is_pinned())))
    with torch.inference_mode():
        got = model(x)
    torch.cuda.synchronize()
    assert torch.equal(got, want)
    assert seen == [(False, True)]  # a pinned private copy while it computed
    assert footprint(model, [mf]).ram == 0 and footprint(model, [mf]).mapped > 0  # the views are back
    read_through.remove(model)


TRUNCATED_MID_NODE = r"""
import os, sys
import torch
sys.path.insert(0, sys.argv[1])
from headroom_testing.cast_models import mapped_cast_model
from pathlib import Path
from comfyui_headroom.memory.residency import read_through
from headroom_testing.sigbus import report

tmp, through = Path(sys.argv[2]), sys.argv[3]
model, mf = mapped_cast_model(tmp, width=2048)  # 16 MiB a layer: past the first pages the file keeps
if through == "file":
    read_through.install(model, pin=True)
model[1].register_forward_hook(lambda *a: os.truncate(mf.path, 1024))
def run():
    with torch.inference_mode():
        model(torch.randn(2, 2048, device="cuda"))
    torch.cuda.synchronize()
report(run)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SIGBUS semantics: Linux")
@pytest.mark.parametrize("through", ["file", "pages"])
def test_a_file_truncated_while_a_gpu_node_casts_from_it_is_an_error_not_sigbus(
    tmp_path: Path, through: str
) -> None:
    child = run_child(TRUNCATED_MID_NODE, str(Path(__file__).resolve().parents[1]), str(tmp_path), through)
    assert_sigbus_or_file_changed(child, through == "pages", "FileChanged: m.safetensors")
