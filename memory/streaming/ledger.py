"""Every byte the streamer places on the device, at every moment, against the budget."""

from __future__ import annotations

from dataclasses import dataclass, field


class BudgetExceeded(RuntimeError):
    """Placing these bytes would take the device above the streaming budget."""


@dataclass
class DeviceLedger:
    """Bytes on the device by owner ("rest", "resident:<block>", "ring"); ``peak`` is the high mark."""

    budget: int | None = None
    entries: dict[str, int] = field(default_factory=dict)
    peak: int = 0

    @property
    def total(self) -> int:
        return sum(self.entries.values())

    def add(self, owner: str, nbytes: int) -> None:
        if self.budget is not None and self.total + nbytes > self.budget:
            raise BudgetExceeded(
                f"placing {nbytes:,} bytes for {owner} would use {self.total + nbytes:,} of a "
                f"{self.budget:,}-byte budget"
            )
        self.entries[owner] = self.entries.get(owner, 0) + nbytes
        self.peak = max(self.peak, self.total)

    def remove(self, owner: str) -> None:
        self.entries.pop(owner, None)

    def clear(self) -> None:
        self.entries.clear()
