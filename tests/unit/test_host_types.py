"""``nodes/host/host_types.py`` is generated from the host-API records (``scripts/gen_host_protocols.py``):
the committed module is the generator's output, so a record that changes without a regenerate fails here,
and a member a host lacks leaves its protocol (the pack then reads it through getattr/hasattr)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from headroom_testing.host_protocols import TARGET, class_members, generate

ROOT = Path(__file__).resolve().parents[2]
RECORDS = {
    p.stem: json.loads(p.read_text()) for p in sorted((ROOT / "memory" / "data" / "host_api").glob("*.json"))
}


def test_the_committed_module_is_the_generators_output() -> None:
    assert (ROOT / TARGET).read_text() == generate(RECORDS), "run scripts/gen_host_protocols.py"


def test_every_full_record_describes_the_classes_the_protocols_name() -> None:
    for version in ("2024-03", "0.3.64", "0.18.2", "0.33.0"):
        classes = RECORDS[version]["classes"]
        for qualname, members in class_members().items():
            assert sorted(classes[qualname]["members"]) == sorted(members), (version, qualname)


def test_a_member_one_host_lacks_leaves_the_protocol() -> None:
    records = copy.deepcopy(RECORDS)
    assert "    def loaded_size(self) -> int: ..." in generate(records)
    records["0.18.2"]["classes"]["comfy.model_patcher.ModelPatcher"]["members"]["loaded_size"] = None
    text = generate(records)
    assert "def loaded_size" not in text
    assert "- ``loaded_size``: not on 0.18.2" in text


def test_parameters_are_the_hosts_common_ones() -> None:
    records = copy.deepcopy(RECORDS)
    decode = records["0.33.0"]["classes"]["comfy.sd.VAE"]["members"]["decode"]
    decode["positional"] = ["self", "latent"]  # one host renamed it: the protocol takes neither name
    text = generate(records)
    assert "def decode(self) -> torch.Tensor: ..." in text
    both = "def decode(self, samples_in: torch.Tensor, vae_options: dict[str, Any] = ...)"
    assert both in generate(RECORDS)


def test_the_2024_host_decides_nothing() -> None:
    """Its paths are legacy_2024's (typed Any there): a member it lacks stays in the protocols."""
    records = copy.deepcopy(RECORDS)
    assert records["2024-03"]["classes"]["comfy.model_patcher.ModelPatcher"]["members"]["loaded_size"] is None
    assert "def loaded_size" in generate(records)
