"""The tiled-VAE tests' exactness assertion (tests/headroom_testing/exactness.py): bitwise where the
probe says this machine's kernels were measured bitwise, else within TOLERANCE, with the diff shown."""

from __future__ import annotations

import pytest
import torch

import headroom_testing.exactness as exactness


def rand(*shape: int) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(0))


def test_exactness_check_is_bitwise_where_the_probe_says_so_else_within_the_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    want = rand(1, 3, 8, 8)
    near, far = want + 1e-6, want + 1e-4
    monkeypatch.setattr(exactness, "bitwise_when_split", lambda: (False, "other kernels"))
    exactness.assert_exact(near, want, split=True)
    with pytest.raises(AssertionError, match=r"differs by 0\.0001 > 1e-05 \(other kernels\)"):
        exactness.assert_exact(far, want, split=True)
    monkeypatch.setattr(exactness, "bitwise_when_split", lambda: (True, "measured kernels"))
    exactness.assert_exact(want.clone(), want, split=True)
    with pytest.raises(AssertionError, match="expected bitwise"):
        exactness.assert_exact(near, want, split=True)


def test_probe_reads_which_convolution_kernels_onednn_runs() -> None:
    """The probe reads oneDNN's own verbose lines (C stdout): if that breaks, no machine is ever found
    bitwise and the tests silently take the weaker bound."""
    if not torch.backends.mkldnn.is_available():
        pytest.skip("torch has no oneDNN here: there is nothing to probe")
    _, why = exactness._probe()
    assert "oneDNN convolutions: none reported" not in why and "could not be read" not in why, why
