"""The long-running processes: ``situate worker`` (Celery), ``situate api`` (uvicorn),
``situate flower`` (Celery's Flower, for our app, behind authentication) and ``situate mcp``
(the MCP tools over stdio, for an agent that starts it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from workers import errors


def worker(
    queues: str | None = typer.Option(
        None, help="Comma-separated queues: chunk, contextualize.0 … contextualize.N-1, index (default: all)."),
    concurrency: int = typer.Option(2, "--concurrency", "-c", min=1),
    loglevel: str = typer.Option("INFO"),
    hostname: str | None = typer.Option(None, help="Celery node name (default situate@host)."),
    pool: str = typer.Option("prefork", help="prefork (CPU: chunking, embedding) or threads (LLM calls)."),
    autoscale: str | None = typer.Option(
        None, help="MIN,MAX pool processes: grown while tasks wait, shrunk when idle (prefork only)."),
) -> None:
    """Run a Celery worker on the pipeline's queues. For LLM contextualizers, a worker with
    ``--pool threads`` on the contextualize.N queues keeps many documents' calls in flight.
    Workers on any number of hosts share the queues; add one to go faster (ARCHITECTURE.md)."""
    import os

    from producers.cli.common import fail
    from workers import settings
    from workers.pipeline.app import app
    from workers.pipeline.routing import all_queues, expand

    bounds = None
    if autoscale:
        try:
            low, high = sorted(int(n) for n in autoscale.split(","))
            assert low >= 1 and high >= low
        except (ValueError, AssertionError):
            fail("--autoscale takes MIN,MAX, two whole numbers, 1 <= MIN <= MAX")
        if pool != "prefork":
            fail("--autoscale works with the prefork pool only")
        bounds, concurrency = (low, high), high
    # Each pool process embeds with ONNX Runtime, which by default spreads over every core:
    # N processes x all cores oversubscribes the CPU: each takes its share instead, which
    # embeds faster (``ops/bench pipeline``). Autoscaled: the share at MAX.
    if not settings.get_settings().embed_threads:
        settings.override(embed_threads=max(1, (os.cpu_count() or 1) // concurrency))
    refusal = memory_refusal(pool, concurrency)
    if refusal:
        fail(refusal)
    chosen = expand([q.strip() for q in queues.split(",") if q.strip()]) if queues else all_queues()
    argv = ["worker", "--queues", ",".join(chosen), "--concurrency", str(concurrency),
            "--loglevel", loglevel, "--pool", pool, "--without-gossip", "--without-mingle"]
    if bounds:  # Celery's order: MAX,MIN
        argv += ["--autoscale", f"{bounds[1]},{bounds[0]}"]
    if hostname:
        argv += ["--hostname", hostname]
    app.worker_main(argv)


def memory_refusal(pool: str, concurrency: int, available_mb: int | None = None) -> str | None:
    """Why a pool of ``concurrency`` cannot fit in this machine's available memory, and what to
    do instead; None if it fits. Each prefork process loads its own embedders (``ops/bench
    memory``; ``SITUATE_WORKER_PROCESS_MB`` per process with a margin); a threads
    pool loads them once and adds ``SITUATE_WORKER_THREAD_MB`` per thread."""
    from workers.settings import get_settings

    s = get_settings()
    if not s.worker_process_mb:  # the check is off
        return None
    available = available_mb if available_mb is not None else _available_mb()
    if available is None:
        return None
    if pool == "threads":
        need = s.worker_process_mb * 2 + concurrency * s.worker_thread_mb
        how = f"one process ({s.worker_process_mb} MB) and {concurrency} threads x {s.worker_thread_mb} MB"
    else:
        need = s.worker_process_mb * (concurrency + 1)
        how = f"{concurrency} pool processes and their parent x {s.worker_process_mb} MB (each loads its embedders)"
    if need <= available:
        return None
    fits = max(1, available // s.worker_process_mb - 1)
    return (f"a {pool} pool of {concurrency} needs about {need:,} MB ({how}); this machine has {available:,} MB "
            f"available. Use --concurrency {fits} (prefork), or --pool threads for the contextualize queues (LLM "
            "calls wait on the network: models are loaded once), or set SITUATE_WORKER_PROCESS_MB to what your "
            "processes measure (0 turns the check off)")


def _available_mb() -> int | None:
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) // 1024
    except OSError:
        pass
    return None


def api(host: str = typer.Option("127.0.0.1"), port: int = typer.Option(8000),
        workers: int | None = typer.Option(None, min=1, max=64, help="Processes serving it (default "
                                           "SITUATE_API_WORKERS): searches embed their queries and fuse in Python, "
                                           "one core a process.")) -> None:
    """Serve the HTTP API (OpenAPI docs at /docs). Beyond loopback, only with SITUATE_API_TOKEN."""
    import os

    import uvicorn

    from producers.cli.common import fail
    from producers.web.auth import is_loopback
    from workers import logs
    from workers.settings import get_settings, override

    if not is_loopback(host) and not get_settings().api_token:
        fail(f"refusing to listen on {host} without a token: set SITUATE_API_TOKEN (the admin token), "
             "then give callers their own with `situate token create`")
    override(api_host=host)  # the app answers by where it listens (see producers/web/auth.py)
    os.environ["SITUATE_API_HOST"] = host  # the same, for processes uvicorn starts (they read the environment)
    if not get_settings().embed_threads:
        # A search embeds one short query, and requests already run side by side: ONNX's own
        # threads would only spin between runs, CPU taken from OpenSearch beside it (``ops/bench
        # clients``, docs/benchmarks.md).
        override(embed_threads=1)
        os.environ["SITUATE_EMBED_THREADS"] = "1"
    logs.configure("INFO")
    uvicorn.run("producers.web.api:app", host=host, port=port, log_config=None, access_log=True,
                workers=workers or get_settings().api_workers)


def mcp(token_file: Path | None = typer.Option(
        None, "--token-file", help="A file holding the token to act with (`situate token create`); its scope holds.")) -> None:
    """Serve situate's MCP tools (search, list_collections, read) over stdio, for an MCP client
    that starts this command. Reads Redis and OpenSearch itself: no API needed. Without
    --token-file it acts as the deployment's admin, which needs SITUATE_API_TOKEN in its
    environment (or a developer's machine where no token exists at all)."""
    from producers.cli.common import fail
    from producers.web import auth
    from producers.web.mcp_server import stdio_server
    from workers import logs
    from workers.settings import get_settings

    logs.configure("WARNING")  # stderr: stdout carries the protocol
    token = None
    if token_file is not None:
        try:
            token = token_file.read_text().strip()
        except OSError as e:
            fail(f"cannot read --token-file: {e.strerror}")
        if not token:
            fail(f"--token-file {token_file} is empty")
    elif not get_settings().api_token and not auth.open_mode():
        fail("give --token-file (a token from `situate token create`), or run with the deployment's "
             "SITUATE_API_TOKEN in the environment to act as its admin")
    try:
        server = stdio_server(token)
    except errors.Denied as e:
        fail(f"--token-file: {e}")
    server.run("stdio")


def flower(host: str = typer.Option("127.0.0.1"), port: int = typer.Option(5555)) -> None:
    """Celery's Flower for situate's workers and queues, behind basic auth from
    SITUATE_FLOWER_USER / SITUATE_FLOWER_PASSWORD (or Flower's own OAuth: FLOWER_AUTH,
    FLOWER_AUTH_PROVIDER, FLOWER_OAUTH2_*, passed through). Beyond loopback, only with one."""
    import os
    import sys

    from producers.cli.common import fail
    from producers.web.auth import is_loopback
    from workers.settings import get_settings

    s = get_settings()
    oauth = bool(s.flower_oauth)
    if bool(s.flower_user) != bool(s.flower_password):
        fail("set both SITUATE_FLOWER_USER and SITUATE_FLOWER_PASSWORD, or neither")
    if not (s.flower_user or oauth) and not is_loopback(host):
        fail(f"refusing to serve Flower on {host} without credentials: set SITUATE_FLOWER_USER and "
             "SITUATE_FLOWER_PASSWORD (or Flower's OAuth: FLOWER_AUTH, FLOWER_OAUTH2_*)")
    if s.flower_user:  # Flower's own variable, set at the process edge (this process becomes Flower):
        # through the environment, not argv, as a password in argv is in `ps` for anyone.
        os.environ["FLOWER_BASIC_AUTH"] = f"{s.flower_user}:{s.flower_password}"
    _guard_flower_open_routes()
    from celery.bin.celery import main as celery_main

    sys.argv = ["celery", "-A", "workers.pipeline.app", "flower", f"--address={host}", f"--port={port}"]
    celery_main()


def _guard_flower_open_routes() -> None:
    """Flower serves ``/metrics`` and ``/healthcheck`` to anyone, whatever its auth settings
    (they lack tornado's ``authenticated``): give them the same check as every other page."""
    import tornado.web
    from flower.views import monitor

    def prepare(handler: Any) -> None:
        options = handler.application.options
        if (options.basic_auth or options.auth) and not handler.current_user:
            raise tornado.web.HTTPError(401)

    monitor.Metrics.prepare = prepare
    monitor.Healthcheck.prepare = prepare
