"""Fuzz tier: random flag values and mutated example workflows through ``plan`` (issue #18).

Whatever the input, ``plan`` exits 0, 1 or 2, never with a traceback, and a refusal (2) is one line
naming the problem. The CLI runs in process (``main(argv)``, output captured) for speed; the examples
are derandomized and bounded, so a run is the same everywhere and takes well under a minute.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from comfyui_headroom.cli import main

WORKFLOWS = sorted((Path(__file__).resolve().parents[2] / "example_workflows").rglob("*.json"))
FLUX = next(p for p in WORKFLOWS if p.parent.name == "api" and p.name == "Flux Dev text to image.json")
EXAMPLES = 300  # per test: ~10 s on a shared 2-core machine; raise it locally to hunt for more
BOUNDED = settings(
    max_examples=EXAMPLES,
    deadline=10_000,  # ms; one plan takes ~0.05 s, so only a hang comes near it
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def run_plan(argv: list[str]) -> tuple[int, str, str]:
    """Exit code, stdout, stderr of ``plan argv``; any exception but SystemExit fails the example."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(["plan", *argv])
        except SystemExit as exc:  # argparse refusing an argument
            code = exc.code if isinstance(exc.code, int) else 2
    return code, out.getvalue(), err.getvalue()


def check_outcome(code: int, out: str, err: str) -> None:
    assert code in (0, 1, 2), (code, err)
    assert "Traceback" not in err and "Traceback" not in out
    if code == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and len(lines[0]) > len("error: "), err


# --- flags ----------------------------------------------------------------------------------------

INTERESTING = ["0", "-0", "-5", "nan", "NaN", "inf", "-inf", "1e308", "1e-308", "8GB", "0.5", "", " ", "1e9"]
FLAG_VALUE = st.one_of(
    st.sampled_from(INTERESTING),
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(-(10**20), 10**20).map(str),
    st.builds(lambda n, u: f"{n}{u}", st.integers(-5, 10**6), st.sampled_from(["", "GB", "MiB", "TB", "b"])),
)
FLAGS = ["--vram", "--ram", "--reserve", "--h2d-pinned", "--disk", "--pcie"]


@BOUNDED
@given(st.dictionaries(st.sampled_from(FLAGS), FLAG_VALUE, min_size=1, max_size=4))
def test_random_flag_values(flags: dict[str, str]) -> None:
    flags = {"--vram": "8GB", "--ram": "32GB", **flags}
    code, out, err = run_plan([str(FLUX), *(f"{k}={v}" for k, v in flags.items())])
    check_outcome(code, out, err)


# --- workflows ------------------------------------------------------------------------------------

SCALAR = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.sampled_from([0, -1, 1, 2**63, -(2**63), 10**400]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
)
JSON_VALUE = st.recursive(
    SCALAR,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a JSON tree (a key of a dict, an index of a list), parents before children."""
    keys = value.keys() if isinstance(value, dict) else range(len(value)) if isinstance(value, list) else []
    found = []
    for key in keys:
        found.append((*prefix, key))
        found += _paths(value[key], (*prefix, key))
    return found


@st.composite
def mutated_workflow(draw: st.DrawFn) -> Any:
    """An example workflow with 1-4 random deletions/replacements of nodes, inputs, links or values."""
    source = draw(st.sampled_from(WORKFLOWS))
    data = json.loads(source.read_text())
    node_ids = [str(k) for k in data] if "nodes" not in data else [str(n.get("id")) for n in data["nodes"]]
    link_like = st.builds(
        lambda node, slot: [node, slot], st.sampled_from([*node_ids, "999", "", None]), st.integers(-2, 9)
    )
    for _ in range(draw(st.integers(1, 4))):
        paths = _paths(data)
        if not paths:
            break
        *parent_path, key = paths[draw(st.integers(0, len(paths) - 1))]
        parent = data
        for step in parent_path:
            parent = parent[step]
        if draw(st.booleans()):  # delete: a node, an input, a link, a widget value...
            del parent[key]
        else:  # replace with any JSON value, or something shaped like a link
            parent[key] = draw(st.one_of(JSON_VALUE, link_like))
    return data


@BOUNDED
@given(mutated_workflow())
def test_mutated_workflows(tmp_path_factory: pytest.TempPathFactory, workflow: Any) -> None:
    path = tmp_path_factory.getbasetemp() / "mutated.json"
    path.write_text(json.dumps(workflow))  # json writes NaN/Infinity, as a hand-edited file may hold
    code, out, err = run_plan([str(path), "--vram", "8GB", "--ram", "32GB"])
    check_outcome(code, out, err)


@pytest.mark.parametrize("depth", [10, 500, 5_000, 100_000])
def test_deeply_nested_json(tmp_path: Path, depth: int) -> None:
    path = tmp_path / "deep.json"
    path.write_text('{"1": ' + "[" * depth + "]" * depth + "}")
    check_outcome(*run_plan([str(path), "--vram", "8GB"]))


def test_the_mutator_changes_workflows() -> None:
    """Guard against a fuzzer that only ever replays the examples unchanged."""
    seen: list[Any] = []

    @settings(max_examples=20, derandomize=True, database=None)
    @given(mutated_workflow())
    def collect(workflow: Any) -> None:
        seen.append(workflow)

    collect()
    originals = [json.loads(p.read_text()) for p in WORKFLOWS]
    assert any(w not in originals for w in seen)
