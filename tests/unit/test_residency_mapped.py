"""Disk residency: module weights become views of their safetensors file, byte-identical, with no
private copy left in RAM; anything the loader converted keeps its copy and says why."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from comfyui_headroom.memory.models.header import ComponentError
from comfyui_headroom.memory.residency import MappedFile, bind, footprint, pin, to_pageable
from headroom_testing.sigbus import assert_sigbus_or_file_changed, run_child


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 8)).eval()


def _save(module: torch.nn.Module, path: Path, prefix: str = "model.diffusion_model.") -> Path:
    save_file({prefix + k: v.contiguous() for k, v in module.state_dict().items()}, str(path))
    return path


def test_a_mapped_file_gives_the_same_tensors_as_safetensors(tmp_path: Path) -> None:
    tensors = {
        "a": torch.randn(3, 5),
        "b": torch.arange(7, dtype=torch.float16),
        "c": torch.ones(2, dtype=torch.bfloat16),
    }
    save_file(tensors, str(tmp_path / "x.safetensors"))
    mf = MappedFile(tmp_path / "x.safetensors")
    loaded = load_file(str(tmp_path / "x.safetensors"))
    for key in tensors:
        view = mf.tensor(key)
        assert view is not None and mf.owns(view)
        assert torch.equal(view, loaded[key]) and view.dtype == loaded[key].dtype


def test_bound_weights_view_the_file_and_compute_the_same(tmp_path: Path) -> None:
    module = _model()
    x = torch.randn(4, 64)
    before = module(x)
    mf = MappedFile(_save(module, tmp_path / "m.safetensors"))
    result = bind(module, [mf])
    assert not result.kept and result.mapped_bytes == sum(p.numel() * 4 for p in module.parameters())
    assert footprint(module, [mf]).mapped == result.mapped_bytes and footprint(module, [mf]).ram == 0
    assert torch.equal(module(x), before)


def test_writing_a_bound_weight_never_reaches_the_file(tmp_path: Path) -> None:
    module = _model()
    path = _save(module, tmp_path / "m.safetensors")
    original = path.read_bytes()
    bind(module, [MappedFile(path)])
    with torch.no_grad():
        module[0].weight.add_(1.0)  # copy-on-write: a private page, the file is untouched
    assert path.read_bytes() == original


def test_converted_or_patched_weights_keep_their_copy_and_say_why(tmp_path: Path) -> None:
    module = _model()
    path = _save(module, tmp_path / "m.safetensors")
    module[0].half()
    with torch.no_grad():
        module[2].weight.mul_(2)
    result = bind(module, [MappedFile(path)])
    assert "0.weight" in result.kept and "converted" in result.kept["0.weight"]
    assert "2.weight" in result.kept and "different values" in result.kept["2.weight"]
    assert "2.bias" in result.bound


_RELEASE_SCRIPT = """
import gc, sys, torch
from pathlib import Path
from safetensors.torch import save_file
from comfyui_headroom.memory.residency import MappedFile, bind

def anon():
    line = next(x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith("RssAnon"))
    return int(line.split()[1]) * 1024

