"""The hosts ``gpu-check`` runs its steps on, and what ``--prepare`` carries to the GPU machine for them.

``--hosts ROOT[,ROOT...]`` (or HEADROOM_GPU_HOSTS) runs every step that goes through a ComfyUI once per
host: once for a host without DynamicVRAM (0.3.64), twice for one with it (0.33: DynamicVRAM on, as its
``main.py`` starts it, and once with ``--disable-dynamic-vram``; the harness reads HEADROOM_DYNAMIC_VRAM).
Each run's step name and results file say which host and mode its figures come from.

The GPU machine has no network and takes at most 64 MiB per call. ``--prepare --host ROOT`` packs the
host's source (no models, tests or .git) as a tarball and downloads the cp312 manylinux wheels that host
needs there (its own pins of comfy-aimdo and comfy-kitchen, read from its requirements.txt, and the pure
packages it imports that the GPU image lacks) into ``.gpu-carry/``, split into loads that fit one call
beside the repository's own files (a file larger than that, comfy-kitchen's 56 MiB wheel, in parts).
On the machine, one call per load runs ``scripts/gpu-check --receive .gpu-carry/loadN`` (carrying
``.gpu-carry/loadN``): the files are kept in /tmp/headroom-carry, which stays while the machine is warm;
once every part is there the wheels are installed into the scratch site and the host unpacked.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CARRY = ROOT / ".gpu-carry"
LIMIT = 64 * 2**20  # what one device call carries, the repository's own files included
# on the GPU machine: the loads received so far (kept while warm); a rehearsal names its own folders
RECEIVED = Path(os.environ.get("HEADROOM_GPU_RECEIVED", "/tmp/headroom-carry"))
# What a 2026 host imports that the GPU image (KINDS.md's list) lacks, besides comfy-aimdo/-kitchen.
HOST_2026_PURE = (
    "av==18.1.0", "pydantic==2.14.3", "pydantic_core==2.50.4", "pydantic-settings==2.16.3",
    "annotated-types==0.8.0", "typing-inspection==0.4.5", "python-dotenv==1.2.4", "spandrel==0.4.2",
    "simpleeval==1.0.8", "blake3==1.0.11", "torchsde==0.2.6", "trampoline==0.1.2", "gguf==0.19.0",
)  # fmt: skip
PINNED = ("comfy-aimdo", "comfy-kitchen")  # never pinned by Headroom: the host's requirements say
EXCLUDE = {".git", "models", "tests", "tests-unit", "input", "output", "user", "__pycache__", ".github"}
HOSTS = Path(os.environ.get("HEADROOM_GPU_HOSTS_DIR", "/tmp/headroom-hosts"))  # unpacked hosts, packs/
# Packs the GPU steps load beside the host (bench/gguf_stream_gpu.py: HEADROOM_GGUF_PACK), from ../packs.
PACKS = {"ComfyUI-GGUF": "HEADROOM_GGUF_PACK"}


@dataclass(frozen=True)
class HostRun:
    """One host and mode the host steps run under."""

    label: str  # e.g. "0.33.0 (DynamicVRAM on)": no comma, --only splits on commas
    tag: str  # for file names: "0.33.0-dvram-on"
    env: dict[str, str] = field(default_factory=dict, hash=False)


def host_version(root: Path) -> str:
    path = root / "comfyui_version.py"
    found = re.search(r"__version__\s*=\s*['\"]([^'\"]+)", path.read_text()) if path.is_file() else None
    return found.group(1) if found else "unknown"


def has_dynamic_vram(root: Path) -> bool:
    """The host starts DynamicVRAM by default and has the switch to turn it off (0.18 on)."""
    cli = root / "comfy" / "cli_args.py"
    return cli.is_file() and "--disable-dynamic-vram" in cli.read_text()


def host_runs(spec: str) -> list[HostRun]:
    """The runs for ``--hosts`` (comma-separated ComfyUI folders)."""
    runs = []
    for item in filter(None, (s.strip() for s in spec.split(","))):
        root = Path(item).expanduser().resolve()
        version = host_version(root)
        env = {"COMFYUI_ROOT": str(root)}
        if has_dynamic_vram(root):
            on = {**env, "HEADROOM_DYNAMIC_VRAM": "1"}
            runs.append(HostRun(f"{version} (DynamicVRAM on)", f"{version}-dvram-on", on))
            off = {**env, "HEADROOM_DYNAMIC_VRAM": "0"}
            runs.append(HostRun(f"{version} (--disable-dynamic-vram)", f"{version}-dvram-off", off))
        else:
            runs.append(HostRun(version, version, env))
    return runs


def for_run(argv: list[str], run: HostRun) -> list[str]:
    """A step's command for one host run: its ``--out``/``--json`` files get the run's tag."""
    out = list(argv)
    for i, arg in enumerate(out[:-1]):
        if arg in ("--out", "--json"):
            path = Path(out[i + 1])
            out[i + 1] = str(path.with_name(f"{path.stem}-{run.tag}{path.suffix}"))
    return out


def requirement_pins(root: Path) -> list[str]:
    """The host's own pins of the packages Headroom never pins (``comfy-aimdo==0.4.13``...)."""
    reqs = root / "requirements.txt"
    text = reqs.read_text() if reqs.is_file() else ""
    pins = []
    for name in PINNED:
        found = re.search(rf"^{name}\s*==\s*([\w.]+)", text, re.M)
        if found:
            pins.append(f"{name}=={found.group(1)}")
    return pins


