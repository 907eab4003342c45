"""The reference pages generated from the code (``ops/docs.py``) say what the code says: a
setting or a command changed without ``python -m ops.docs`` fails here, with the command to run."""

from __future__ import annotations

import difflib
import re

from ops import docs


def test_the_settings_and_command_pages_are_up_to_date():
    for path, wanted in docs.pages().items():
        found = path.read_text() if path.exists() else ""
        diff = "".join(difflib.unified_diff(found.splitlines(True), wanted.splitlines(True), str(path), "generated", n=1))
        assert not diff, f"{path.name} is out of date: run `python -m ops.docs`\n{diff[:3000]}"


def test_every_setting_says_what_it_is():
    from workers.settings import Credentials, Settings

    page = docs.settings_page()
    for cls, prefix in ((Settings, "SITUATE_"), (Credentials, "")):
        for field in cls.model_fields:
            names = docs._env_names(cls, field, prefix)
            assert any(f"`{n}`" in page for n in names), field
    blank = [line for line in page.splitlines() if line.startswith("| `") and line.rstrip().endswith("|  |")]
    assert blank == [], "settings without a word of what they are (an inline comment in workers/settings.py)"


def _slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"\s", "-", re.sub(r"[^\w\- ]", "", text))


def test_every_link_between_the_pages_leads_somewhere():
    pages = [docs.ROOT / "README.md", docs.ROOT / "ARCHITECTURE.md", docs.ROOT / "CHANGELOG.md",
             *sorted((docs.ROOT / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            where = (page.parent / path).resolve() if path else page
            if not where.exists():
                broken.append(f"{page.name}: {target}")
            elif anchor and where.suffix == ".md":
                headings = {_slug(h) for h in re.findall(r"^#+ (.+)$", where.read_text(), re.M)}
                if anchor not in headings:
                    broken.append(f"{page.name}: {target} (no such heading)")
    assert broken == []
