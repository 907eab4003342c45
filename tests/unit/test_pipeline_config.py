"""Static configuration: Celery's delivery settings, queues and their order, docker-compose."""

from __future__ import annotations

import os
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_big_documents_are_situated_first():
    from workers.pipeline.routing import contextualize_priority

    levels = [contextualize_priority(n) for n in (1, 2, 5, 16, 83, 10_000)]
    assert levels == sorted(levels, reverse=True) and levels[0] == 9 and levels[-1] == 0


def test_celery_is_json_only_and_at_least_once():
    from workers.pipeline.app import app
    from workers.pipeline.routing import all_queues
    from workers.settings import get_settings

    c = app.conf
    assert c.accept_content == ["json"] and c.task_serializer == "json"
    assert c.task_acks_late and c.task_reject_on_worker_lost and c.worker_prefetch_multiplier == 1
    # Recovery in seconds: a held message is kept alive by several heartbeats before the
    # visibility timeout, and every worker's sweep gives back expired ones each heartbeat.
    s, options = get_settings(), c.broker_transport_options
    assert s.heartbeat_s * 3 <= options["visibility_timeout"] <= s.recovery_s - 2 * s.heartbeat_s
    assert options["unacked_restore_interval"] == s.heartbeat_s and options["unacked_restore_throttle"] == 1
    assert s.lease_s >= options["visibility_timeout"]
    # Downstream first: a backlog flows through instead of piling up in the first stage.
    assert all_queues() == ["index"] + [f"contextualize.{i}" for i in range(s.shards)] + ["chunk"]


def test_docker_compose_matches_ops():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert {"redis", "opensearch", "worker", "api"} <= set(services)
    assert "appendonly yes" in " ".join(map(str, services["redis"]["command"]))
    assert "noeviction" in " ".join(map(str, services["redis"]["command"]))
    for name in ("worker", "api"):
        env = services[name]["environment"]
        assert env["SITUATE_REDIS_URL"].startswith("redis://redis:6379")
        assert env["SITUATE_OPENSEARCH_URL"] == "http://opensearch:9200"
    assert "situate worker" in " ".join(services["worker"]["command"]) if isinstance(services["worker"]["command"], list) \
        else "situate worker" in services["worker"]["command"]
    # One image for every role, built once (by the worker service), never pulled: no registry has it.
    ours = sorted(n for n, s in services.items() if s.get("image") == "situate:local")
    assert ours == ["api", "flower", "worker", "worker-llm"]
    assert [n for n in ours if "build" in services[n]] == ["worker"]
    assert all(services[n]["pull_policy"] == "never" for n in ours if n != "worker")
    for name in ours:  # a health check each, none a broadcast to every worker through the broker
        test = " ".join(services[name]["healthcheck"]["test"])
        assert "python -m" in test and "inspect" not in test, name
    assert services["api"]["healthcheck"]["test"][-1].endswith("/readyz")


def test_liveness_reads_the_heartbeat_file_age(tmp_path, monkeypatch):
    from workers.pipeline import liveness
    from workers.settings import get_settings

    path = tmp_path / "alive"
    monkeypatch.setenv("SITUATE_LIVENESS_FILE", str(path))
    monkeypatch.setenv("SITUATE_RECOVERY_S", "60")
    get_settings.cache_clear()
    try:
        assert liveness.main() == 1  # never written: not alive yet
        liveness.touch()
        assert liveness.main() == 0
        old = time.time() - 61
        os.utime(path, (old, old))
        assert liveness.main() == 1  # a consumer that stopped beating
        monkeypatch.delenv("SITUATE_LIVENESS_FILE")
        get_settings.cache_clear()
        assert liveness.main() == 2  # not configured: said, not passed
    finally:
        get_settings.cache_clear()


def test_task_names_say_their_stage_and_match_their_python_names():
    from workers.pipeline import tasks
    from workers.pipeline.app import app

    ours = {name: task for name, task in app.tasks.items() if name.startswith("situate.")}
    stages = {"situate.chunk", "situate.contextualize", "situate.contextualize_slice", "situate.poll_batch",
              "situate.tend_batches", "situate.index", "situate.collect_bundle", "situate.index_bundle",
              "situate.contextualize_bundle"}
    assert stages <= set(ours)
    for name in stages:
        assert getattr(tasks, name.split(".", 1)[1]).name == name
    # Names from 0.1 still answer, with the same code, for messages queued before an upgrade.
    for old, task in tasks.LEGACY_TASK_NAMES.items():
        assert ours[old].__wrapped__ is task.__wrapped__
    assert set(ours) == stages | set(tasks.LEGACY_TASK_NAMES)


def test_old_queue_names_still_work_and_drain_their_old_lists():
    from workers.pipeline.routing import expand

    assert expand(["chunk", "index"]) == ["chunk", "index"]
    assert expand(["ingest", "situate.2", "index"]) == ["chunk", "ingest", "contextualize.2", "situate.2", "index"]
    assert expand(["contextualize.0", "situate.0"]) == ["contextualize.0", "situate.0"]
