"""The fault runs' figures: one JSON line per run in .services/reports/faults.jsonl, and a table
at the end of the session. The runs happen in whichever pytest process took them (pytest-xdist)
while the table is printed by the process that started the session: the file is how the rows
get from one to the other, each tagged with the session it belongs to."""

from __future__ import annotations

import json
import os
import time
import uuid

from ops.harness import ROOT

REPORT = ROOT / ".services" / "reports" / "faults.jsonl"
SESSION = "SITUATE_TEST_SESSION"  # set once by the process that starts the session, inherited


def start_session() -> None:
    os.environ.setdefault(SESSION, uuid.uuid4().hex)


def record(row: dict) -> None:
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    with REPORT.open("a") as f:
        f.write(json.dumps({**row, "session": os.environ.get(SESSION), "at": round(time.time())}) + "\n")


def note(section: str, line: str) -> None:
    """A figure of another kind (fairness, framing): printed under its own heading at the end."""
    record({"section": section, "line": line})


def print_table(terminalreporter) -> None:
    session = os.environ.get(SESSION)
    try:
        rows = [r for r in map(json.loads, REPORT.read_text().splitlines()) if session and r.get("session") == session]
    except FileNotFoundError:
        return
    notes = [r for r in rows if "section" in r]
    rows = [r for r in rows if "section" not in r]
    for section in dict.fromkeys(r["section"] for r in notes):
        terminalreporter.section(section)
        for r in notes:
            if r["section"] == section:
                terminalreporter.write_line(r["line"])
    if not rows:
        return
    terminalreporter.section("fault figures")
    terminalreporter.write_line(f"{'fault':44} {'docs':>5} {'indexed':>7} {'failed':>6} {'lost':>4} {'dup _id':>7} "
                                f"{'stale':>5} {'paid 2x':>7} {'in flight':>9}  other")
    shown = ("fault", "documents", "indexed", "failed", "lost", "duplicate_ids", "stale_chunks", "paid_twice",
             "requests", "notes", "in_flight", "session", "at")
    for r in rows:
        other = {k: v for k, v in r.items() if k not in shown}
        terminalreporter.write_line(
            f"{r['fault'][:44]:44} {r['documents']:5d} {r['indexed']:7d} {len(r['failed']):6d} {r['lost']:4d} "
            f"{r['duplicate_ids']:7d} {r['stale_chunks']:5d} {r['paid_twice']:7d} {r.get('in_flight', '-')!s:>9}  "
            + json.dumps(other))
