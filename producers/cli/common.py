"""What every ``situate`` command shares: the consoles, failing with a message, opening a collection."""

from __future__ import annotations

import re
import shutil
import sys
from typing import TYPE_CHECKING, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from workers import errors

if TYPE_CHECKING:
    from workers.storage.catalog import CollectionConfig

# Wide when not on a terminal (a log, a pipe): Rich would cut tables to 80 columns.
# Piped output is not cut at 80 columns: ``COLUMNS`` if set, else 200 (shutil reads COLUMNS).
out = Console(width=None if sys.stdout.isatty() else shutil.get_terminal_size((200, 24)).columns)
err = Console(stderr=True, width=None if sys.stderr.isatty() else shutil.get_terminal_size((200, 24)).columns)


# What must not reach a terminal from a document or a caller: control characters (escape
# sequences that move the cursor, retitle the window, hide text) and Unicode's bidirectional
# overrides (text that reads backwards). Newlines and tabs in a chunk's text are kept.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def safe(value: Any, keep_newlines: bool = False) -> str:
    """Text from a document or a caller, made fit to print: control characters shown as escapes
    (``\x1b``), and Rich markup escaped, so ``a[/x]`` is printed as is, not parsed (or crashed on)."""
    text = str(value)
    if not keep_newlines:
        text = text.replace("\n", "\\n").replace("\t", "\\t")
    return escape(_UNSAFE.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 256
                              else f"\\u{ord(m.group()):04x}", text))


def fail(message: str, code: int = 2) -> NoReturn:
    """The message may hold what a caller typed or a document said: printed as text, not markup."""
    err.print(f"[red]error:[/red] {safe(message, keep_newlines=True)}", highlight=False)
    raise typer.Exit(code)


def open_or_create(name: str, **requested: Any) -> CollectionConfig:
    """The collection ``name``, created with ``requested`` settings if it does not exist."""
    from workers import lifecycle
    from workers.errors import CollectionError

    try:
        config = lifecycle.ensure(name, **requested)
    except (CollectionError, ValueError) as e:
        fail(str(e))
    warning = lifecycle.model_warning(config)
    if warning:
        err.print(f"[yellow]warning:[/yellow] {safe(warning)}", highlight=False)
    return config


def existing(name: str) -> CollectionConfig:
    from workers.storage import catalog

    try:
        return catalog.load(name)
    except errors.CollectionError as e:
        fail(str(e))
