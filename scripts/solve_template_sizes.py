"""Sizes of model files nobody can build, solved from the official templates' published sizes.

Each official template (PyPI ``comfyui-workflow-templates-json``) publishes ``size`` in index.json: the
bytes of the model files it downloads. With the files the host's classes size (the catalog's built
entries) subtracted, every template is one linear equation over its remaining files:
``sum(x_file) = published - known``. This script solves that system:

- a file the system determines (the unit vector of its column lies in the row space: some combination
  of templates isolates it) gets its exact solution, source "template sizes (linear system, determined)";
- the other files of a template the system uses share its residual in proportion to a prior (the
  name-based estimate of memory.catalog): the minimum relative change from the prior that satisfies
  every equation exactly, source "template sizes (linear system, split by name prior)";
- equations that contradict the others are dropped one at a time, each with its reason under
  ``template_solve.dropped``: a published size below its known files, an equation the least-squares
  solution of those taken before it (fewest unknown files first) misses by > 0.01%, or one forcing
  some file below 2% of its prior (an index entry that repeats another template's size or omits a file).

Blocks: the solved bytes scaled onto the prior's assumed blocks (the catalog keeps the schema, the
planner can stream them), marked as such in ``note``. Used by scripts/build_model_catalog.py.
"""

from __future__ import annotations

import importlib.metadata
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from catalog_files import FAMILY_FACTS  # noqa: E402
from check_model_catalog import template_files, templates_dir  # noqa: E402
from template_notes import stated_sizes  # noqa: E402

from comfyui_headroom.memory.models import catalog as cat  # noqa: E402
from comfyui_headroom.memory.models.info import KINDS  # noqa: E402

DETERMINED = "template sizes (linear system, determined)"
SPLIT = "template sizes (linear system, split by name prior)"
STATED = "template sizes (stated in the templates' notes)"
MIN_SHARE = 0.02  # a solution below 2% of the name's prior means a contradicting equation
MAX_RESIDUAL = 1e-4  # an equation the least-squares solution misses by more contradicts the others


@dataclass(frozen=True)
class Equation:
    template: str
    published: int
    files: tuple[tuple[str, str], ...]  # (directory, file name)


@dataclass
class Solution:
    sizes: dict[str, int] = field(default_factory=dict)  # file name -> bytes
    directory: dict[str, str] = field(default_factory=dict)
    determined: set[str] = field(default_factory=set)
    used: list[str] = field(default_factory=list)  # templates whose equations hold exactly
    dropped: dict[str, str] = field(default_factory=dict)  # template -> why


def equations(folder: Path) -> list[Equation]:
    """One equation per downloadable template (published size > 0, some model files)."""
    index = json.loads((folder / "index.json").read_text(encoding="utf-8"))
    found = []
    for category in index:
        for template in category.get("templates", []):
            published = int(template.get("size") or 0)
            path = folder / f"{template['name']}.json"
            if published <= 0 or not path.is_file():
                continue
            files = template_files(json.loads(path.read_text(encoding="utf-8")))
            if files:
                found.append(Equation(template["name"], published, files))
    return found


def _with_catalog(files: dict[str, list[dict]]):
    """Point memory.catalog at ``files`` (the built entries) while solving; returns a restore function."""
    original = cat.catalog
    caches = (cat._normalised_index, cat._catalog_components, cat._catalog_by_family_cached)

    def clear() -> None:
        for c in caches:
            c.cache_clear()

    cat.catalog = lambda: files  # type: ignore[assignment]
    clear()

    def restore() -> None:
        cat.catalog = original  # type: ignore[assignment]
        clear()

    return restore


def _known_bytes(directory: str, name: str) -> int | None:
    if cat.catalog_name(name) is None:
        return None
    return sum(c.bytes for c in cat.lookup_components(name, cat.folder_kind(directory)))


