"""Every HTML page the API serves is rendered one way: a Jinja2 template from ``assets/``,
autoescaped, so a value can never become markup by being forgotten (a document's title, a token's
name, a sign-in message)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape

ASSETS = Path(__file__).with_name("assets")
_env = Environment(loader=FileSystemLoader(ASSETS), autoescape=select_autoescape(["html"]))


def render(name: str, **context: Any) -> str:
    return _env.get_template(name).render(**context)
