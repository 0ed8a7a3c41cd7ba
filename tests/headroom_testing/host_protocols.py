"""The host's objects as ``nodes/host/`` reads them: ``typing.Protocol`` classes generated from the host-API
records (``memory/data/host_api/*.json``), written to ``nodes/host/host_types.py`` by
``scripts/gen_host_protocols.py``; ``tests/unit/test_host_types.py`` checks the committed module is this
generator's output.

``SPEC`` names, per host class, the members the pack reads and the types it reads them as (the records
hold names and parameters, not types). The records decide the rest: ``dump_host_api.py`` describes each
class's named members per host (``classes`` in a record), and a member goes into its protocol only where
every host whose record read the class has it. A method's parameters are the host's own names, the
positional ones every host has in the same order (a parameter every host defaults gets ``= ...``); the
pack passes no others. A member some host lacks is left out, listed in the protocol's docstring with the
hosts that lack it: the pack reads it through ``getattr``/``hasattr`` (mypy types what it finds ``Any``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

TARGET = "nodes/host/host_types.py"


@dataclass(frozen=True)
class Member:
    """``returns``: a value's type, or a method's return type (``params``: the parameters' types by the
    host's names; a method has ``params``, possibly empty: ``method=True``)."""

    name: str
    returns: str
    method: bool = False
    params: dict[str, str] = field(default_factory=dict)
    note: str = ""


def method(name: str, returns: str, note: str = "", **params: str) -> Member:
    return Member(name, returns, True, dict(params), note)


def value(name: str, type_: str, note: str = "") -> Member:
    return Member(name, type_, note=note)


@dataclass(frozen=True)
class Protocol:
    """``hosts``: which records decide its members: "current" (every host but the 2024 one, whose paths
    are ``legacy_2024``'s) or "dynamic" (the current hosts with DynamicVRAM); ``base``: the protocol it
    extends (its members are not repeated)."""

    name: str
    host: str  # module.Class
    doc: str
    members: tuple[Member, ...]
    hosts: str = "current"
    base: str = "Protocol"


SPEC: tuple[Protocol, ...] = (
    Protocol(
        "ModelPatcher",
        "comfy.model_patcher.ModelPatcher",
        "A MODEL (and the patcher of a CLIP or a VAE): the host's model with its device and patches.",
        (
            value("model", "Any", "the patched module: a BaseModel for a MODEL, a text encoder for a CLIP"),
            value("load_device", "torch.device"),
            value("offload_device", "torch.device"),
            value("patches", "dict[str, list[Any]]"),
            value("model_options", "dict[str, Any]"),
            method("model_size", "int"),
            method("loaded_size", "int"),
            method("clone", "ModelPatcher"),
            method("is_clone", "bool", other="object"),
            method("partially_unload", "int", device_to="torch.device", memory_to_free="int"),
            method("add_callback", "None", call_type="str", callback="Callable[..., Any]"),
            method(
                "add_wrapper_with_key", "None", wrapper_type="str", key="str", wrapper="Callable[..., Any]"
            ),
            method("remove_wrappers_with_key", "None", wrapper_type="str", key="str"),
            method("get_wrappers", "list[Callable[..., Any]]", wrapper_type="str", key="str"),
            method("is_dynamic", "bool"),
            method("pinned_memory_size", "int"),
            method("partially_unload_ram", "None", ram_to_unload="float"),
            method("loaded_ram_size", "int"),
            method("model_mmap_residency", "tuple[int, int]", free="bool"),
        ),
    ),
    Protocol(
        "DynamicModelPatcher",
        "comfy.model_patcher.ModelPatcher",
        "A patcher on a DynamicVRAM host (``ModelPatcherDynamic`` where ``is_dynamic()``): its pins.",
        (
            method("is_dynamic", "bool"),
            method("pinned_memory_size", "int"),
            method("partially_unload_ram", "None", ram_to_unload="float"),
            method("loaded_ram_size", "int"),
            method("model_mmap_residency", "tuple[int, int]", free="bool"),
        ),
        hosts="dynamic",
        base="ModelPatcher",
    ),
    Protocol(
        "BaseModel",
        "comfy.model_base.BaseModel",
        "A MODEL's model (``ModelPatcher.model``): the diffusion model and the host's memory estimate.",
        (
            value("diffusion_model", "torch.nn.Module"),
            method(
                "memory_required", "float", input_shape="Sequence[int]", cond_shapes="dict[str, Any] | None"
            ),
        ),
    ),
    Protocol(
        "VAE",
        "comfy.sd.VAE",
        "A VAE: its model, the devices it decodes on and its latent's channels.",
        (
            value("first_stage_model", "torch.nn.Module"),
            value("patcher", "ModelPatcher"),
            value("device", "torch.device"),
            value("output_device", "torch.device"),
            value("vae_dtype", "torch.dtype"),
            value("latent_channels", "int"),
            method("decode", "torch.Tensor", samples_in="torch.Tensor", vae_options="dict[str, Any]"),
            value("process_output", "Callable[[torch.Tensor], torch.Tensor]"),
        ),
    ),
    Protocol(
        "CLIP",
        "comfy.sd.CLIP",
        "A CLIP: the text encoder and its patcher.",
        (
            value("cond_stage_model", "torch.nn.Module"),
            value("patcher", "ModelPatcher"),
            method("clone", "CLIP"),
        ),
    ),
    Protocol(
        "LoadedModel",
        "comfy.model_management.LoadedModel",
        "One entry of the host's ``current_loaded_models``.",
        (
            value("model", "ModelPatcher"),
            value("device", "torch.device"),
            method("model_memory", "int"),
            method("model_loaded_memory", "int"),
            method("model_load", "Any", lowvram_model_memory="int", force_patch_weights="bool"),
        ),
    ),
    Protocol(
        "PromptServer",
        "server.PromptServer",
        "The host's server (``PromptServer.instance``).",
        (
            value("routes", "Any", "aiohttp's RouteTableDef"),
            value("prompt_queue", "Any"),
            method("send_sync", "None", event="str", data="Any", sid="str | None"),
            method("add_on_prompt_handler", "None", handler="Callable[[dict[str, Any]], dict[str, Any]]"),
        ),
    ),
)

LEGACY = "2024-03"  # the 2024 host: its paths are nodes/host/legacy_2024's, typed Any there
HEADER = '''"""The host's objects as ``nodes/host/`` reads them: protocols of ComfyUI's classes. GENERATED by
``scripts/gen_host_protocols.py`` from the host-API records (``memory/data/host_api/*.json``, their
``classes``) and ``tests/headroom_testing/host_protocols.py`` (the types); do not edit. A protocol holds
the members every current host has (0.3.64 on; the 2024 host's paths are ``legacy_2024``'s), with the
host's own parameter names; a member some host lacks is listed in its docstring, read through
``getattr``/``hasattr``. Imported for annotations only: nothing here runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch
'''


def class_members() -> dict[str, list[str]]:
    """``module.Class`` -> the members ``SPEC`` names: what ``dump_host_api.py`` describes per host."""
    found: dict[str, list[str]] = {}
    for proto in SPEC:
        names = found.setdefault(proto.host, [])
        names += [m.name for m in proto.members if m.name not in names]
    return found


def _hosts(records: dict[str, dict[str, Any]], which: str) -> dict[str, dict[str, Any]]:
    """version -> the ``classes`` of each record that decides a protocol of ``which`` hosts."""
    chosen = {}
    for version, data in sorted(records.items()):
        if "classes" not in data or version == LEGACY:
            continue
        if which == "dynamic" and not data["names"].get("comfy.memory_management.aimdo_enabled"):
            continue
        chosen[version] = data["classes"]
    return chosen


def _params(member: Member, entries: list[dict[str, Any]]) -> list[str]:
    """``self, p: T, q: T = ...``: the positional parameters every host has in this order (less ``self``);
    ``= ...`` where every host defaults it."""
    lists = [e["positional"][1:] for e in entries]
    common = []
    for names in zip(*lists, strict=False):
        if len(set(names)) != 1 or len(names) != len(lists):
            break
        common.append(names[0])
    params = ["self"]
    for i, name in enumerate(common):
        defaulted = all(i >= len(e["positional"]) - 1 - e["defaults"] for e in entries)
        params.append(f"{name}: {member.params.get(name, 'Any')}" + (" = ..." if defaulted else ""))
    return params


def _def(name: str, params: list[str], returns: str, note: str) -> list[str]:
    """A method's lines as ``ruff format`` writes them (one line, else the parameters on their own)."""
    line = f"    def {name}({', '.join(params)}) -> {returns}: ...{note}"
    if len(line) <= 110:
        return [line]
    return [f"    def {name}(", f"        {', '.join(params)}", f"    ) -> {returns}: ...{note}"]


def _render(
    proto: Protocol, hosts: dict[str, dict[str, Any]], inherited: set[str]
) -> tuple[list[str], set[str]]:
    """The protocol's lines and the members it holds (with its base's)."""
    body: list[tuple[bool, list[str]]] = []  # (a method, its lines): a blank line around each method
    held = set(inherited)
    lacking: list[str] = []
    for member in proto.members:
        if member.name in inherited:
            continue
        entries = [
            (v, ((c.get(proto.host) or {}).get("members") or {}).get(member.name)) for v, c in hosts.items()
        ]
        absent = [v for v, e in entries if e is None or e["kind"] == "inherited"]
        if absent or not entries:
            lacking.append(f"``{member.name}``: not on {', '.join(absent) or 'any host read'}")
            continue
        kinds = {e["kind"] for _, e in entries}
        note = f"  # {member.note}" if member.note else ""
        if member.method and kinds == {"function"}:
            body.append(
                (True, _def(member.name, _params(member, [e for _, e in entries]), member.returns, note))
            )
        elif not member.method and kinds <= {"value", "property"}:
            if "property" in kinds:
                body.append((True, ["    @property", *_def(member.name, ["self"], member.returns, note)]))
            else:
                body.append((False, [f"    {member.name}: {member.returns}{note}"]))
        else:
            lacking.append(f"``{member.name}``: a {'/'.join(sorted(kinds))} on the hosts")
            continue
        held.add(member.name)
    doc = [f'    """{proto.doc}', "", f"    ``{proto.host}`` on {', '.join(hosts)}."]
    if lacking:
        doc += ["    Not here (read through getattr/hasattr):", *(f"    - {item}" for item in lacking)]
    doc.append('    """')
    bases = proto.base if proto.base == "Protocol" else f"{proto.base}, Protocol"
    lines = [f"class {proto.name}({bases}):", *doc]
    for i, (is_def, item) in enumerate(body):
        lines += ([""] if i == 0 or is_def or body[i - 1][0] else []) + item
    return lines, held


def generate(records: dict[str, dict[str, Any]]) -> str:
    """The text of ``nodes/host/host_types.py`` from the host-API records (version -> record)."""
    parts = [HEADER.rstrip("\n")]
    held: dict[str, set[str]] = {}
    for proto in SPEC:
        lines, held[proto.name] = _render(proto, _hosts(records, proto.hosts), held.get(proto.base, set()))
        parts.append("\n".join(lines))
    return "\n\n\n".join(parts) + "\n"
