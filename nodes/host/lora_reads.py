"""The host patching a LoRA (or a cast) into a "disk" component's weight reads it through the file.

The host's ``ModelPatcher.patch_weight_to_device`` copies each patched weight to the compute device and
adds the LoRA's difference. On the disk tier the weight is a view of the file's mapping, so that copy read
the pages: a file truncated meanwhile killed ComfyUI (SIGBUS). Wrapped on the class (a LoRA loader patches
a clone of the loader's patcher), the call gets a private copy read through the file in the weight's
place (``read_through.borrow``): a changed file is a FileChanged naming it. The host's backup of the
unpatched weight points at the mapping again afterwards, as it did without the wrapper. Any other weight
(a RAM copy, the host's own mappings, a quantized tensor) is passed through untouched.
"""

from __future__ import annotations

import functools
import inspect
import logging
import sys
from typing import TYPE_CHECKING, Any

from ...memory.residency import read_through
from ...memory.residency.mapped import FileChanged
from .patches import REGISTRY

if TYPE_CHECKING:
    from .host_types import ModelPatcher


_log = logging.getLogger("headroom")
NAME = "ModelPatcher.patch_weight_to_device[read through]"


def install() -> bool:
    """Wrap the host's ``ModelPatcher.patch_weight_to_device`` once per process; False where the host
    has none with a ``(self, key, ...)`` signature (then it is left as it is)."""
    mp = sys.modules.get("comfy.model_patcher")
    cls = getattr(mp, "ModelPatcher", None)
    original = vars(cls).get("patch_weight_to_device") if cls is not None else None
    if original is None:
        return False
    if REGISTRY.find(NAME, cls) is not None:
        return True
    try:
        names = list(inspect.signature(original).parameters)
    except (TypeError, ValueError):
        return False
    if names[:2] != ["self", "key"]:
        return False

    position = {name: i - 2 for i, name in enumerate(names)}  # after self and key

    def arg(args: tuple[Any, ...], kwargs: dict[str, Any], name: str) -> bool:
        i = position.get(name)
        return bool(kwargs.get(name) or (i is not None and 0 <= i < len(args) and args[i]))

    def make(original: Any) -> Any:
        @functools.wraps(original)
        def patch_weight_to_device(self: Any, key: str, *args: Any, **kwargs: Any) -> Any:
            patch.fire()
            lent = None
            if key in getattr(self, "patches", {}) or arg(args, kwargs, "force_cast"):  # else nothing is read
                lent = _borrow(self, key)
            try:
                return original(self, key, *args, **kwargs)
            finally:
                if lent is not None:
                    inplace = bool(getattr(self, "weight_inplace_update", False)) or arg(
                        args, kwargs, "inplace_update"
                    )
                    lent.give_back(in_place=inplace and not arg(args, kwargs, "return_weight"))

        return patch_weight_to_device

    patch = REGISTRY.wrap(NAME, cls, "patch_weight_to_device", make)
    return True


def _borrow(patcher: ModelPatcher, key: str) -> read_through.Borrowed | None:
    """The weight lent as a private copy, the host being about to read it (it has patches, or is cast)."""
    try:
        return read_through.borrow(patcher.model, key)
    except FileChanged:
        raise  # the clear error this exists for
    except Exception as exc:  # fail open: the host reads the weight as it would have
        _log.warning("Headroom: could not read %s through its file (%s); the host reads it itself", key, exc)
        return None
