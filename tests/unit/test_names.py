"""One home per shared name (issue #14): the browser's copy of the event and route names equals the
server's (memory/names.py), and nobody spells them, or the Offload Loader's inputs, anywhere else."""

from __future__ import annotations

import re
from pathlib import Path

from comfyui_headroom.memory import names

ROOT = Path(__file__).resolve().parents[2]


def js_object(name: str) -> dict[str, str]:
    """``export const NAME = { key: "value", ... };`` of js/lib/names.js as a dict."""
    text = (ROOT / "js" / "lib" / "names.js").read_text()
    body = re.search(rf"export const {name} = \{{(.*?)\}};", text, re.S)
    assert body, f"js/lib/names.js has no {name}"
    return dict(re.findall(r'(\w+):\s*"([^"]+)"', body[1]))


def test_the_browser_mirrors_the_servers_events_routes_and_node_ids() -> None:
    assert js_object("EVENTS") == names.EVENTS
    assert js_object("ROUTES") == names.ROUTES
    assert js_object("NODE_IDS") == names.NODE_IDS


def test_event_and_route_names_are_spelled_in_one_place_per_language() -> None:
    literal = re.compile(r"""["'`](headroom\.(?:sample|node|preflight|residency)|/headroom/\w+)""")
    offenders = []
    for path in [*ROOT.glob("memory/**/*.py"), *ROOT.glob("nodes/**/*.py"), *ROOT.glob("js/**/*.js")]:
        if path.name in ("names.py", "names.js") or "node_modules" in path.parts:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if literal.search(line):
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not offenders, "use memory/names.py or js/lib/names.js:\n" + "\n".join(offenders)


def test_the_node_ids_have_one_home() -> None:
    """Each node class takes its id from memory/names.py, the browser's code from js/lib/names.js (its
    mirror), and no module of the pack spells one again."""
    from pathlib import Path

    from comfyui_headroom.memory.names import NODE_IDS
    from comfyui_headroom.nodes import NODE_CLASS_MAPPINGS

    assert sorted(NODE_CLASS_MAPPINGS) == sorted(NODE_IDS.values())
    root = Path(__file__).resolve().parents[2]
    spelt = [
        f"{p.relative_to(root)}: {node_id}"
        for p in [*root.glob("memory/**/*.py"), *root.glob("nodes/**/*.py"), *root.glob("js/**/*.js")]
        if p.name not in ("names.py", "names.js") and "node_modules" not in p.parts
        for node_id in NODE_IDS.values()
        if f'"{node_id}"' in p.read_text(encoding="utf-8")
    ]
    assert spelt == []
