"""Fixtures the host tests share: ``served``, the host's own PromptServer on loopback
(headroom_testing.served), one per test module that asks for it."""

from headroom_testing.served import served  # noqa: F401 (a fixture)
