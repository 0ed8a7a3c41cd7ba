"""Write ``nodes/host/host_types.py``: protocols of the host's classes as ``nodes/host/`` reads them,
generated from the host-API records (``memory/data/host_api/*.json``, their ``classes``) and the types in
``tests/headroom_testing/host_protocols.py``.

Usage: ``python scripts/gen_host_protocols.py [--check]``. After a record changes (``dump_host_api.py``;
``--classes-only`` when the protocols name a new member), run it again; ``tests/unit/test_host_types.py``
fails while the committed module differs from its output. ``--check``: exit 1 if it differs, write nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

PACK_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PACK_ROOT / "tests"))

from headroom_testing.host_protocols import TARGET, generate  # noqa: E402

RECORDS = PACK_ROOT / "memory" / "data" / "host_api"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the module is not up to date")
    args = parser.parse_args(argv)
    records = {p.stem: json.loads(p.read_text()) for p in sorted(RECORDS.glob("*.json"))}
    text = generate(records)
    out = PACK_ROOT / TARGET
    if args.check:
        same = out.is_file() and out.read_text() == text
        print(f"{TARGET}: {'up to date' if same else 'differs: run scripts/gen_host_protocols.py'}")
        return 0 if same else 1
    out.write_text(text)
    print(f"{TARGET}: written")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
