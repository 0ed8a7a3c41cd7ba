"""What "exact" means for a tiled VAE decode on this machine, and the one assertion the tests use.

The tiled decode uses the whole image's GroupNorm statistics, reads the full halo each layer reaches and
crops without blending: every output pixel is computed from exactly the inputs it has in a full decode.
What can still differ is rounding inside the CPU kernels: oneDNN chooses a convolution's algorithm and
blocking by the problem's shape and the CPU's instruction set, so a tile can accumulate in another order
than the whole image. Measured in float32:

* unsplit (one tile per stage, one sample at a time): bitwise on AVX2 and AVX-512 CPUs; about 3e-6 off
  with ``ATEN_CPU_CAPABILITY=default``, whose GroupNorm kernel has no fused multiply-adds for the
  engine's exact apply to mirror (``group_norm_reproduced``);
* split, on an AVX2 CPU (oneDNN's direct ``jit:avx2`` convolution for every shape, ATen AVX2): bitwise;
* split, on an AVX-512 CPU: up to 2e-6 off (a full-size SD VAE in 61 tiles); bitwise again with
  ``ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2``.

``assert_exact`` asserts bitwise equality where a runtime probe finds the kernels measured bitwise
(``bitwise_when_split`` for split decodes), else ``max |tiled - full| <= TOLERANCE``; its message gives
the difference and the probe's finding. Per-tile GroupNorm statistics (what stock tiled decoders do) are
more than 100 times that bound off on the same decodes (the ``per_tile_statistics`` tests).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import tempfile
from collections.abc import Iterator
from typing import Any

import torch

TOLERANCE = 1e-5  # float32, on decoder outputs of about -1..1 (or 0..1 images)


@contextlib.contextmanager
def _c_stdout() -> Iterator[list[str]]:
    """Collects what C code prints to file descriptor 1 (oneDNN's verbose lines) inside the block."""
    lines: list[str] = []
    libc = ctypes.CDLL(None)
    with tempfile.TemporaryFile(mode="w+b") as sink:
        libc.fflush(None)
        saved = os.dup(1)
        os.dup2(sink.fileno(), 1)
        try:
            yield lines
        finally:
            libc.fflush(None)
            os.dup2(saved, 1)
            os.close(saved)
            sink.seek(0)
            lines.extend(sink.read().decode(errors="replace").splitlines())


# 3x3 convolutions at the VAE decoders' channel counts: a full activation and a tile cut from it with
# the one-pixel halo the layer reads. Sizes are odd on purpose (no multiple of a vector width).
_PROBES = ((128, (45, 38), (9, 30, 5, 24)), (256, (33, 29), (3, 20, 11, 27)), (512, (24, 21), (0, 13, 6, 21)))


def _probe() -> tuple[bool, str]:
    if not torch.backends.mkldnn.is_available():
        return False, "torch has no oneDNN"
    capability = torch.backends.cpu.get_cpu_capability()
    gen = torch.Generator().manual_seed(0)
    implementations: set[str] = set()
    same = True
    try:
        with torch.no_grad(), _c_stdout() as printed:
            with torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON):
                for channels, (height, width), (y0, y1, x0, x1) in _PROBES:
                    conv = torch.nn.Conv2d(channels, channels, 3, padding=1)
                    x = torch.randn(1, channels, height, width, generator=gen)
                    full = conv(x)[..., y0 + 1 : y1 - 1, x0 + 1 : x1 - 1]
                    tile = conv(x[..., y0:y1, x0:x1])[..., 1:-1, 1:-1]
                    same = same and torch.equal(full, tile)
    except RuntimeError as exc:  # a torch built without oneDNN's verbose mode
        return False, f"ATen {capability}: oneDNN's implementations could not be read ({exc})"
    for line in printed:
        fields = line.split(",")
        if "exec" in fields and "convolution" in fields:  # the implementation name follows the kind
            implementations.add(fields[fields.index("convolution") + 1])
    names = ", ".join(sorted(implementations)) or "none reported"
    found = f"ATen {capability}, oneDNN convolutions: {names}, probe tiles {'equal' if same else 'differ'}"
    if capability != "AVX2" or not implementations or implementations != {"jit:avx2"}:
        return (
            False,
            f"{found}: not the kernels measured bitwise across tile shapes (ATen AVX2, oneDNN jit:avx2)",
        )
    if not same:
        return False, f"{found}: a tile's convolution differs from the full one's in the probe"
    return True, f"{found}: measured bitwise across tile shapes"


@functools.cache
def group_norm_reproduced() -> tuple[bool, str]:
    """(whether the engine's exact GroupNorm apply is bitwise torch's CPU kernel here, why).

    The engine reproduces the vectorised kernel's fused multiply-adds; a build or setting without them
    (``ATEN_CPU_CAPABILITY=default``) rounds otherwise, by about 1e-7 per norm."""
    from comfyui_headroom.memory.tiled_vae.groupnorm import apply_group_norm, kernel_stats

    gen = torch.Generator().manual_seed(1)
    x = torch.randn(1, 64, 37, 29, generator=gen) * 3 + 1
    weight, bias = torch.randn(64, generator=gen), torch.randn(64, generator=gen)
    want = torch.nn.functional.group_norm(x, 16, weight, bias, 1e-6)
    got = apply_group_norm(x, kernel_stats(x, 16, 1e-6), weight, bias, exact=True)
    capability = torch.backends.cpu.get_cpu_capability()
    if torch.equal(got, want):
        return True, f"ATen {capability}: the exact GroupNorm apply is bitwise the kernel"
    return False, f"ATen {capability}: the GroupNorm kernel rounds otherwise than the exact apply"


@functools.cache
def bitwise_when_split() -> tuple[bool, str]:
    """(whether a split decode must be bitwise the full decode here, why): only on the kernels where that
    was measured, and only if a probe of tile-shaped convolutions agrees on this machine."""
    norm_ok, norm_why = group_norm_reproduced()
    if not norm_ok:
        return False, norm_why
    return _probe()


def max_abs_diff(got: torch.Tensor, want: torch.Tensor) -> float:
    return (got.float() - want.float()).abs().max().item()


def assert_exact(got: torch.Tensor, want: torch.Tensor, *, split: bool) -> None:
    """``got`` (a tiled decode) is exactly ``want`` (the full decode), in the sense of the module docstring.

    ``split``: whether some stage ran as more than one tile or run of frames (so some convolution ran on
    another shape than in the full decode).
    """
    assert got.shape == want.shape, (got.shape, want.shape)
    diff = max_abs_diff(got, want)
    bitwise, why = bitwise_when_split() if split else group_norm_reproduced()
    kind = "a split" if split else "an unsplit"
    if bitwise:
        assert diff == 0.0, f"{kind} decode differs by {diff:.3g}; expected bitwise on this machine ({why})"
    else:
        assert diff <= TOLERANCE, f"{kind} decode differs by {diff:.3g} > {TOLERANCE:g} ({why})"


def max_tiles(report: Any) -> int:
    """The most tiles any stage of a tiled decode ran (its DecodeReport's ``stages``: name, tile, count)."""
    return max((n for _, _, n in report.stages), default=0)


def is_split(report: Any) -> bool:
    """Whether a tiled decode's DecodeReport ran some stage as more than one tile or run of frames."""
    return max_tiles(report) > 1 or bool(report.chunks)
