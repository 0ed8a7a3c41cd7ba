"""Test support shared by the test tiers and the benchmarks: the real-host harness and tiny models."""
