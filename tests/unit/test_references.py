"""The code and docs cite only what ships with them: no path into notes outside the repository."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_no_file_cites_the_research_notes_outside_the_repository() -> None:
    assert not (ROOT / "research").exists()
    files = [*ROOT.glob("memory/**/*.py"), *ROOT.glob("nodes/**/*.py"), *ROOT.glob("docs/*.md")]
    files += [*ROOT.glob("js/docs/*.md"), ROOT / "README.md"]
    assert len(files) > 50
    citing = [str(p.relative_to(ROOT)) for p in files if "research/" in p.read_text(encoding="utf-8")]
    assert citing == []
