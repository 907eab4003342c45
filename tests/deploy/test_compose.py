"""The compose stack run for real: the image built once by compose, the README's own line
(``docker compose up -d --build --scale worker=3 --wait``), and everything through the
published API port, as a user has it. On a machine without Docker, ``ops/containers/up``
(which ``ops/test`` runs) provides podman's Docker API and the images no registry serves here.

The tests of this module run in order, on one stack (tests/conftest.py keeps them together)."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from producers.ingest.loaders import load_cookbook
from situate import SituateClient
from tests.documents import make
from workers.settings import get_settings

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT.parent / "shared" / "data" / "cookbook" / "codebase_chunks.json"
PROJECT = "situate-test"
QUERIES = ["How does the DiffExecutor run the secondary executor?", "What hash function does password4j use for Argon2?",
           "How are ClickHouse tuple columns loaded?"]
TOKEN = f"compose-{uuid.uuid4().hex[:12]}"
FLOWER_PASSWORD = f"flower-{uuid.uuid4().hex[:12]}"
SITUATE_SERVICES = ("worker", "worker-llm", "api", "flower")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Stack:
    def __init__(self) -> None:
        self.api_port, self.flower_port = free_port(), free_port()
        # The test process's own settings (a test Redis, stand-in keys) must not reach the stack.
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("SITUATE_", "ANTHROPIC_", "VOYAGE_", "AWS_"))}
        self.env.update({"SITUATE_API_TOKEN": TOKEN, "SITUATE_FLOWER_PASSWORD": FLOWER_PASSWORD,
                         "SITUATE_API_PORT": str(self.api_port), "SITUATE_FLOWER_PORT": str(self.flower_port)})
        self.api = f"http://127.0.0.1:{self.api_port}"
        self.figures: dict[str, Any] = {}

    def compose(self, *args: str, timeout: float = 1200, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(["docker", "compose", "-p", PROJECT, *args], cwd=ROOT, env=self.env, capture_output=True,
                              text=True, timeout=timeout, check=False)
        if check and done.returncode != 0:
            raise AssertionError(f"docker compose {' '.join(args)}: {done.returncode}\n"
                                 f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        return done

    def docker(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["docker", *args], env=self.env, capture_output=True, text=True, timeout=timeout, check=False)

    def containers(self, service: str) -> list[str]:
        """The names of a service's containers, in their number's order."""
        ids = self.compose("ps", "-q", service).stdout.split()
        names = [self.docker("inspect", "--format", "{{.Name}}", i).stdout.strip().lstrip("/") for i in ids]
        return sorted(names, key=lambda n: int(n.rsplit("-", 1)[1]))

    def client(self) -> SituateClient:
        return SituateClient(self.api, token=TOKEN, timeout=120)

    def up(self, *extra: str) -> float:
        started = time.monotonic()
        self.compose("up", "-d", *extra, "--scale", "worker=3", "--wait", timeout=1800)
        return time.monotonic() - started


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    if subprocess.run(["docker", "compose", "version"], capture_output=True, check=False).returncode != 0:
        pytest.fail("no `docker compose` here: on a machine without Docker, eval \"$(ops/containers/up)\" first "
                    "(ops/test does)", pytrace=False)
    stack = Stack()
    stack.compose("down", "-v", "-t", "5", check=False)  # what a run cut short left
    try:
        stack.figures["up_s"] = stack.up("--build")
        # At once, as a user would: up --wait returned, so the API answers a search.
        with stack.client() as client:
            client.create_collection("first", contextualizer="keywords")
            stack.figures["first_search"] = client.search("first", "anything at all", k=3)
        yield stack
    finally:
        if os.environ.get("SITUATE_KEEP_STACK") != "1":
            logs = stack.compose("logs", "--no-color", "--tail", "200", check=False).stdout
            (ROOT / ".services" / "logs").mkdir(parents=True, exist_ok=True)
            (ROOT / ".services" / "logs" / "compose-test.log").write_text(logs)
            stack.compose("down", "-v", "-t", "10", check=False)
        print("\ncompose figures:", json.dumps(stack.figures))


def test_one_image_for_every_role(stack: Stack) -> None:
    images = {stack.docker("inspect", "--format", "{{.Image}}", name).stdout.strip()
              for service in SITUATE_SERVICES for name in stack.containers(service)}
    assert len(images) == 1, images
    size = int(stack.docker("image", "inspect", "--format", "{{.Size}}", "situate:local").stdout.strip())
    stack.figures["image_bytes"] = size
    assert size <= 900_000_000, f"the image is {size / 1e9:.2f} GB"


def test_search_answers_as_soon_as_up_returns(stack: Stack) -> None:
    assert stack.figures["first_search"] == []  # answered (an empty collection), not refused


def test_corpus_indexed_through_a_stop_and_a_kill(stack: Stack) -> None:
    """The corpus posted; one worker stopped mid-ingest (SIGTERM: a warm shutdown), another
    killed (SIGKILL). Nothing fails, every chunk is written once, the killed worker's documents
    are taken up by the others within the recovery time."""
    documents = [{"id": d.doc_id, "text": d.body, "metadata": d.metadata,
                  "chunks": [c["text"] for c in sorted(d.chunks or [], key=lambda c: c["n"])]}
                 for d in load_cookbook(CORPUS)]
    expected_chunks = sum(len(d["chunks"] or []) for d in documents)
    workers = stack.containers("worker")
    assert len(workers) == 3
    with stack.client() as client:
        client.create_collection("cookbook", contextualizer="keywords")
        posted = time.monotonic()
        for start in range(0, len(documents), 30):
            client.add_documents("cookbook", documents[start:start + 30])
        time.sleep(3)
        stopped = time.monotonic()
        done = stack.docker("stop", "-t", "600", workers[1], timeout=700)  # SIGTERM, then its grace
        assert done.returncode == 0, done.stderr
        stack.figures["stop_s"] = round(time.monotonic() - stopped, 1)
        killed_at = time.monotonic()
        assert stack.docker("kill", workers[2]).returncode == 0
        states = client.wait("cookbook", [d["id"] for d in documents], timeout=600)
        finished = time.monotonic()
        collection = client._call("GET", "/v1/collections/cookbook")
        metrics = httpx.get(f"{stack.api}/metrics", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60).text
    failed = {k: v.get("error") for k, v in states.items() if v["state"] != "indexed"}
    if failed:  # the workers' own logs, kept before a later `down` removes their containers
        logs = stack.compose("logs", "--no-color", check=False).stdout
        (ROOT / ".services" / "logs" / "compose-ingest.log").write_text(logs)
        assert not failed, f"{failed}\n{_tracebacks(failed, logs)}(the workers' logs: .services/logs/compose-ingest.log)"
    written = sum(float(m) for m in re.findall(r'^situate_chunks_indexed_total\{collection="cookbook"\} (\S+)$',
                                               metrics, re.M))
    stack.figures.update({"documents": len(documents), "chunks": expected_chunks,
                          "ingest_s": round(finished - posted, 1),
                          "after_kill_s": round(finished - killed_at, 1), "chunk_writes": written,
                          "chunks_in_index": collection["chunks_indexed"]})
    assert collection["chunks_indexed"] == expected_chunks
    assert written == expected_chunks, "a chunk written twice (or lost)"
    # The killed worker's documents: taken up by the others within the recovery time (with the
    # time their work takes: the whole corpus is a few seconds of it).
    assert finished - killed_at <= get_settings().recovery_s + 90
    # The stopped worker left warm: a stop is not a poison pill, nothing of it counted as a death.
    stopped_log = stack.docker("logs", workers[1]).stdout + stack.docker("logs", workers[1]).stderr
    assert "warm shutdown" in stopped_log.lower()


def _tracebacks(failed: dict[str, str | None], logs: str, lines: int = 40) -> str:
    """What the worker log says under each failure's task id (an internal error names only its
    type to the caller), so a run that fails once shows its cause in its own output."""
    found = []
    log_lines = logs.splitlines()
    for task_id in re.findall(r"under task (\S+)", " ".join(e or "" for e in failed.values())):
        at = [i for i, line in enumerate(log_lines) if task_id in line]
        if at:
            found.append("\n".join(log_lines[at[0]:at[-1] + lines]))
    return "".join(f"{x}\n" for x in found)


def test_search_hits_carry_their_contexts(stack: Stack) -> None:
    with stack.client() as client:
        hits = client.search("cookbook", QUERIES[0], k=5)
    assert hits and all(hit["context"] for hit in hits), hits[:2]


def test_a_hostile_file_fails_alone_in_the_container(stack: Stack, tmp_path: Path) -> None:
    expected = make.hostile(tmp_path)
    chosen = ["bomb.docx", "laughs.docx", "not-really.pdf"]
    good = tmp_path / "good.pdf"
    good.write_bytes(make.pdf([["A page about sea otters, which hold hands while they sleep."]]))
    with stack.client() as client:
        client.create_collection("files", contextualizer="keywords")
        for name in chosen:
            client.add_file("files", tmp_path / name)
        client.add_file("files", good)
        states = client.wait("files", [*chosen, "good.pdf"], timeout=300)
    assert states["good.pdf"]["state"] == "indexed"
    for name in chosen:
        assert states[name]["state"] == "failed" and expected[name] in states[name]["error"], states[name]


def test_same_hits_after_down_and_up(stack: Stack) -> None:
    def hits() -> dict[str, list[str]]:
        with stack.client() as client:
            return {q: [f"{h['doc_id']}#{h['chunk']}" for h in client.search("cookbook", q, k=5)] for q in QUERIES}

    before = hits()
    assert all(before.values())
    stack.compose("down", "-t", "60")
    stack.figures["up_again_s"] = stack.up()
    assert hits() == before


def test_situate_containers_run_as_non_root(stack: Stack) -> None:
    for service in SITUATE_SERVICES:
        for name in stack.containers(service):
            uid = stack.docker("exec", name, "id", "-u").stdout.strip()
            assert uid == "10001", f"{name} runs as {uid}"


def test_flower_answers_only_with_its_password(stack: Stack) -> None:
    url = f"http://127.0.0.1:{stack.flower_port}/"
    assert httpx.get(url, timeout=30).status_code == 401
    assert httpx.get(url, auth=("admin", "wrong"), timeout=30).status_code == 401
    assert httpx.get(url, auth=("admin", FLOWER_PASSWORD), timeout=30).status_code == 200


def test_metrics_answer_with_the_backlog(stack: Stack) -> None:
    assert httpx.get(f"{stack.api}/metrics", timeout=30).status_code == 401
    reply = httpx.get(f"{stack.api}/metrics", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60)
    assert reply.status_code == 200 and 'situate_queue_backlog{queue="chunk"}' in reply.text
    backlog = httpx.get(f"{stack.api}/v1/backlog?queues=chunk,index", headers={"Authorization": f"Bearer {TOKEN}"},
                        timeout=60).json()
    assert backlog["backlog"] == 0  # everything indexed: a scaler would let the workers go
