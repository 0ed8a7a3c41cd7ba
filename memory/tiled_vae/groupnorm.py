"""GroupNorm with whole-activation statistics, applied one tile at a time.

A GroupNorm layer reaches across the whole image through its per-(sample, group) mean and variance,
which is why tiled decoders drift in tone. Here the statistics always describe the whole activation:

* ``kernel_stats``: torch's own GroupNorm kernel run over the whole (parked) activation. On the CPU this
  gives the very mean/rstd a full decode computes, and ``apply_group_norm(..., exact=True)`` then
  reproduces the vectorised kernel's per-element arithmetic (fused multiply-adds), so a tile is
  bit-identical to the full layer (measured with AVX2 and AVX-512 kernels; a build without them,
  ``ATEN_CPU_CAPABILITY=default``, rounds otherwise, about 1e-7 per norm).
* ``StatsMerger``: per-tile (count, mean, M2) merged with Chan's parallel formula in float64 on the
  compute device, from the tiles' core pixels only (no halo counted twice). Exact up to rounding (the
  host's kernel accumulates in float32); used where the activation lives off the compute device (CUDA).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch


@dataclass
class GroupStats:
    """Per-(sample, group) statistics of one activation: ``mean`` and ``rstd`` are float32 [N, G], or
    [N, G, T] per frame of a video whose GroupNorms the host runs on runs of frames (``segment_stats``)."""

    mean: torch.Tensor
    rstd: torch.Tensor

    def to(self, device: torch.device | str) -> GroupStats:
        return GroupStats(self.mean.to(device), self.rstd.to(device))

    def frames(self, f0: int, f1: int) -> GroupStats:
        """The statistics of frames ``[f0, f1)`` (all of them when not per frame)."""
        if self.mean.ndim == 2:
            return self
        return GroupStats(self.mean[..., f0:f1], self.rstd[..., f0:f1])


Segments = list[tuple[int, int]]


def segment_stats(x: torch.Tensor, groups: int, eps: float, segments: Segments | None) -> GroupStats:
    """``kernel_stats`` of ``x`` [N, C, T, H, W] taken over each run of frames in ``segments`` (as the
    host normalises each chunk it decodes on its own), spread to every frame: [N, G, T]. Whole-activation
    statistics when ``segments`` is None."""
    if segments is None:
        return kernel_stats(x, groups, eps)
    means, rstds = [], []
    for f0, f1 in segments:
        part = kernel_stats(x[:, :, f0:f1], groups, eps)
        means.append(part.mean[..., None].expand(-1, -1, f1 - f0))
        rstds.append(part.rstd[..., None].expand(-1, -1, f1 - f0))
    return GroupStats(torch.cat(means, 2).contiguous(), torch.cat(rstds, 2).contiguous())


def kernel_stats(x: torch.Tensor, groups: int, eps: float, groups_per_call: int = 8) -> GroupStats:
    """The statistics torch's GroupNorm kernel computes for ``x`` [N, C, *spatial].

    Called on a few groups at a time (each group is reduced on its own, so the result is the same as
    one call over all of them) to bound the temporary output the kernel also writes.
    """
    n, c = x.shape[:2]
    per_group = c // groups
    spatial = x[0, 0].numel()
    means, rstds = [], []
    for g0 in range(0, groups, groups_per_call):
        g1 = min(groups, g0 + groups_per_call)
        chunk = x[:, g0 * per_group : g1 * per_group].contiguous()
        _, mean, rstd = torch.native_group_norm(chunk, None, None, n, chunk.shape[1], spatial, g1 - g0, eps)
        means.append(mean.float())
        rstds.append(rstd.float())
    return GroupStats(torch.cat(means, 1), torch.cat(rstds, 1))


class StatsMerger:
    """Streaming (count, mean, M2) per (sample, group), merged across tiles in float64; with
    ``segments``, per run of frames (see ``segment_stats``)."""

    def __init__(
        self, batch: int, groups: int, device: torch.device | str, segments: Segments | None = None
    ) -> None:
        self.groups, self.segments = groups, segments
        runs = 1 if segments is None else len(segments)
        self.count = torch.zeros(batch, groups, runs, dtype=torch.float64, device=device)
        self.mean = torch.zeros_like(self.count)
        self.m2 = torch.zeros_like(self.count)

    def add(self, core: torch.Tensor, first_frame: int = 0) -> None:
        """Merge the statistics of ``core`` [N, C, *spatial] (the tile without its halo); a video core's
        frames start at ``first_frame`` of the activation."""
        if self.segments is None:
            self._merge(core, 0)
            return
        last = first_frame + core.shape[2]
        for run, (f0, f1) in enumerate(self.segments):
            a, b = max(f0, first_frame), min(f1, last)
            if a < b:
                self._merge(core[:, :, a - first_frame : b - first_frame], run)

    def _merge(self, core: torch.Tensor, run: int) -> None:
        n = core.shape[0]
        flat = core.reshape(n, self.groups, -1)
        count = flat.shape[-1]
        mean_b = torch.zeros(n, self.groups, dtype=torch.float64, device=core.device)
        m2_b = torch.zeros_like(mean_b)
        for g in range(self.groups):  # one group at a time: bounds the float64 copy
            values = flat[:, g].double()
            mean_b[:, g] = values.mean(-1)
            m2_b[:, g] = (values - mean_b[:, g, None]).square().sum(-1)
        old_count, old_mean = self.count[..., run], self.mean[..., run]
        total = old_count + count
        delta = mean_b - old_mean
        self.mean[..., run] = old_mean + delta * (count / total)
        self.m2[..., run] += m2_b + delta.square() * (old_count * count / total)
        self.count[..., run] = total

    def stats(self, eps: float) -> GroupStats:
        var = self.m2 / self.count  # biased, as GroupNorm uses
        mean, rstd = self.mean.float(), torch.rsqrt(var + eps).float()
        if self.segments is None:
            return GroupStats(mean[..., 0], rstd[..., 0])
        spans = torch.tensor([f1 - f0 for f0, f1 in self.segments], device=mean.device)
        return GroupStats(mean.repeat_interleave(spans, 2), rstd.repeat_interleave(spans, 2))


def _per_channel(t: torch.Tensor, ndim: int) -> torch.Tensor:
    """[N, C] (or [N, C, T] per frame) shaped to broadcast over an [N, C, *spatial] tensor of ``ndim``."""
    return t.reshape(*t.shape, *(1,) * (ndim - t.ndim))


def _fma_emulated(x: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    """``fma(scale, x, shift)`` rounded once to float32: the products and sums in float64 (exact for
    float32 inputs), a few channels at a time so the float64 temporaries stay small."""
    out = torch.empty(x.shape, dtype=torch.float32, device=x.device)
    step = 16
    for i in range(0, x.shape[1], step):
        j = min(x.shape[1], i + step)
        s64 = _per_channel(scale[:, i:j].double(), x.ndim)
        b64 = _per_channel(shift[:, i:j].double(), x.ndim)
        out[:, i:j] = (s64 * x[:, i:j].double() + b64).float()
    return out


@functools.cache
def addcmul_is_fma(device_type: str) -> bool:
    """Whether ``torch.addcmul(shift, x, scale)`` on ``device_type`` is ``fma(scale, x, shift)`` rounded
    once, bitwise, on a probe shaped like the tiles (a strided crop with a tail past the vector width,
    per-channel and per-frame factors). torch's CPU build contracts its vectorised multiply-add to FMA
    (measured on AVX2 kernels); a build or ``ATEN_CPU_CAPABILITY`` that does not would round twice, which
    the probe sees (a plain multiply-then-add is checked to differ on it, so it can tell the two apart).
    Where it holds, the exact apply is one float32 pass instead of the float64 emulation (about 30x
    less time on the CPU, where the emulation took a third of a tiled HunyuanVideo decode)."""
    gen = torch.Generator().manual_seed(7)
    x = (torch.randn(1, 24, 3, 11, 77, generator=gen) * 3 + 1).to(device_type)[..., 5:72]
    scale = (torch.rand(1, 24, 3, generator=gen) * 4 + 0.1).to(device_type)
    shift = torch.randn(1, 24, 3, generator=gen).to(device_type)
    for s, b in ((scale, shift), (scale[..., 0], shift[..., 0])):
        want = _fma_emulated(x, s, b)
        got = torch.addcmul(_per_channel(b, x.ndim), x, _per_channel(s, x.ndim))
        twice = x * _per_channel(s, x.ndim) + _per_channel(b, x.ndim)
        if not torch.equal(got, want) or torch.equal(twice, want):
            return False
    return True


def apply_group_norm(
    x: torch.Tensor,
    stats: GroupStats,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    exact: bool,
) -> torch.Tensor:
    """GroupNorm of a tile ``x`` [N, C, *spatial] with statistics of the whole activation.

    ``exact`` mirrors the CPU kernel's arithmetic: per channel ``scale = rstd * gamma`` and
    ``shift = fma(-scale, mean, beta)``, then ``y = fma(scale, x, shift)`` rounded once to float32, as the
    hardware FMA does: by ``addcmul`` where a probe finds it fused (``addcmul_is_fma``), else emulated in
    float64. Otherwise ``addcmul`` in float32 with ``shift`` rounded from float32 products.
    """
    n, c = x.shape[:2]
    groups = stats.mean.shape[1]
    mean = stats.mean.to(x.device).repeat_interleave(c // groups, 1)  # [N, C] or [N, C, T]
    rstd = stats.rstd.to(x.device).repeat_interleave(c // groups, 1)
    gamma = weight.to(x.device, torch.float32) if weight is not None else torch.ones(c, device=x.device)
    beta = bias.to(x.device, torch.float32) if bias is not None else torch.zeros(c, device=x.device)
    gamma, beta = _per_channel(gamma, mean.ndim - 1), _per_channel(beta, mean.ndim - 1)
    scale = rstd * gamma
    if exact:
        shift = (-scale.double() * mean.double() + beta.double()).float()
        if x.dtype == torch.float32 and addcmul_is_fma(x.device.type):
            return torch.addcmul(_per_channel(shift, x.ndim), x, _per_channel(scale, x.ndim))
        return _fma_emulated(x.float(), scale, shift).to(x.dtype)
    shift = beta - scale * mean
    y = torch.addcmul(_per_channel(shift, x.ndim), x.float(), _per_channel(scale, x.ndim))
    return y.to(x.dtype)
