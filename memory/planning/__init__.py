"""From a workflow to a plan: the workload (components and steps), the cost model, activation memory, the
optimal residency plan, the baselines it is compared with, the report and the preflight verdict. Imports
nothing of residency, streaming, tiled_vae or telemetry (tests/unit/test_layering.py)."""
