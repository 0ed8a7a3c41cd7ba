"""The Offload Loader's load errors are named by their cause (N5 of #29): the machine's memory (an mmap
or allocation failure, which Windows users with a small page file meet) is not "the file does not match
the architecture"."""

from __future__ import annotations

from pathlib import Path

import pytest

from comfyui_headroom.nodes.input_checks import OffloadError, loading

FILE = Path("/models/flux1-dev.safetensors")


@pytest.mark.parametrize(
    "error",
    [
        RuntimeError(
            "unable to mmap 23802932552 bytes from file <flux1-dev.safetensors>: Cannot allocate memory (12)"
        ),
        OSError("[WinError 1455] The paging file is too small for this operation to complete"),
        RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory"),
        MemoryError(),
    ],
)
def test_machine_memory_errors_say_memory_and_the_fix(error: BaseException) -> None:
    with pytest.raises(OffloadError) as raised, loading("diffusion_model", FILE, []):
        raise error
    message = str(raised.value)
    assert "ran out of memory to map or load flux1-dev.safetensors" in message
    assert "page file" in message and "does not match the architecture" not in message


def test_a_size_mismatch_is_still_the_architecture() -> None:
    with (
        pytest.raises(OffloadError, match="does not match the architecture"),
        loading("diffusion_model", FILE, []),
    ):
        raise RuntimeError("Error(s) in loading state_dict:\n\tsize mismatch for img_in.weight")


def test_a_gpu_out_of_memory_is_the_hosts_to_handle() -> None:
    with pytest.raises(RuntimeError, match="CUDA out of memory"), loading("diffusion_model", FILE, []):
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
