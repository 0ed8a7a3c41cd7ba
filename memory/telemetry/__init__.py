"""Measuring a run: memory probes, the sampler, per-node records and their chart."""
