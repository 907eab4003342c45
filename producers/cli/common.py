"""What every ``situate`` command shares: the consoles, failing with a message, opening a collection."""

from __future__ import annotations

import os
import sys
from typing import NoReturn

import typer
from rich.console import Console

# Wide when not on a terminal (a log, a pipe): Rich would cut tables to 80 columns.
out = Console(width=None if sys.stdout.isatty() else int(os.environ.get("COLUMNS") or 200))
err = Console(stderr=True, width=None if sys.stderr.isatty() else int(os.environ.get("COLUMNS") or 200))


def fail(message: str, code: int = 2) -> NoReturn:
    err.print(f"[red]error:[/red] {message}")
    raise typer.Exit(code)


def open_or_create(name: str, **requested):
    """The collection ``name``, created with ``requested`` settings if it does not exist."""
    from workers import lifecycle
    from workers.storage.catalog import CollectionError

    try:
        config = lifecycle.ensure(name, **requested)
    except (CollectionError, ValueError) as e:
        fail(str(e))
    warning = lifecycle.model_warning(config)
    if warning:
        err.print(f"[yellow]warning:[/yellow] {warning}")
    return config


def existing(name: str):
    from workers.storage import catalog

    try:
        return catalog.load(name)
    except catalog.CollectionError as e:
        fail(str(e))
