"""The size of an image or video a loader will load, read from its file's header before the run (#39).

The planner asks for LoadImage's, LoadImageMask's and LoadVideo's sizes (memory/planning/latents.py,
``MediaSizes``); only the server has the input folder, so the command line keeps its note. A name is
resolved as the host resolves it (``folder_paths``: "name [input]" / "[output]" / "[temp]", else the
input folder) and must stay inside that folder after symlinks (realpath): anything else is "not read",
with the same words whether or not such a file exists. Only headers are read: Pillow opens an image
lazily (size and frame count), PyAV reads a container's stream header.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from .lookups import host_module

_log = logging.getLogger("headroom")
MAX_NAME = 512  # a longer name is no file the host lists
NOT_READ = "its size is read from the file when it runs (not a file of the input folder Headroom may read)"


def _path(name: str) -> str | None:
    """The file ``name`` names inside the host's input (or annotated) folder, or None outside it."""
    if not name or len(name) > MAX_NAME or "\x00" in name:
        return None
    folder_paths = host_module("folder_paths")
    annotated = getattr(folder_paths, "annotated_filepath", None)  # the host's own "[input]" rule
    name, folder = annotated(name) if annotated is not None else (name, None)
    base = folder or getattr(folder_paths, "get_input_directory", lambda: None)()
    if not base:
        return None
    root = os.path.realpath(base)
    path = os.path.realpath(os.path.join(root, name))
    try:
        inside = os.path.commonpath((root, path)) == root
    except ValueError:  # another drive on Windows
        inside = False
    return path if inside and os.path.isfile(path) else None


def _image(path: str) -> tuple[int, int, int]:
    from PIL import Image

    with Image.open(path) as image:  # reads the header only
        return int(image.width), int(image.height), int(getattr(image, "n_frames", 1) or 1)


def _video(path: str) -> tuple[int, int, int]:
    import av

    with av.open(path) as container:
        stream = container.streams.video[0]
        frames = int(stream.frames or 0)
        if not frames and stream.duration and stream.average_rate:
            frames = int(stream.duration * stream.time_base * stream.average_rate)
        return int(stream.width), int(stream.height), max(frames, 1)


def media_sizes(class_type: str, inputs: dict[str, Any]) -> tuple[int, int, int] | str:
    """(width, height, frames) of the file a loader names, or why it is not read (latents.MediaSizes)."""
    name = inputs.get("video" if class_type == "LoadVideo" else "image") or inputs.get("file")
    if not isinstance(name, str):
        return NOT_READ
    try:
        path = _path(name)
        if path is None:
            return NOT_READ
        return _video(path) if class_type == "LoadVideo" else _image(path)
    except Exception as exc:  # a damaged or unsupported file: the host says so when it runs
        _log.debug("Headroom: could not read the size of %r: %s", name, exc)
        return "its size is read from the file when it runs (its header could not be read here)"