def pack_source(root: Path, dest: Path, name: str | None = None, arcname: str = "comfyui") -> Path:
    """The host's source as ``dest/comfyui-<version>.tar.gz`` (folder ``comfyui``), no models or tests;
    with ``name``, another source tree (a pack) as ``dest/<name>.tar.gz``."""
    dest.mkdir(parents=True, exist_ok=True)
    out = dest / (f"{name}.tar.gz" if name else f"comfyui-{host_version(root)}.tar.gz")

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        parts = Path(info.name).parts  # ("comfyui", top-level name, ...)
        # Only the top-level folders: comfy/ldm/models is source the host imports.
        top = parts[1] if len(parts) > 1 else ""
        dropped = top in EXCLUDE or "__pycache__" in parts or ".git" in parts
        return None if dropped or info.name.endswith((".pyc", ".safetensors", ".ckpt")) else info

    with tarfile.open(out, "w:gz") as tar:
        tar.add(root, arcname=arcname, filter=keep)
    return out


def repo_bytes() -> int:
    """What the repository's own files add to every device call (tracked and untracked, not ignored)."""
    cmd = ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"]
    names = subprocess.run(cmd, capture_output=True, check=False).stdout.decode().split("\0")
    return sum((ROOT / n).stat().st_size for n in names if n and (ROOT / n).is_file())


