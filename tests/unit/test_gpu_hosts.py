"""scripts/gpu-check on the 2026 host (scripts/gpu_hosts.py), on CPU: the host steps run once per host and
DynamicVRAM mode with the host named in the step and its results file; --prepare's carry is cut into
loads that fit one device call beside the repository, a file too large for one in parts, and --receive
puts the parts back together byte for byte and unpacks the host."""

from __future__ import annotations

import importlib.util
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def load(name: str):  # noqa: ANN201
    sys.path.insert(0, str(ROOT / "scripts"))
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def fake_host(tmp: Path, version: str, dynamic: bool) -> Path:
    root = tmp / version
    (root / "comfy" / "ldm" / "models").mkdir(parents=True)
    (root / "comfy" / "ldm" / "models" / "autoencoder.py").write_text("")  # source, not weights
    (root / "nodes.py").write_text("")
    (root / "comfyui_version.py").write_text(f'__version__ = "{version}"\n')
    (root / "comfy" / "cli_args.py").write_text(
        'p.add_argument("--disable-dynamic-vram")\n' if dynamic else ""
    )
    (root / "requirements.txt").write_text("comfy-kitchen==0.2.31\ncomfy-aimdo==0.4.13\ntorch\n")
    (root / "models").mkdir()
    (root / "models" / "big.safetensors").write_bytes(b"0" * 100)
    return root


def test_host_steps_run_per_host_and_mode_and_say_which(tmp_path: Path) -> None:
    gpu_check = load("gpu_check")
    hosts = gpu_check.gpu_hosts
    runs = hosts.host_runs(f"{fake_host(tmp_path, '0.3.64', False)},{fake_host(tmp_path, '0.33.0', True)}")
    assert [r.label for r in runs] == ["0.3.64", "0.33.0 (DynamicVRAM on)", "0.33.0 (--disable-dynamic-vram)"]
    assert [r.env.get("HEADROOM_DYNAMIC_VRAM") for r in runs] == [None, "1", "0"]
    bench = gpu_check.Step(
        "bench/x_gpu.py", "bench", ["py", "bench/x_gpu.py", "--out", "r/x.md"], 9, "r/x.md"
    )
    expanded = gpu_check.per_host([gpu_check.Step("tests/gpu/t.py", "pytest", ["py"], 9, "")], runs)
    assert [s.name for s in expanded] == [f"tests/gpu/t.py @ {r.label}" for r in runs]
    assert expanded[1].env["COMFYUI_ROOT"].endswith("0.33.0")
    assert hosts.for_run(bench.argv, runs[1])[-1] == "r/x-0.33.0-dvram-on.md"


def test_prepare_cuts_the_carry_into_loads_and_receive_joins_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hosts = load("gpu_hosts")
    root = fake_host(tmp_path, "0.33.0", True)
    assert hosts.requirement_pins(root) == ["comfy-aimdo==0.4.13", "comfy-kitchen==0.2.31"]
    staging = tmp_path / "staging"
    source = hosts.pack_source(root, staging)
    with tarfile.open(source) as tar:
        names = tar.getnames()
    assert "comfyui/nodes.py" in names and "comfyui/comfy/ldm/models/autoencoder.py" in names
    assert not any(n.startswith("comfyui/models") for n in names)  # the host's weights folder stays
    pack = tmp_path / "ComfyUI-GGUF"
    (pack / "__pycache__").mkdir(parents=True)
    (pack / "nodes.py").write_text("")
    (pack / "__pycache__" / "nodes.cpython-312.pyc").write_bytes(b"")
    packed = hosts.pack_source(pack, staging, "pack-ComfyUI-GGUF", "ComfyUI-GGUF")
    (staging / "side").mkdir()
    (staging / "side" / "comfy_aimdo-0.6.0-cp39-abi3-x.whl").write_bytes(b"a" * 50)
    side = hosts.side_wheels(staging / "side")
    assert [f.name for f in side] == ["comfy_aimdo-0.6.0-cp39-abi3-x.whl.side"]
    big = staging / "kitchen.whl"
    payload = bytes(range(256)) * 40  # 10240 bytes
    big.write_bytes(payload)
    (staging / "small.whl").write_bytes(b"s" * 100)
    files = hosts.split_large([source, packed, big, staging / "small.whl", *side], limit=4096)
    assert sorted(f.name for f in files if "kitchen" in f.name) == [
        f"kitchen.whl.part{k}-of-3" for k in (1, 2, 3)
    ]
    bins = hosts.loads(files, limit=5000)
    assert all(sum(f.stat().st_size for f in b) <= 5000 or len(b) == 1 for b in bins)
    assert sorted(f.name for b in bins for f in b) == sorted(f.name for f in files)

    monkeypatch.setattr(hosts, "RECEIVED", tmp_path / "received")
    joined = []

    def pip(cmd: list[str]) -> int:
        joined.extend(Path(c).read_bytes() for c in cmd if c.endswith("kitchen.whl"))
        return 0

    monkeypatch.setattr(hosts.subprocess, "call", pip)
    out = []
    for i, b in enumerate(bins):
        folder = tmp_path / f"load{i}"
        folder.mkdir()
        for f in b:
            (folder / f.name).write_bytes(f.read_bytes())
        out += hosts.receive(folder, tmp_path / "site", tmp_path / "hosts")
    assert joined == [payload]  # installed once, when its last part came, byte for byte
    # the side wheel is kept, not installed: the test that wants it puts it on its own path
    assert (tmp_path / "received" / "comfy_aimdo-0.6.0-cp39-abi3-x.whl.side").read_bytes() == b"a" * 50
    assert (tmp_path / "hosts" / "comfyui-0.33.0" / "comfyui" / "nodes.py").is_file()
    assert any("COMFYUI_ROOT=" in line for line in out)
    assert (tmp_path / "hosts" / "packs" / "ComfyUI-GGUF" / "nodes.py").is_file()
    assert not (tmp_path / "hosts" / "packs" / "ComfyUI-GGUF" / "__pycache__").exists()
    assert hosts.pack_env(tmp_path / "hosts") == {
        "HEADROOM_GGUF_PACK": str(tmp_path / "hosts" / "packs" / "ComfyUI-GGUF")
    }
    assert hosts.pack_env(tmp_path / "nowhere") == {}
