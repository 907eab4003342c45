"""The ``situate`` command: every subcommand, in one list. Typer parses, Rich prints.

Collection-shaping flags (``--contextualizer``, ``--embedder``…) only matter when the
collection is created; afterwards asking for a different value is an error, not a silent mix.
Modules import what they need inside each command, so ``situate --help`` stays instant.
"""

from __future__ import annotations

import sys

import typer

from producers.cli import documents, labels, models, observe, pilot, processes, reindex, retrieval, tokens

cli = typer.Typer(add_completion=False, no_args_is_help=True, help="Contextual Retrieval at production scale.")
cli.command()(documents.ingest)
cli.command()(retrieval.search)
cli.command()(observe.status)
cli.command()(observe.stats)
cli.command("eval")(retrieval.eval_cmd)
cli.command()(retrieval.tune)
cli.command()(pilot.pilot)
cli.command()(documents.delete)
cli.command()(documents.failed)
cli.command()(documents.retry)
cli.command()(documents.drop)
cli.command()(reindex.reindex)
cli.command()(reindex.compact)
cli.command()(processes.worker)
cli.command()(processes.api)
cli.command()(processes.flower)
cli.command()(processes.mcp)
cli.add_typer(tokens.tokens, name="token")
cli.add_typer(models.models, name="models")
cli.add_typer(labels.labels, name="labels")


def main() -> None:
    from workers.errors import ConfigurationError

    try:
        cli()
    except KeyboardInterrupt:
        sys.exit(130)
    except ConfigurationError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
