"""Fixtures of the fuzz tier: ``served``, the host's own PromptServer on loopback
(headroom_testing.served), for the routes' fuzz test."""

from headroom_testing.served import served  # noqa: F401 (a fixture)
