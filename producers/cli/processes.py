"""The long-running processes: ``situate worker`` (Celery) and ``situate api`` (uvicorn)."""

from __future__ import annotations

from typing import Optional

import typer


def worker(
    queues: Optional[str] = typer.Option(
        None, help="Comma-separated queues: chunk, contextualize.0 … contextualize.N-1, index (default: all)."),
    concurrency: int = typer.Option(2, "--concurrency", "-c", min=1),
    loglevel: str = typer.Option("INFO"),
    hostname: Optional[str] = typer.Option(None, help="Celery node name (default situate@host)."),
    pool: str = typer.Option("prefork", help="prefork (CPU: chunking, embedding) or threads (LLM calls)."),
) -> None:
    """Run a Celery worker on the pipeline's queues. For LLM contextualizers, a worker with
    ``--pool threads`` on the contextualize.N queues keeps many documents' calls in flight."""
    import os

    from workers.pipeline.app import app
    from workers.pipeline.routing import all_queues, expand

    # Each pool process embeds with ONNX Runtime, which by default spreads over every core:
    # N processes x all cores oversubscribes the CPU (measured: 8.6 -> 11.3 chunks/s on 2
    # cores with 2 processes when each takes its share).
    os.environ.setdefault("SITUATE_EMBED_THREADS", str(max(1, (os.cpu_count() or 1) // concurrency)))
    chosen = expand([q.strip() for q in queues.split(",") if q.strip()]) if queues else all_queues()
    argv = ["worker", "--queues", ",".join(chosen), "--concurrency", str(concurrency),
            "--loglevel", loglevel, "--pool", pool, "--events", "--without-gossip", "--without-mingle"]
    if hostname:
        argv += ["--hostname", hostname]
    app.worker_main(argv)


def api(host: str = typer.Option("127.0.0.1"), port: int = typer.Option(8000)) -> None:
    """Serve the HTTP API (OpenAPI docs at /docs). Beyond loopback, only with SITUATE_API_TOKEN."""
    import os

    import uvicorn

    from producers.auth import is_loopback
    from producers.cli.common import fail
    from workers import logs
    from workers.settings import get_settings

    if not is_loopback(host) and not get_settings().api_token:
        fail(f"refusing to listen on {host} without a token: set SITUATE_API_TOKEN (the admin token), "
             "then give callers their own with `situate token create`")
    os.environ["SITUATE_API_HOST"] = host  # the app reads where it listens (see producers/auth.py)
    get_settings.cache_clear()
    logs.configure("INFO")
    uvicorn.run("producers.api:app", host=host, port=port, log_config=None, access_log=True)
