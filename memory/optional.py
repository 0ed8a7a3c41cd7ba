"""Optional dependencies: a missing one disables the feature that needs it, never the pack."""

from __future__ import annotations

import functools
import importlib
import logging
from types import ModuleType

log = logging.getLogger("headroom")

# Import name -> the pip distribution that provides it (for the fix in the log line).
PIP_NAMES = {"pynvml": "nvidia-ml-py", "matplotlib": "matplotlib", "psutil": "psutil"}


@functools.cache
def optional_module(name: str, feature: str) -> ModuleType | None:
    """Import ``name``, or log once which ``feature`` is off and how to fix it, and return None."""
    try:
        return importlib.import_module(name)
    except Exception as exc:  # an installed but broken package (ABI, missing libs) counts as absent too
        pip_name = PIP_NAMES.get(name.split(".")[0], name.split(".")[0])
        log.warning(
            "Headroom: %s is disabled: cannot import %s (%s). Fix: pip install %s",
            feature,
            name,
            exc,
            pip_name,
        )
        return None
