"""The host's API as a contract, without the hosts: ``nodes/host/`` against the record of every host
version (``memory/data/host_api/*.json``, written by ``scripts/dump_host_api.py`` from each host's
source). A name read without feature detection must be there, a call's keywords must be taken and its
positional arguments must fit; and each record covers every name the pack touches today, so a new use
of the host needs a new dump. Edited copies of a record show the check fails."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from headroom_testing.host_api import check, describe, touched

ROOT = Path(__file__).resolve().parents[2]
RECORDS = {
    p.stem: json.loads(p.read_text()) for p in sorted((ROOT / "memory" / "data" / "host_api").glob("*.json"))
}
USES = touched(ROOT / "nodes" / "host")


def test_there_is_a_record_for_each_host_the_pack_supports() -> None:
    assert {"2024-03", "0.3.64", "0.18.2", "0.33.0", "0.38.0"} <= set(RECORDS)
    assert RECORDS["0.38.0"]["modules"] == ["comfy.model_management"]  # what a public index had to read
    # the DynamicVRAM library: 0.33 pins 0.4.13, 0.38 pins 0.5.5, 0.6.0 is the newest (read from the wheels)
    assert {"comfy-aimdo-0.4.13", "comfy-aimdo-0.5.5", "comfy-aimdo-0.6.0"} <= set(RECORDS)
    for version in ("0.4.13", "0.5.5", "0.6.0"):
        assert RECORDS[f"comfy-aimdo-{version}"]["names"]["comfy_aimdo.control.get_total_vram_usage"]


def test_the_scan_finds_what_the_pack_patches_and_calls() -> None:
    for name in (
        "execution.validate_prompt",
        "execution.get_output_data",
        "execution.reset_progress_state",
        "comfy.model_management.free_memory",
        "comfy.model_management.load_models_gpu",
        "comfy_execution.progress.add_progress_handler",
    ):
        assert name in USES, name
    assert not USES["execution.validate_prompt"].required  # feature-detected with getattr
    assert USES["comfy.model_management.free_memory"].required
    assert (2, ("keep_loaded",)) in USES["comfy.model_management.free_memory"].calls


@pytest.mark.parametrize("version", sorted(RECORDS))
def test_nodes_host_holds_against_each_hosts_record(version: str) -> None:
    assert check(USES, RECORDS[version]) == []


@pytest.mark.parametrize("version", sorted(RECORDS))
def test_each_record_covers_every_name_the_pack_touches(version: str) -> None:
    """A name newly touched in nodes/host needs the hosts dumped again (scripts/dump_host_api.py)."""
    data = RECORDS[version]
    missing = [k for k, u in USES.items() if u.module in data["modules"] and k not in data["names"]]
    assert missing == [], f"re-run scripts/dump_host_api.py for {version}: {missing}"


def test_a_record_with_a_changed_signature_fails_the_check() -> None:
    data = copy.deepcopy(RECORDS["0.33.0"])
    free = data["names"]["comfy.model_management.free_memory"]
    free["positional"] = ["memory_required", "device"]  # keep_loaded renamed away
    problems = check(USES, data)
    assert any("free_memory takes no keep_loaded" in p for p in problems), problems

    data = copy.deepcopy(RECORDS["0.33.0"])
    data["names"]["folder_paths.get_full_path"]["positional"] = ["filename"]  # one positional fewer
    assert any("get_full_path takes 1 positional" in p for p in check(USES, data))


def test_a_record_without_a_name_the_pack_reads_directly_fails_and_a_detected_one_does_not() -> None:
    data = copy.deepcopy(RECORDS["0.3.64"])
    data["names"]["comfy.model_management.get_free_memory"] = None
    assert any("get_free_memory is absent" in p for p in check(USES, data))
    data = copy.deepcopy(RECORDS["0.3.64"])
    data["names"]["execution.validate_prompt"] = None  # the validation mark turns itself off
    assert check(USES, data) == []


def test_describe_reads_signatures_from_source() -> None:
    names = describe(
        "import os\nX = 1\nasync def f(a, b=2, *rest, c, **kw): ...\n"
        "class K(Base):\n    y = 0\n    def __init__(self, z):\n        self.z = z\n    def m(self, q): ...\n"
    )
    assert names["f"] == {
        "kind": "function",
        "async": True,
        "positional": ["a", "b"],
        "keyword_only": ["c"],
        "varargs": True,
        "varkw": True,
    }
    assert set(names["K"]["members"]) == {"y", "__init__", "z", "m"} and names["K"]["bases"] == ["Base"]
    assert names["X"] == {"kind": "value"} and names["os"] == {"kind": "import"}
