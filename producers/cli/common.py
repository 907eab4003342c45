"""What every ``situate`` command shares: the consoles, failing with a message, opening a collection."""

from __future__ import annotations

from typing import NoReturn

import typer
from rich.console import Console

out = Console()
err = Console(stderr=True)


def fail(message: str, code: int = 2) -> NoReturn:
    err.print(f"[red]error:[/red] {message}")
    raise typer.Exit(code)


def open_or_create(name: str, **requested):
    """The collection ``name``, created with ``requested`` settings if it does not exist."""
    from workers import lifecycle
    from workers.storage.catalog import CollectionError

    try:
        return lifecycle.ensure(name, **requested)
    except (CollectionError, ValueError) as e:
        fail(str(e))


def existing(name: str):
    from workers.storage import catalog

    try:
        return catalog.load(name)
    except catalog.CollectionError as e:
        fail(str(e))
