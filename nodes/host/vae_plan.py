"""The Tiled VAE Decode's own figures for the plan (memory/planning/tiled_decode.py, issue #32).

The host's VAE class is built on the meta device from the file's safetensors header (shapes and
metadata, no weights read), and its tiled engine says what a decode of the planned size takes with room
for the whole frame and at its smallest tiles, in bfloat16 on a CUDA card (the plan's card). Built once
per file version; anything that fails gives the reason instead, and the plan says it in a note.
"""

from __future__ import annotations

import inspect
import logging
import math
import threading
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ...memory.models.header import ComponentError, read_header
from ...memory.process_state import PROCESS
from ...memory.residency.mapped import TORCH_DTYPES
from ...memory.tiled_vae import DecodeOptions, Unsupported, make_tiled_decoder
from .lookups import HOST_MODEL_FILES, host_module

if TYPE_CHECKING:
    from .host_types import VAE


_log = logging.getLogger("headroom")
_PREFIXES = ("first_stage_model.", "vae.")  # a checkpoint's VAE part (SD/Flux; LTX-2's all-in-one)
_WHOLE = 1 << 50  # a budget no frame exceeds: the engine's figure for the whole frame in one tile
_KEEP = 8  # VAE files kept built (a few bytes each on the meta device)
_lock = threading.Lock()


def _forget() -> None:
    with _lock:
        _built.clear()


_built: OrderedDict[tuple[str, int, int], Any] = PROCESS.hold(  # (path, size, mtime) -> engine or reason
    "host.vae_plan: built VAE engines",
    OrderedDict(),
    f"the last {_KEEP} VAE files' decode engines (built on the meta device), so a plan does not rebuild them",
    reset=_forget,
)


def _state_dict(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Meta tensors of the file's VAE part, with the header's metadata (LTXV reads its config there)."""
    specs, metadata = read_header(path)
    for prefix in _PREFIXES:
        part = {k[len(prefix) :]: v for k, v in specs.items() if k.startswith(prefix)}
        if any(k.startswith("decoder.") for k in part):
            specs = part
            break
    sd = {
        k: torch.empty(v.shape, dtype=TORCH_DTYPES.get(v.dtype, torch.float32), device="meta")
        for k, v in specs.items()
    }
    return sd, metadata


def _build(path: Path) -> tuple[Any, Any] | str:
    """(the host's VAE on the meta device, its tiled engine), or why there is none."""
    try:
        sd, metadata = _state_dict(path)
    except (ComponentError, OSError) as exc:
        return f"its header could not be read: {exc}"
    if not any(k.startswith("decoder.") or ".decoder." in k for k in sd):
        return "the file holds no VAE decoder Headroom can read"
    make = host_module("comfy.sd").VAE
    kwargs = {"metadata": metadata or None} if "metadata" in inspect.signature(make).parameters else {}
    try:
        with torch.device("meta"):
            vae = make(sd=sd, **kwargs)  # the 2024 host's VAE takes no metadata
    except Exception as exc:  # the host could not make a VAE of it: said in the plan's note
        _log.debug("Headroom: %s could not be built on the meta device", path, exc_info=True)
        return f"the host could not build its VAE on the meta device ({type(exc).__name__}: {exc})"
    options = DecodeOptions(torch.device("cuda"), torch.bfloat16, budget_bytes=_WHOLE)  # sizes only: no act
    model = getattr(vae, "first_stage_model", None)
    try:
        if not isinstance(model, torch.nn.Module):
            raise Unsupported("the VAE has no first_stage_model module")
        return vae, make_tiled_decoder(model, options)
    except Unsupported as exc:
        return f"the node decodes this VAE with the host's own decode ({exc})"


def _find(file: str) -> Path | None:
    """The file the plan names, by the host's rule (a VAE's name, or for a checkpoint's VAE part a
    checkpoint's; lookups.HostModelFiles): None for a name the host does not list, whatever the disk."""
    return HOST_MODEL_FILES(file, "vae")


def latent_shape(vae: VAE, width: int, height: int, frames: int, batch: int) -> tuple[int, ...]:
    """The latent a decode into width x height (x frames) pixels takes, from the host VAE's ratios."""
    ratio = getattr(vae, "downscale_ratio", 8)
    time, down_h, down_w = ratio if isinstance(ratio, tuple) else (None, ratio, ratio)
    side = (batch, int(vae.latent_channels), math.ceil(height / down_h), math.ceil(width / down_w))
    if int(getattr(vae, "latent_dim", 2)) != 3:
        return side
    count = time(frames) if callable(time) else math.ceil(frames / (time or 1))
    return (*side[:2], max(1, int(count)), *side[2:])


def tiled_decode_figures(
    file: str, width: int, height: int, frames: int, batch: int
) -> tuple[int, int] | str:
    """``memory.planning.tiled_decode.TiledDecodeFigures`` on this host: (bytes with room for the whole
    frame, bytes at the smallest tiles) of the Tiled VAE Decode, or why it cannot say."""
    path = _find(file)
    try:
        stat = path.stat() if path is not None else None
    except OSError:
        stat = None
    if path is None or stat is None:
        return "the VAE's file is not one the host lists"
    if path.suffix.lower() not in (".safetensors", ".sft"):
        return "only a safetensors VAE is read for its decoder"
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    with _lock:
        built = _built.get(key)
        if built is None:
            built = _build(path)
            _built[key] = built
            while len(_built) > _KEEP:
                _built.popitem(last=False)
        _built.move_to_end(key)
    if isinstance(built, str):
        return built
    vae, engine = built
    shape = latent_shape(vae, width, height, frames, batch)
    try:
        return int(engine.predicted_peak(shape, 2)), int(engine.minimum_peak(shape, 2))
    except Exception as exc:  # fail open: the plan takes the generic figure and says why
        _log.debug("Headroom: the tiled decode's estimate failed for %s", path, exc_info=True)
        return f"its estimate failed ({type(exc).__name__}: {exc})"
