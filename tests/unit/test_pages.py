"""Every HTML page is rendered by one Jinja2 environment, autoescaped (``producers.web.templates``):
a value put into a page is text, never markup, whichever page it is."""

from __future__ import annotations

import pytest

from producers.web import templates

HOSTILE = '<script>alert(1)</script>"'


@pytest.mark.parametrize(("page", "context"), [  # the search page: tests/integration/test_search_page.py
    ("signin.html", {"message": HOSTILE, "next": HOSTILE}),
    ("dashboard.html", {"csrf": HOSTILE, "who": HOSTILE}),
    ("notice.html", {"message": HOSTILE}),
])
def test_a_value_in_any_page_is_escaped(page, context):
    html = templates.render(page, **context)
    assert "<script>alert(1)" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html

