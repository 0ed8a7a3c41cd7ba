"""The pack's version: one place, checked against pyproject.toml by the tests."""

__version__ = "0.1.0"
