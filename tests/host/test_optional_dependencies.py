"""The pack loads in a real host even when its optional dependencies are missing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from headroom_testing.harness import NODE_IDS

pytestmark = pytest.mark.host
TESTS = Path(__file__).resolve().parents[1]

# ComfyUI itself needs psutil, einops and safetensors; these two are ours alone.
OPTIONAL = ("matplotlib", "pynvml")

PROBE = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    for name in {optional!r}:
        sys.modules[name] = None  # makes `import name` raise ImportError, as if not installed
    from headroom_testing.harness import Host
    host = Host(Path({root!r}), Path({work!r}))
    ours = sorted(n for n in host.nodes.NODE_CLASS_MAPPINGS if n.startswith("Headroom"))
    print(json.dumps({{"loaded": host.pack_loaded, "nodes": ours}}))
    """
)


def test_pack_loads_without_optional_dependencies(host_root: Path, tmp_path: Path) -> None:
    root = host_root
    code = PROBE.format(optional=OPTIONAL, root=str(root), work=str(tmp_path))
    env = {**os.environ, "PYTHONPATH": str(TESTS)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-4000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report == {"loaded": True, "nodes": sorted(NODE_IDS)}
