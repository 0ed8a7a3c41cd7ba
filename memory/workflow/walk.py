"""Memoised evaluation over a graph without recursion: chains of 100,000 nodes are valid prompts."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, MutableMapping
from typing import TypeVar

from ..deadline import check_time

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


def fill(
    root: K,
    memo: MutableMapping[K, V],
    reads: Callable[[K], Iterable[K]],
    compute: Callable[[K], V],
    pending: Callable[[K], V],
) -> V:
    """``memo[root]``, computing it and every key it ``reads`` first (post-order, explicit stack), so
    ``compute(key)`` finds what it reads in ``memo`` and never recurses more than one level.

    A key met again before it is computed closes a cycle: it reads as ``pending(key)`` meanwhile (the
    value a recursive memoised walk would see). ``reads`` may over-approximate what ``compute`` reads.
    """
    stack: list[tuple[K, bool]] = [(root, False)]
    while stack:
        key, ready = stack.pop()
        if ready:
            memo[key] = compute(key)
            continue
        if key in memo:
            continue
        check_time()
        memo[key] = pending(key)
        stack.append((key, True))
        stack += [(read, False) for read in reads(key) if read not in memo]
    return memo[root]