def split_large(files: list[Path], limit: int) -> list[Path]:
    """Files over ``limit`` cut into ``NAME.partK-of-N`` pieces (``--receive`` joins them)."""
    out = []
    for f in files:
        size = f.stat().st_size
        if size <= limit:
            out.append(f)
            continue
        count = -(-size // limit)
        with f.open("rb") as src:
            for k in range(1, count + 1):
                part = f.with_name(f"{f.name}.part{k}-of-{count}")
                part.write_bytes(src.read(limit))
                out.append(part)
        f.unlink()
    return out


def loads(files: list[Path], limit: int = LIMIT) -> list[list[Path]]:
    """Files in loads of at most ``limit`` bytes each, largest first (one that alone exceeds it: its own)."""
    bins: list[list[Path]] = []
    sizes: list[int] = []
    for f in sorted(files, key=lambda p: -p.stat().st_size):
        size = f.stat().st_size
        for i, used in enumerate(sizes):
            if used + size <= limit:
                bins[i].append(f)
                sizes[i] += size
                break
        else:
            bins.append([f])
            sizes.append(size)
    return bins


# Wheels carried beside the host's pins, never installed: one test puts each on its own path (comfy-aimdo
# 0.6.0's page-out callback, tests/gpu/test_aimdo_hooks_gpu.py: the 0.33 host pins 0.4.13).
SIDE_WHEELS = ("comfy-aimdo==0.6.0",)
SIDE_SUFFIX = ".side"


def side_wheels(folder: Path) -> list[Path]:
    """The wheels in ``folder`` renamed ``NAME.whl.side``, so that ``receive`` keeps them uninstalled in
    RECEIVED for the test that wants them."""
    return [w.rename(w.with_name(w.name + SIDE_SUFFIX)) for w in sorted(folder.glob("*.whl"))]


def prepare_host(root: Path, platforms: tuple[str, ...], python_version: str) -> int:
    """``--prepare --host ROOT``: the source tarball and the wheels, split into ``.gpu-carry/loadN``."""
    staging = CARRY / "staging"
    staging.mkdir(parents=True, exist_ok=True)
    source = pack_source(root, staging)
    packs = [
        pack_source(ROOT.parent / "packs" / pack, staging, f"pack-{pack}", pack)
        for pack in PACKS
        if (ROOT.parent / "packs" / pack).is_dir()
    ]
    wanted = [*requirement_pins(root), *HOST_2026_PURE]
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:"]
    cmd += ["--python-version", python_version, "--implementation", "cp", "-d", str(staging)]
    for plat in (*platforms, "manylinux_2_24_x86_64", "manylinux_2_12_x86_64", "manylinux2010_x86_64"):
        cmd += ["--platform", plat]
    print("$ " + " ".join(cmd + wanted), flush=True)
    rc = subprocess.call(cmd + wanted)
    side = staging / "side"
    side.mkdir(exist_ok=True)
    rc = rc or subprocess.call(
        [*cmd[: cmd.index("-d")], "-d", str(side), *cmd[cmd.index("-d") + 2 :], *SIDE_WHEELS]
    )
    room = LIMIT - repo_bytes() - 2**20  # a MiB of slack for files written meanwhile
    files = split_large([source, *packs, *staging.glob("*.whl"), *side_wheels(side)], room)
    for old in CARRY.glob("load*/*"):
        old.unlink()
    for i, load in enumerate(loads(files, room), 1):
        folder = CARRY / f"load{i}"
        folder.mkdir(exist_ok=True)
        for f in load:
            f.replace(folder / f.name)
    print(describe_carry())
    return rc


def receive(load: Path, site: Path, hosts: Path) -> list[str]:
    """On the GPU machine: keep ``load``'s files, join the parts complete so far, install the wheels not
    installed yet into ``site`` and unpack host tarballs into ``hosts``. Lines to report."""
    RECEIVED.mkdir(parents=True, exist_ok=True)
    for f in load.iterdir():
        (RECEIVED / f.name).write_bytes(f.read_bytes())
    lines = []
    for first in RECEIVED.glob("*.part1-of-*"):
        name, count = first.name.split(".part1-of-")
        parts = [RECEIVED / f"{name}.part{k}-of-{count}" for k in range(1, int(count) + 1)]
        if all(p.is_file() for p in parts):
            (RECEIVED / name).write_bytes(b"".join(p.read_bytes() for p in parts))
            for p in parts:
                p.unlink()
        else:
            lines.append(
                f"{name}: {sum(p.is_file() for p in parts)} of {count} parts here; carry the other loads"
            )
    wheels = sorted(RECEIVED.glob("*.whl"))
    if wheels:
        cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile"]
        cmd += ["--no-cache-dir", "--upgrade", "--target", str(site), *map(str, wheels)]
        rc = subprocess.call(cmd)
        lines.append(
            f"installed {len(wheels)} wheels into {site}" if rc == 0 else f"pip install failed (rc {rc})"
        )
        if rc == 0:
            for w in wheels:
                w.unlink()
    for tarball in RECEIVED.glob("pack-*.tar.gz"):
        with tarfile.open(tarball) as tar:
            tar.extractall(hosts / "packs", filter="data")
        tarball.unlink()
        name = tarball.name.removeprefix("pack-").removesuffix(".tar.gz")
        lines.append(f"pack unpacked: {hosts / 'packs' / name}")
    for tarball in RECEIVED.glob("comfyui-*.tar.gz"):
        dest = hosts / tarball.name.removesuffix(".tar.gz")
        with tarfile.open(tarball) as tar:
            tar.extractall(dest, filter="data")
        tarball.unlink()
        lines.append(f"host source unpacked: COMFYUI_ROOT={dest / 'comfyui'}")
    return lines


def describe_carry() -> str:
    """What ``.gpu-carry/`` holds: each load, its size against the 64 MiB of one call, its files."""
    if not CARRY.is_dir():
        return f"no {CARRY.name}/ (scripts/gpu-check --prepare --host ROOT makes it)"
    repo = repo_bytes()
    lines = []
    for folder in sorted(CARRY.glob("load*")):
        files = sorted(folder.iterdir())
        size = sum(f.stat().st_size for f in files)
        verdict = "fits" if size + repo <= LIMIT else "OVER the limit"
        where = folder.relative_to(ROOT) if folder.is_relative_to(ROOT) else folder
        lines.append(
            f"{folder.name}: {size / 2**20:.1f} MiB + the repository's {repo / 2**20:.1f} MiB of "
            f"{LIMIT / 2**20:.0f} MiB ({verdict}); one call: carry {where}, "
            f"run scripts/gpu-check --receive {where}"
        )
        lines += [f"  {f.name} ({f.stat().st_size / 2**20:.1f} MiB)" for f in files]
    return "\n".join(lines) or f"{CARRY.name}/ holds no loads"


def pack_env(hosts: Path = HOSTS) -> dict[str, str]:
    """The variables that point the steps at the packs received on this machine (none elsewhere)."""
    found = {pack: hosts / "packs" / pack for pack in PACKS}
    return {PACKS[pack]: str(path) for pack, path in found.items() if path.is_dir()}
