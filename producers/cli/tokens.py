"""``situate token``: API tokens scoped to a collection (read, write, admin), stored hashed."""

from __future__ import annotations

import json

import typer
from rich.table import Table

from producers.cli.common import fail, out, safe
from workers import errors

tokens = typer.Typer(no_args_is_help=True, help="API tokens: create, list, revoke.")


@tokens.command("create")
def create(collection: str = typer.Option(..., "--collection", "-c", help="A collection, or '*' for all."),
           scope: str = typer.Option(..., help="read (search, status) | write (+ documents) | admin (+ collections)"),
           name: str = typer.Option("", help="A label to recognise it by in `situate token list`.")) -> None:
    """Issue a token; it is printed once, on the last line, and stored only as a hash."""
    from producers.web import auth
    from workers.storage import catalog

    if collection != "*":
        try:
            catalog.validate_name(collection)
        except errors.CollectionError as e:
            fail(str(e))
    if scope not in auth.SCOPES:
        fail(f"--scope must be one of {', '.join(auth.SCOPES)}")
    token, token_id = auth.create_token(collection, scope, name)
    out.print(f"token {token_id}: {scope} on {safe(repr(collection))}. Shown once; keep it in a secret store.",
              highlight=False)
    print(token)


@tokens.command("list")
def listing(json_output: bool = typer.Option(False, "--json")) -> None:
    """Tokens issued (their ids and scopes; never the tokens themselves)."""
    from workers.storage import tokens as stored

    rows = stored.listing()
    if json_output:
        print(json.dumps(rows))
        return
    table = Table("id", "collection", "scope", "name")
    for t in rows:
        table.add_row(safe(t["id"]), safe(t["collection"]), safe(t["scope"]), safe(t["name"]))
    out.print(table)


@tokens.command("revoke")
def revoke(token_or_id: str = typer.Argument(..., help="The token, or its id from `situate token list`.")) -> None:
    """Revoke a token: the API refuses it from now on."""
    from workers.storage import tokens as stored

    if not stored.revoke(token_or_id):
        fail("no such token", 1)
    out.print("revoked")
