"""The frontend's JavaScript: Node's test runner over tests/js (so CI counts it), a syntax check of every
served module, and the rules ComfyUI's loader imposes on files under js/ (every .js there is imported)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
JS = ROOT / "js"
NODE = shutil.which("node")
needs_node = pytest.mark.skipif(
    NODE is None, reason="node is not installed (the JS unit tests need Node 20+)"
)
IMPORT = re.compile(r"""^\s*import\s[^;]*?from\s+["']([^"']+)["']""", re.MULTILINE)


@needs_node
def test_node_unit_tests_pass() -> None:
    files = sorted(str(p) for p in (ROOT / "tests" / "js").glob("*.test.mjs"))
    assert files, "no tests/js/*.test.mjs"
    out = subprocess.run([NODE, "--test", *files], capture_output=True, text=True, cwd=ROOT, timeout=120)
    print(out.stdout[-3000:])
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-3000:]
    assert re.search(r"^# fail 0$", out.stdout, re.MULTILINE) and not re.search(
        r"^# pass 0$", out.stdout, re.M
    )


@needs_node
@pytest.mark.parametrize("path", sorted(JS.glob("*.js")), ids=lambda p: p.name)
def test_every_browser_only_module_parses(path: Path) -> None:
    # js/lib/ is imported by the Node tests; these import the host's scripts, so Node can only parse them.
    out = subprocess.run([NODE, "--check", str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("path", sorted(JS.rglob("*.js")), ids=lambda p: str(p.relative_to(JS)))
def test_served_modules_import_relatively_and_only_what_exists(path: Path) -> None:
    # The folder name differs between git clones and registry installs: only relative imports work. The
    # host's scripts live two levels above the extension folder (/scripts/app.js from /extensions/<x>/).
    for spec in IMPORT.findall(path.read_text(encoding="utf-8")):
        assert spec.startswith(("./", "../")), f"{path.name}: {spec} is not a relative import"
        if "/scripts/" in spec:
            continue
        assert (path.parent / spec).resolve().is_file(), f"{path.name}: {spec} does not exist"


def test_no_test_or_tooling_files_are_served() -> None:
    # ComfyUI imports every **/*.js under WEB_DIRECTORY in the browser: tests and node_modules stay out.
    served = [p.relative_to(JS) for p in JS.rglob("*") if p.is_file()]
    assert not [p for p in served if "node_modules" in p.parts or ".test." in p.name], served
