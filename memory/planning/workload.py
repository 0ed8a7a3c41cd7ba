"""What the planner plans: model components and the steps (nodes, in execution order) that use them."""

from __future__ import annotations

import bisect
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field

from .costmodel import PIN_CHOICES, Tier


def component_id(node_id: str, input_name: str, kind: str) -> str:
    """The id of the component of ``kind`` a loader node's output carries (``input_name``: the loader
    input it comes from), as the planner and the host's loader handles both name it."""
    return f"{node_id}:{input_name}:{kind}"


@dataclass(frozen=True)
class Component:
    """One weight set, as the planner sees it: its bytes and its streamable blocks in forward order.

    Bytes outside ``blocks`` (embeddings, final layers) stay resident whenever the component streams.
    A component without blocks cannot stream: it is either fully on the GPU or not at all.
    """

    id: str
    label: str
    bytes: int
    blocks: tuple[int, ...] = ()
    kind: str = ""
    source: str = ""  # where the size came from: header, catalog or estimate
    pin: str = ""  # the user's residency choice (see costmodel.PIN_CHOICES); "" lets the planner decide

    def __post_init__(self) -> None:
        if self.pin not in PIN_CHOICES:
            raise ValueError(f"component {self.id}: unknown residency {self.pin!r}; use one of {PIN_CHOICES}")
        if self.bytes < 0 or any(b <= 0 for b in self.blocks) or sum(self.blocks) > self.bytes:
            raise ValueError(
                f"component {self.id}: inconsistent sizes (bytes {self.bytes}, blocks {self.blocks})"
            )

    @property
    def streamable(self) -> bool:
        return bool(self.blocks)

    @property
    def rest(self) -> int:
        return self.bytes - sum(self.blocks)

    def ring(self, depth: int) -> int:
        """GPU slots for streamed blocks: the one computing plus ``depth`` uploading ahead."""
        return (depth + 1) * max(self.blocks) if self.blocks else 0

    @functools.cached_property
    def _resident_prefix(self) -> tuple[int, ...]:
        sizes = sorted(self.blocks, reverse=True)
        prefix = [0]
        for size in sizes:
            prefix.append(prefix[-1] + size)
        return tuple(prefix)

    def resident_fit(self, room: int) -> tuple[int, int]:
        """(blocks kept resident, their bytes) within ``room`` bytes: the largest blocks first.

        Keeping the biggest blocks resident streams the fewest bytes for the same room; blocks of one
        model are nearly uniform, so this matches the best choice in all but contrived cases.
        """
        k = bisect.bisect_right(self._resident_prefix, max(room, 0)) - 1
        return k, self._resident_prefix[k]


@dataclass(frozen=True)
class Step:
    """One node of the predicted execution order."""

    node_id: str
    label: str
    uses: tuple[str, ...] = ()  # components it computes with
    evaluations: int = 1  # full passes over the weights (sampling steps; 1 for encode/decode)
    activation: int = 0  # peak activation bytes on the GPU, cond and uncond batched where cfg is on
    compute_s: float = 0.0  # predicted compute time, for wall-time estimates only
    # The peak at the smallest batch the host runs (with cfg: the cond alone, samplers.py:263-274); it
    # sets the minimum VRAM. Left out (-1): the same as ``activation``.
    activation_min: int = -1
    reservation: int = -1  # what the host's own formula keeps free for it; left out (-1): ``activation``
    # components a Stream Model node streams here, each with that node's VRAM budget (None: auto)
    streamed: tuple[tuple[str, int | None], ...] = ()

    def __post_init__(self) -> None:
        if self.activation_min == -1:
            object.__setattr__(self, "activation_min", self.activation)
        if self.reservation == -1:
            object.__setattr__(self, "reservation", self.activation)
        if not 0 <= self.activation_min <= self.activation:
            raise ValueError(f"step {self.node_id}: activation_min {self.activation_min} > {self.activation}")


@dataclass(frozen=True)
class Workload:
    components: tuple[Component, ...]
    steps: tuple[Step, ...]
    notes: tuple[str, ...] = field(default=())
    # Where components are before the first step (a re-plan mid-prompt); absent ones are on disk. Only
    # components live at the first step start from here; the others are dropped, as after a last use.
    initial: Mapping[str, Tier] = field(default_factory=dict, compare=False, hash=False)
    # Model files the workflow names that no component counts (a loader the extractor cannot read), as
    # "node ... input ... names FILE": a plan without them must not read as "fits, 0 B".
    uncounted: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        known = {c.id for c in self.components}
        if len(known) != len(self.components):
            raise ValueError("duplicate component ids")
        for step in self.steps:
            missing = set(step.uses) - known
            if missing:
                raise ValueError(f"step {step.node_id} uses unknown components {sorted(missing)}")
        if set(self.initial) - known:
            raise ValueError(f"initial tiers of unknown components {sorted(set(self.initial) - known)}")

    def initial_tier(self, component_id: str) -> Tier:
        return self.initial.get(component_id, Tier.DISK)

    @functools.cached_property
    def _by_id(self) -> dict[str, Component]:
        return {c.id: c for c in self.components}

    def component(self, component_id: str) -> Component:
        """The component with this id (KeyError if none): a dict lookup, prompts hold thousands."""
        return self._by_id[component_id]
