"""The disk tier on a CPU compute device: each module reads its mapped weights through the file as its
forward begins (memory.residency.read_through), so a file truncated while a node computes is an error
naming it, not SIGBUS, and the result is bit for bit the mapping's."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from comfyui_headroom.memory.residency import MappedFile, bind, footprint, read_through
from comfyui_headroom.memory.residency.mapped import FileChanged
from headroom_testing.sigbus import assert_sigbus_or_file_changed, run_child
from headroom_testing.torch_compile import recording_backend


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    blocks = [torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU()) for _ in range(4)]
    return torch.nn.Sequential(*blocks, torch.nn.LayerNorm(64)).eval()


def _mapped(tmp_path: Path) -> tuple[torch.nn.Module, MappedFile]:
    model = _model()
    path = tmp_path / "m.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    mf = MappedFile(path)
    assert bind(model, [mf]).kept == {}
    return model, mf


def test_forward_reads_through_the_file_and_leaves_the_mapping_as_it_was(tmp_path: Path) -> None:
    model, mf = _mapped(tmp_path)
    x = torch.randn(3, 64)
    with torch.no_grad():
        want = model(x)
    assert read_through.install(model) == 5  # four Linears and the LayerNorm hold weights of their own
    seen = []  # (a hook registered after install's runs after it)
    model[1][0].register_forward_pre_hook(lambda m, a: seen.append(mf.owns(m.weight)))
    with torch.inference_mode():  # as the host's executor runs nodes
        got = model(x)
    assert torch.equal(got, want)
    assert seen == [False]  # while it computed, block 1's weight was a private copy, not the pages
    assert footprint(model, [mf]).ram == 0 and footprint(model, [mf]).mapped > 0  # the views are back
    assert read_through.remove(model) and not read_through.installed(model)
    assert not read_through.remove(model)


def test_a_forward_that_fails_gives_its_copies_back(tmp_path: Path) -> None:
    model, mf = _mapped(tmp_path)
    read_through.install(model)

    def fail(*_: object) -> None:
        raise RuntimeError("interrupted")

    model[2].register_forward_pre_hook(fail)
    with pytest.raises(RuntimeError, match="interrupted"), torch.no_grad():
        model(torch.randn(1, 64))
    assert footprint(model, [mf]).ram == 0


# A node computing on the CPU from a disk component whose file is truncated (a copy or a re-download over
# it) after block 1: run in a child, where SIGBUS shows as its exit signal.
TRUNCATED_MID_NODE = r"""
import os, sys
import torch
sys.path.insert(0, sys.argv[1])
from unit.test_read_through import _mapped
from pathlib import Path
from comfyui_headroom.memory.residency import read_through
from headroom_testing.sigbus import report

tmp, through = Path(sys.argv[2]), sys.argv[3]
model, mf = _mapped(tmp)
if through == "file":
    read_through.install(model)
model[1].register_forward_hook(lambda *a: os.truncate(mf.path, 1024))
report(lambda: model(torch.randn(2, 64)))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SIGBUS semantics: Linux")
@pytest.mark.parametrize("through", ["file", "pages"])
def test_a_file_truncated_mid_node_is_an_error_not_sigbus(tmp_path: Path, through: str) -> None:
    """Read through the file, the next module's forward raises FileChanged naming the file; computing from
    the pages, as before, the process is killed by SIGBUS."""
    child = run_child(TRUNCATED_MID_NODE, str(Path(__file__).resolve().parents[1]), str(tmp_path), through)
    assert_sigbus_or_file_changed(child, through == "pages", "FileChanged: m.safetensors")


def test_a_move_or_cast_by_the_host_reads_through_the_file(tmp_path: Path) -> None:
    """``Module.to`` runs ``_apply`` on every module: with the hooks it copies from private copies read
    through the file; a move to where the weights are (the CPU) leaves the mapping's views in place."""
    model, mf = _mapped(tmp_path)
    want = {k: v.double() for k, v in model.state_dict().items()}
    assert read_through.install(model, forward=False) == 5
    model.to("cpu")
    assert footprint(model, [mf]).ram == 0  # nothing moved: the views are back
    model.to(torch.float64)
    assert all(torch.equal(v, want[k]) for k, v in model.state_dict().items())
    assert footprint(model, [mf]).mapped == 0  # a cast: private float64 copies, as without the hooks
    read_through.remove(model)
    assert "_apply" not in model[0][0].__dict__


