"""The backlog: documents submitted and not yet indexed or failed weigh ``SITUATE_BACKLOG_MB`` at
most; the next one waits where it is (its file, its folder) until the workers make room, and
what each document reserved is given back when it ends, whichever way it ends."""

from __future__ import annotations

import json
import threading
import time

from tests.support import run_cli, write_jsonl
from workers.storage import states


def test_an_ingest_never_holds_more_than_its_backlog_in_flight(worker, collection_name, tmp_path):
    """A budget of 0 MB lets one document in flight at a time (one always passes when none is):
    thirty documents go through one by one, the producer waiting at its file, and the backlog is
    empty again at the end."""
    docs = [{"id": f"d{i:02d}", "text": f"# Note {i}\n\n" + f"Kelp line {i} is seeded in autumn. " * 40}
            for i in range(30)]
    biggest = max(len(d["text"].encode()) for d in docs)
    base = states.backlog()  # another test's documents still in flight, if any
    seen: list[int] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            seen.append(states.backlog())
            time.sleep(0.02)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        result = run_cli("ingest", "-c", collection_name, "--contextualizer", "none", "--json",
                         write_jsonl(tmp_path / "d.jsonl", docs), env={"SITUATE_BACKLOG_MB": "0"})
    finally:
        done.set()
        watcher.join()
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads(result.stdout)
    assert summary["documents"] == 30 and summary["indexed"] == 30 and summary["failed"] == []
    assert max(seen) - base <= biggest, (max(seen), base, biggest)  # never two of them in flight at once
    assert max(seen) > base, "the watcher saw the documents in flight"
    assert states.backlog() == base, "every document gave back what it reserved"


def test_a_failed_or_deleted_document_gives_its_bytes_back(worker, collection_name, tmp_path):
    """A file that fails in the worker (a PDF that is not one: its extraction fails) gives back
    what it reserved when it fails; a deleted document, when it is deleted."""
    from workers import lifecycle

    base = states.backlog()
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "otters.txt").write_text("Sea otters hold hands while they sleep.")
    (folder / "broken.pdf").write_bytes(b"%PDF-1.4\n" + b"\x00garbage" * 500)
    result = run_cli("ingest", "-c", collection_name, "--contextualizer", "none", "--json", str(folder))
    assert result.returncode == 1, result.stdout + result.stderr
    failed = json.loads(result.stdout)["failed"]
    assert [f["doc_id"] for f in failed] == ["broken.pdf"], failed
    assert states.get(collection_name, "broken.pdf")["state"] == "failed"
    assert states.backlog() == base
    assert lifecycle.delete_document(collection_name, "otters.txt")
    assert states.backlog() == base
