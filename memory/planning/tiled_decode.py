"""The Tiled VAE Decode's own figures in the plan (issue #32).

The node sizes its tiles to the room the plan leaves it, so its step needs two figures: the bytes with
room for the whole frame (its peak when nothing else is loaded) and the bytes at its smallest tiles (the
least it runs with; below that the node refuses). Both come from its engine, which only the host can
build: the host adapter (nodes/host/vae_plan.py) makes the VAE on the meta device from the file's header
and asks the engine. Without it (the command line) the node is planned as any VAE decode, with a note.
"""

from __future__ import annotations

from collections.abc import Callable

from ..names import NODE_IDS

# (VAE file, width, height, frames, batch in output pixels) -> (whole-frame bytes, least bytes), or why
# the figures cannot be had.
TiledDecodeFigures = Callable[[str, int, int, int, int], "tuple[int, int] | str"]
TILED_DECODE = NODE_IDS["tiled_vae_decode"]


class TiledFigures:
    """The figures for the extractor's steps, and one note per VAE it had to plan without them."""

    def __init__(self, notes: list[str], tile: int, source: TiledDecodeFigures | None = None) -> None:
        self.notes, self.tile, self.source = notes, tile, source
        self._noted: set[str] = set()

    def __call__(
        self, file: str | None, label: str, width: int, height: int, frames: int, batch: int
    ) -> tuple[int, int] | None:
        why = "no host to build the decoder (the command line plans without ComfyUI)"
        if self.source is not None and file:
            got = self.source(file, width, height, frames, batch)
            if not isinstance(got, str):
                return got
            why = got
        elif self.source is not None:
            why = "the VAE's file is not known"
        if label not in self._noted:
            self._noted.add(label)
            self.notes.append(
                f"{label}: the Tiled VAE Decode is planned as a VAE decode in {self.tile} px tiles, not "
                f"from its own estimate ({why})"
            )
        return None
