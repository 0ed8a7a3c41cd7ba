"""Test-only nodes that hand the host's executor values a test built in Python: a tiny DiT's MODEL (the
stock loaders cannot detect Flux at tiny size), a text encoder's output that cannot be built small, a
latent; and a sink that keeps a LATENT. A prompt can then drive the real executor (its caches, its
node boundaries, the pack's executor hooks) from the sampler on.

``install(host)`` registers them in the host's node table; ``put(value)`` returns the key a prompt's
``HeadroomTest<TYPE>`` node reads it back with."""

from __future__ import annotations

import itertools
from typing import Any

VALUES: dict[str, Any] = {}
_KEYS = itertools.count()
TYPES = ("MODEL", "CONDITIONING", "LATENT")


def put(value: Any) -> str:
    """Store ``value``; a node ``source(TYPE, key)`` outputs it. Keys never repeat (the host's cache
    compares inputs)."""
    key = f"value-{next(_KEYS)}"
    VALUES[key] = value
    return key


def source(kind: str, key: str) -> dict[str, Any]:
    """A prompt node that outputs the stored value ``key`` as a ``kind`` socket."""
    return {"class_type": f"HeadroomTest{kind.title()}", "inputs": {"key": key}}


def sink(latent: list) -> dict[str, Any]:
    """An output node keeping the LATENT linked to it (the executor runs what an output node needs)."""
    return {"class_type": "HeadroomTestKeepLatent", "inputs": {"latent": latent}}


def _source_class(kind: str) -> type:
    class Source:
        RETURN_TYPES = (kind,)
        FUNCTION = "get"
        CATEGORY = "headroom_testing"

        @classmethod
        def INPUT_TYPES(cls) -> dict[str, Any]:
            return {"required": {"key": ("STRING", {"default": ""})}}

        def get(self, key: str) -> tuple[Any]:
            return (VALUES[key],)

    Source.__name__ = f"HeadroomTest{kind.title()}"
    return Source


class KeepLatent:
    RETURN_TYPES = ()
    FUNCTION = "keep"
    OUTPUT_NODE = True
    CATEGORY = "headroom_testing"

    @classmethod
    def INPUT_TYPES(cls) -> dict[str, Any]:
        return {"required": {"latent": ("LATENT",)}}

    def keep(self, latent: dict) -> dict[str, Any]:
        return {"ui": {}}


def install(host: Any) -> None:
    """Register the fixture nodes in ``host``'s node table (idempotent)."""
    mappings = host.nodes.NODE_CLASS_MAPPINGS
    for kind in TYPES:
        mappings.setdefault(f"HeadroomTest{kind.title()}", _source_class(kind))
    mappings.setdefault("HeadroomTestKeepLatent", KeepLatent)