# The host moving a disk component (its whole load onto a GPU; a cast here) while the file is truncated
# after the first module: run in a child, where SIGBUS shows as its exit signal.
TRUNCATED_MID_MOVE = r"""
import os, sys
import torch
sys.path.insert(0, sys.argv[1])
from unit.test_read_through import _mapped
from pathlib import Path
from comfyui_headroom.memory.residency import read_through
from headroom_testing.sigbus import report

tmp, through = Path(sys.argv[2]), sys.argv[3]
model, mf = _mapped(tmp)
if through == "file":
    read_through.install(model, forward=False)
calls = []

def to_double(t):
    out = t.double()
    calls.append(1)
    if len(calls) == 1:
        os.truncate(mf.path, 1024)
    return out

report(lambda: model._apply(to_double))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SIGBUS semantics: Linux")
@pytest.mark.parametrize("through", ["file", "pages"])
def test_a_file_truncated_while_the_host_moves_the_model_is_an_error_not_sigbus(
    tmp_path: Path, through: str
) -> None:
    child = run_child(TRUNCATED_MID_MOVE, str(Path(__file__).resolve().parents[1]), str(tmp_path), through)
    assert_sigbus_or_file_changed(child, through == "pages", "FileChanged: m.safetensors")


def test_a_hooked_module_the_host_drops_is_collected(tmp_path: Path) -> None:
    """The registry holds the component weakly: hooking it keeps nothing alive once the host lets go."""
    import gc
    import weakref

    model, mf = _mapped(tmp_path)
    norm = model[4]  # a component whose own module holds mapped weights (the registry's key among them)
    assert read_through.install(norm) == 1
    gone = weakref.ref(norm)
    del model, norm
    gc.collect()
    assert gone() is None


# The host patching a LoRA into a disk component's weight (nodes/host/lora_reads.py borrows it).
def test_a_borrowed_weight_is_a_private_copy_until_given_back(tmp_path: Path) -> None:
    model, mf = _mapped(tmp_path)
    param = model[1][0].weight
    lent = read_through.borrow(model, "1.0.weight")
    assert lent is not None and not mf.owns(param) and torch.equal(param, lent.view)
    lent.give_back(in_place=False)
    assert mf.owns(param) and param is model[1][0].weight  # the same Parameter, on the mapping again


def test_a_weight_the_host_replaced_leaves_its_backup_on_the_mapping(tmp_path: Path) -> None:
    """The host's backup of the unpatched weight is the Parameter it read; the patched one replaces it."""
    model, mf = _mapped(tmp_path)
    backup = model[2][0].weight
    lent = read_through.borrow(model, "2.0.weight")
    assert lent is not None
    model[2][0].weight = torch.nn.Parameter(backup.data + 1.0, requires_grad=False)  # set_attr_param
    lent.give_back(in_place=False)
    assert mf.owns(backup) and not mf.owns(model[2][0].weight)


def test_a_weight_patched_in_place_keeps_its_copy(tmp_path: Path) -> None:
    model, mf = _mapped(tmp_path)
    lent = read_through.borrow(model, "0.0.bias")
    assert lent is not None
    with torch.no_grad():
        model[0][0].bias.add_(1.0)  # the host's copy_to_param (weight_inplace_update)
    lent.give_back(in_place=True)
    assert not mf.owns(model[0][0].bias) and torch.equal(model[0][0].bias, lent.view + 1.0)
    assert torch.equal(lent.view, _model()[0][0].bias)  # the file's bytes, untouched


def test_only_mapped_weights_are_borrowed_and_a_changed_file_is_refused(tmp_path: Path) -> None:
    model, mf = _mapped(tmp_path)
    assert read_through.borrow(_model(), "1.0.weight") is None  # RAM weights: the host reads them itself
    assert read_through.borrow(model, "9.weight") is None  # no such module
    assert read_through.borrow(model, "1.0.nothing") is None
    os.truncate(mf.path, 1024)  # (borrow reads through the file: no SIGBUS in this process)
    with pytest.raises(FileChanged, match="m.safetensors"):
        read_through.borrow(model, "3.0.weight")


@pytest.mark.skipif(not hasattr(torch, "compile"), reason="this torch has no torch.compile")
def test_a_compiled_forward_reads_through_the_file_and_never_traces_the_hooks(tmp_path: Path) -> None:
    """Under ``torch.compile`` (the host's TorchCompileModel on a "disk" model) the read-through hooks run
    eagerly: dynamo breaks the graph at each and traces none of their code (the file's checks, the
    reads, the rebinding), and every module still computes from a private copy read through the file."""
    model, mf = _mapped(tmp_path)
    x = torch.randn(3, 64)
    with torch.no_grad():
        want = model(x)
    read_through.install(model)
    seen: list[bool] = []  # after install's hook: where block 1's weight is as it computes (eager too)
    model[1][0].register_forward_pre_hook(torch.compiler.disable(lambda m, a: seen.append(mf.owns(m.weight))))
    traces: list[str] = []
    torch._dynamo.reset()
    try:
        with torch.inference_mode():  # as the host's executor runs nodes
            got = [torch.compile(model, backend=recording_backend(traces))(x) for _ in range(2)]
    finally:
        torch._dynamo.reset()
    assert traces, "the forward was compiled"
    hooks = ("memory/residency", "memory/streaming")  # read_through, host_memory, mapped; file_reads
    assert not [t for t in traces if any(h in t for h in hooks)], "the hooks' code is never traced"
    assert all(torch.equal(g, want) for g in got)
    assert seen == [False, False]  # computed from a private copy each time, not the pages
    assert footprint(model, [mf]).ram == 0 and footprint(model, [mf]).mapped > 0  # the views are back