def solve(known: dict[str, int], eqs: list[Equation], prior: dict[str, int]) -> Solution:
    """Solve ``eqs`` for the files not in ``known`` ((directory, name) -> bytes: a checkpoint's size
    depends on the folder it is loaded from), ``prior`` giving every unknown's estimate."""
    sol = Solution()
    rows = []
    for eq in eqs:
        unknown = sorted({n for f in eq.files if f not in known for n in f[1:]})
        rest = eq.published - sum(known[f] for f in eq.files if f in known)
        if not unknown:
            continue
        if rest <= 0:
            sol.dropped[eq.template] = "published size below the sum of its known files"
            continue
        rows.append((eq, unknown, rest))
        for d, n in eq.files:
            sol.directory.setdefault(n, d)
    rows = _consistent(rows, sol)
    while True:
        names = sorted({n for _, unknown, _ in rows for n in unknown})
        col = {n: i for i, n in enumerate(names)}
        a = np.zeros((len(rows), len(names)))
        for r, (_, unknown, _) in enumerate(rows):
            a[r, [col[n] for n in unknown]] = 1.0
        b = np.array([rest for _, _, rest in rows], dtype=float)
        p = np.array([float(prior[n]) for n in names])
        # minimum sum of squared relative changes from the prior subject to a x = b
        w = p * p
        gram = (a * w) @ a.T
        x = p + w * (a.T @ (np.linalg.pinv(gram, rcond=1e-12) @ (b - a @ p)))
        low = [i for i in range(len(names)) if x[i] < MIN_SHARE * p[i]]
        if not low:
            break
        # drop the equation that pushes hardest: the lowest residual per prior among those holding the file
        culprits = [r for r, (_, unknown, _) in enumerate(rows) if any(names[i] in unknown for i in low)]
        worst = min(culprits, key=lambda r: rows[r][2] / sum(prior[n] for n in rows[r][1]))
        eq = rows.pop(worst)[0]
        sol.dropped[eq.template] = "contradicts the other templates (would make a file < 2% of its estimate)"
    projector = np.linalg.pinv(a, rcond=1e-10) @ a
    for n, i in col.items():
        sol.sizes[n] = int(round(x[i]))
        if abs(projector[i, i] - 1.0) < 1e-6:
            sol.determined.add(n)
    sol.used = [eq.template for eq, _, _ in rows]
    return sol


def _matrix(rows: list) -> tuple[np.ndarray, np.ndarray]:
    names = sorted({n for _, unknown, _ in rows for n in unknown})
    col = {n: i for i, n in enumerate(names)}
    a = np.zeros((len(rows), len(names)))
    for r, (_, unknown, _) in enumerate(rows):
        a[r, [col[n] for n in unknown]] = 1.0
    return a, np.array([rest for _, _, rest in rows], dtype=float)


def _consistent(rows: list, sol: Solution) -> list:
    """Equations taken most direct first (fewest unknown files); one the accepted ones contradict
    (no exact solution of them all: least squares misses some by > MAX_RESIDUAL) is dropped."""
    accepted: list = []
    for row in sorted(rows, key=lambda r: (len(r[1]), r[0].template)):
        a, b = _matrix([*accepted, row])
        x = np.linalg.lstsq(a, b, rcond=None)[0]
        miss = float((np.abs(a @ x - b) / b).max())
        if miss > MAX_RESIDUAL:
            sol.dropped[row[0].template] = (
                f"contradicts templates with fewer unknown files (least squares off by {100 * miss:.1f}%)"
            )
        else:
            accepted.append(row)
    return accepted


def _facts(files: dict[str, list[dict]], eqs: list[Equation]) -> tuple[dict, dict]:
    """Bytes of the (directory, file) pairs ``files`` knows, and the name estimate of every other file."""
    restore = _with_catalog(files)
    try:
        known = {(d, n): b for eq in eqs for d, n in eq.files if (b := _known_bytes(d, n)) is not None}
        estimates = {
            n: cat.estimate_from_name(n, cat.folder_kind(d) or "other")
            for eq in eqs
            for d, n in eq.files
            if (d, n) not in known
        }
    finally:
        restore()
    return known, estimates


