"""A test-only custom node pack for the browser tier's servers (never shipped): the machine faults a user
meets, made on demand. A model file whose name holds ``enomem`` fails to load as a file the OS cannot map
does on a machine out of memory or address space (Linux's ENOMEM; Windows says "the paging file is too
small"), so the Offload Loader's report of it can be seen in the frontend (#29 N5). Every other file
loads as it would."""

from __future__ import annotations

import functools
import os

import comfy.utils

NODE_CLASS_MAPPINGS: dict = {}


def _unmappable(load):  # noqa: ANN001, ANN202
    @functools.wraps(load)
    def wrapper(ckpt, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        name = os.path.basename(str(ckpt))
        if "enomem" in name:
            size = os.path.getsize(ckpt)
            raise RuntimeError(f"unable to mmap {size} bytes from file <{ckpt}>: Cannot allocate memory (12)")
        return load(ckpt, *args, **kwargs)

    return wrapper


comfy.utils.load_torch_file = _unmappable(comfy.utils.load_torch_file)