module = torch.nn.Linear(4096, 4096, bias=False)  # 64 MiB of private weights
path = Path(sys.argv[1])
save_file({k: v.contiguous() for k, v in module.state_dict().items()}, str(path))
gc.collect()
held = anon()
bind(module, [MappedFile(path)])
gc.collect()
print(held - anon())
"""


@pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads RssAnon from /proc/self/status (Linux)"
)
def test_binding_releases_the_private_copy(tmp_path: Path) -> None:
    # a fresh process: this one's allocator state depends on every test that ran before
    out = subprocess.run(
        [sys.executable, "-c", _RELEASE_SCRIPT, str(tmp_path / "big.safetensors")],
        check=True, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    released = int(out.stdout.strip().splitlines()[-1])
    assert released > 48 * 2**20  # the 64 MiB copy is gone; the file's pages are page cache


def test_pinning_without_cuda_says_so_and_pageable_copies_undo_a_mapping(tmp_path: Path) -> None:
    module = _model()
    mf = MappedFile(_save(module, tmp_path / "m.safetensors"))
    bind(module, [mf])
    if not torch.cuda.is_available():
        done, why = pin(module)
        assert done == 0 and "no CUDA" in why
    copied = to_pageable(module, [mf])
    assert copied > 0 and footprint(module, [mf]).mapped == 0


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"", "too short"),
        (b"\x80\x02}q\x00" + b"\x00" * 64, "pickle"),
        (b"\x0a\x00\x00\x00\x00\x00\x00\x00{not json}xxxxx", "not JSON"),
    ],
)
def test_a_bad_file_is_refused_with_its_name_and_the_problem(
    tmp_path: Path, content: bytes, problem: str
) -> None:
    path = tmp_path / "bad model.safetensors"
    path.write_bytes(content)
    with pytest.raises(ComponentError, match=problem) as info:
        MappedFile(path)
    assert "bad model.safetensors" in str(info.value)


def test_a_truncated_file_is_refused(tmp_path: Path) -> None:
    path = _save(_model(), tmp_path / "m.safetensors")
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(ComponentError, match="truncated"):
        MappedFile(path)


def test_a_bare_file_binds_under_the_hosts_prefix(tmp_path: Path) -> None:
    # a diffusion-model file has bare keys; the host's module names carry "diffusion_model."
    wrapper = torch.nn.Module()
    wrapper.diffusion_model = _model()
    mf = MappedFile(_save(wrapper.diffusion_model, tmp_path / "unet.safetensors", prefix=""))
    result = bind(wrapper, [mf])
    assert not result.kept and set(result.bound) == {
        f"diffusion_model.{k}" for k in ("0.weight", "0.bias", "2.weight", "2.bias")
    }


def test_read_ahead_advises_each_file_and_does_nothing_where_the_os_cannot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The one home of the file-page read-ahead (both host paths call it)."""
    import mmap

    from comfyui_headroom.memory.residency import mapped

    files = [tmp_path / "a.bin", tmp_path / "b.bin"]
    for f in files:
        f.write_bytes(b"\0" * 8192)
    advised: list[int] = []
    real = mmap.mmap

    class Spy(real):  # type: ignore[misc, valid-type]
        def madvise(self, option: int, *args: int) -> None:
            advised.append(option)

    monkeypatch.setattr(mapped.mmap, "mmap", Spy)
    if hasattr(mmap, "MADV_WILLNEED"):
        mapped.read_ahead(iter(files))
        assert advised == [mmap.MADV_WILLNEED] * 2
    monkeypatch.delattr(mmap, "MADV_WILLNEED", raising=False)
    mapped.read_ahead([tmp_path / "absent"])  # not opened: no advice to give


# A tier move (disk -> RAM) of a module whose file is truncated after the move checked it (the race a
# re-download opens): run in a child, where a SIGBUS shows as its exit signal.
TRUNCATED_DURING_MOVE = r"""
import os, sys
import torch
from safetensors.torch import save_file
from comfyui_headroom.memory.residency import host_memory, mapped
from comfyui_headroom.memory.residency.mapped import MappedFile, bind
sys.path.insert(0, sys.argv[4])
from headroom_testing.sigbus import report

path, through, what = sys.argv[1], sys.argv[2], sys.argv[3]
if through == "mapping":  # the reads as they were: straight from the mapping's pages
    host_memory.file_reads.file_read = lambda t: None
    mapped.file_reads.file_read = lambda t: None
torch.manual_seed(0)
module = torch.nn.Linear(1024, 1024)
save_file({k: v.contiguous() for k, v in module.state_dict().items()}, path)
mf = MappedFile(path)
if what == "move":
    assert bind(module, [mf]).kept == {}
checks = iter([True])
mapped.MappedFile.check = lambda self: next(checks, None) and os.truncate(path, 4096)
# bind compares the module's RAM copy with the file's bytes
report(lambda: host_memory.to_pageable(module, [mf]) if what == "move" else bind(module, [mf]))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SIGBUS semantics: Linux")
@pytest.mark.parametrize("what", ["move", "bind"])
@pytest.mark.parametrize("through", ["file", "mapping"])
def test_a_file_truncated_during_a_tier_move_is_an_error_not_sigbus(
    tmp_path: Path, through: str, what: str
) -> None:
    """to_pageable (and pin) and bind's comparison read a mapped tensor through the file: truncated after
    their check, they raise FileChanged naming the file. Reading the mapping's pages, as before, is
    SIGBUS."""
    tests = str(Path(__file__).resolve().parents[1])
    child = run_child(TRUNCATED_DURING_MOVE, str(tmp_path / "m.safetensors"), through, what, tests)
    assert_sigbus_or_file_changed(child, through == "mapping", "FileChanged: m.safetensors ends at byte")