def template_entries(files: dict[str, list[dict]], folder: Path | None = None) -> tuple[dict, dict]:
    """Catalog entries for the templates' files missing from ``files``, and the solve's record."""
    folder = folder or templates_dir()
    if folder is None:
        raise SystemExit("comfyui-workflow-templates-json is not installed: cannot solve template sizes")
    eqs = equations(folder)
    known, estimates = _facts(files, eqs)
    # the size a template's note states for the file itself beats any split of a template's total
    stated = stated_sizes(folder)
    noted = {(d, n): stated[n][0] for eq in eqs for d, n in eq.files if (d, n) not in known and n in stated}
    out: dict[str, list[dict]] = {}
    for (directory, name), size in sorted(noted.items()):
        if name not in out:
            out[name] = [{"directory": directory, "components": [_record(estimates[name], size, STATED)]}]
    known |= noted
    # files of templates with no published total (no equation), which a note still sizes
    for directory, name in sorted(_listed(folder)):
        if name in stated and name not in out and name not in files and name not in estimates:
            est = cat.estimate_from_name(name, cat.folder_kind(directory) or "other")
            record = _record(est, stated[name][0], STATED)
            out[name] = [{"directory": directory, "components": [record]}]
            noted[(directory, name)] = stated[name][0]
    estimates = {n: e for n, e in estimates.items() if n not in out}
    sol = solve(known, eqs, {n: max(e.bytes, 1 << 20) for n, e in estimates.items()})
    for name, size in sorted(sol.sizes.items()):
        source = DETERMINED if name in sol.determined else SPLIT
        out[name] = [
            {"directory": sol.directory[name], "components": [_record(estimates[name], size, source)]}
        ]
    package = "comfyui-workflow-templates-json"
    record = {
        "package": f"{package} {importlib.metadata.version(package)}",
        "equations": len(sol.used) + len(sol.dropped),
        "used": sorted(sol.used),
        "dropped": dict(sorted(sol.dropped.items())),
        "determined": sorted(sol.determined),
        "split": sorted(set(sol.sizes) - sol.determined),
        "stated": sorted({n for _, n in noted}),
    }
    return out, record


def _listed(folder: Path) -> set[tuple[str, str]]:
    """(directory, file) of every model file any template lists."""
    found: set[tuple[str, str]] = set()
    for path in folder.glob("*.json"):
        if path.name != "index.json":
            workflow = json.loads(path.read_text(encoding="utf-8"))
            found |= set(template_files(workflow)) if isinstance(workflow, dict) else set()
    return found


def _record(est, size: int, source: str) -> dict:
    """A catalog record of ``size`` bytes for a file only its name describes (the name's estimate gives
    kind, dtype, family and the assumed blocks, each said so in the note)."""
    scale = size / max(est.bytes, 1)
    blocks = [[b.name, None, 1, int(b.bytes * scale)] for b in est.blocks]
    family, why = FAMILY_FACTS.get(est.file or "", (est.family, "from the name's tokens"))
    note = f"{source}; dtype from the name's tokens; family {why}"
    note += "; assumed equal blocks" if blocks else ""
    return {
        "kind": est.kind if est.kind in KINDS and est.kind != "unknown" else "other",
        "family": family,
        "dtype": est.dtype,
        "bytes": size,
        "blocks": _runs(blocks),
        "note": note,
        "source": source,
        "prefix": "",
    }


def _runs(blocks: list[list]) -> list[list]:
    """[name.i, None, 1, bytes] per block -> runs [name, first, count, bytes] (catalog schema)."""
    runs: list[list] = []
    for name, _, _, size in blocks:
        head, _, idx = name.rpartition(".")
        if idx.isdigit() and runs and runs[-1][0] == head and runs[-1][3] == size:
            runs[-1][2] += 1
        elif idx.isdigit():
            runs.append([head, int(idx), 1, size])
        else:
            runs.append([name, None, 1, size])
    return runs
