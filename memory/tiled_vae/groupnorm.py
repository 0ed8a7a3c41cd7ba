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

from dataclasses import dataclass

import torch


@dataclass
class GroupStats:
    """Per-(sample, group) statistics of one activation: ``mean`` and ``rstd`` are float32 [N, G]."""

    mean: torch.Tensor
    rstd: torch.Tensor

    def to(self, device: torch.device | str) -> GroupStats:
        return GroupStats(self.mean.to(device), self.rstd.to(device))


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
    """Streaming (count, mean, M2) per (sample, group), merged across tiles in float64."""

    def __init__(self, batch: int, groups: int, device: torch.device | str) -> None:
        self.groups = groups
        self.count = torch.zeros(batch, groups, dtype=torch.float64, device=device)
        self.mean = torch.zeros_like(self.count)
        self.m2 = torch.zeros_like(self.count)

    def add(self, core: torch.Tensor) -> None:
        """Merge the statistics of ``core`` [N, C, *spatial] (the tile without its halo)."""
        n = core.shape[0]
        flat = core.reshape(n, self.groups, -1)
        count = flat.shape[-1]
        mean_b = torch.zeros(n, self.groups, dtype=torch.float64, device=core.device)
        m2_b = torch.zeros_like(mean_b)
        for g in range(self.groups):  # one group at a time: bounds the float64 copy
            values = flat[:, g].double()
            mean_b[:, g] = values.mean(-1)
            m2_b[:, g] = (values - mean_b[:, g, None]).square().sum(-1)
        total = self.count + count
        delta = mean_b - self.mean
        self.mean = self.mean + delta * (count / total)
        self.m2 = self.m2 + m2_b + delta.square() * (self.count * count / total)
        self.count = total

    def stats(self, eps: float) -> GroupStats:
        var = self.m2 / self.count  # biased, as GroupNorm uses
        return GroupStats(self.mean.float(), torch.rsqrt(var + eps).float())


def apply_group_norm(
    x: torch.Tensor,
    stats: GroupStats,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    exact: bool,
) -> torch.Tensor:
    """GroupNorm of a tile ``x`` [N, C, *spatial] with statistics of the whole activation.

    ``exact`` mirrors the CPU kernel's arithmetic: per channel ``scale = rstd * gamma`` and
    ``shift = fma(-scale, mean, beta)``, then ``y = fma(scale, x, shift)``; the fused multiply-adds are
    computed in float64 (exact products) and rounded once to float32, as the hardware FMA does.
    Otherwise ``addcmul`` in float32, the same formula without the float64 temporaries.
    """
    n, c = x.shape[:2]
    groups = stats.mean.shape[1]
    extra = (1,) * (x.ndim - 2)
    mean = stats.mean.to(x.device).repeat_interleave(c // groups, 1)  # [N, C]
    rstd = stats.rstd.to(x.device).repeat_interleave(c // groups, 1)
    gamma = weight.to(x.device, torch.float32) if weight is not None else torch.ones(c, device=x.device)
    beta = bias.to(x.device, torch.float32) if bias is not None else torch.zeros(c, device=x.device)
    scale = rstd * gamma
    if exact:
        shift = (-scale.double() * mean.double() + beta.double()).float()
        out = torch.empty(x.shape, dtype=torch.float32, device=x.device)
        step = 16  # channels at a time: the float64 temporaries stay small
        for i in range(0, c, step):
            j = min(c, i + step)
            s64 = scale[:, i:j].double().view(n, j - i, *extra)
            b64 = shift[:, i:j].double().view(n, j - i, *extra)
            out[:, i:j] = (s64 * x[:, i:j].double() + b64).float()
        return out.to(x.dtype)
    shift = beta - scale * mean
    y = torch.addcmul(shift.view(n, c, *extra), x.float(), scale.view(n, c, *extra))
    return y.to(x.dtype)
