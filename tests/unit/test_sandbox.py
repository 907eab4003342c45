"""A hostile file harms no one else (Security III), tried against the real sandbox child:
what a parser prints never reaches a reply, a reply for another request ends its child, the
child holds no secret and cannot raise its limits, budgets count bytes and CPU per page, no XML
parser expands an entity, and a zip's directory is only ever read in the child."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import tracemalloc

import pytest

from tests.documents import make
from workers.errors import ExtractionError
from workers.extraction import detect, office, sandbox
from workers.extraction.limits import Limits


def extract(data: bytes, name: str, limits: Limits | None = None):
    return sandbox.extract(data, detect.media_type(data, name), name, limits or Limits())


def test_what_a_parser_prints_never_reaches_another_tenants_file(tmp_path):
    """openpyxl prints to stdout on a workbook with a 4,299-digit style index; the child's stdout
    was its reply pipe, and every request after it read the one before's reply."""
    with pytest.raises(ExtractionError, match="could not read the file"):
        extract(make.noisy_xlsx(tmp_path / "noisy.xlsx"), "tenant A noisy.xlsx")
    for i in range(3):
        book = make.xlsx(tmp_path / f"b{i}.xlsx", {"Orders": [["tenant", "document"], ["B", f"order book {i}"]]})
        assert f"| B | order book {i} |" in extract(book.read_bytes(), f"tenant B doc {i}.xlsx").text


def test_a_reply_for_another_request_ends_its_child(tmp_path, monkeypatch):
    """A child out of step (here one that answers with the wrong id) is killed, its answer
    dropped, and the next file gets a new child."""
    fake = tmp_path / "fake_child.py"
    fake.write_text(textwrap.dedent('''
        import json, sys
        from workers.extraction import frames
        requests, replies = int(sys.argv[1]), int(sys.argv[2])
        frames.write(replies, json.dumps({"ready": True}).encode())
        while True:
            header = json.loads(frames.read(requests, 1 << 16)); frames.read(requests, 1 << 30)
            frames.write(replies, json.dumps({"id": "someone-else", "extracted": {"text": "OTHER TENANT",
                                                                                   "media_type": "text/csv"}}).encode())
    '''))
    monkeypatch.setattr(sandbox, "CHILD", [sys.executable, str(fake)])
    box = sandbox.Sandbox()
    try:
        for _ in range(2):  # each time a new child, each time its answer dropped
            with pytest.raises(ExtractionError, match="out of turn"):
                box.extract(b"a,b\n1,2\n", "text/csv", "mine.csv", Limits())
            assert box.proc is None  # killed: nothing more it says is read
    finally:
        box.close()
    monkeypatch.undo()
    assert "| 1 | 2 |" in extract(b"a,b\n1,2\n", "mine.csv").text  # the real child, unharmed


def test_the_child_holds_no_secret_and_cannot_raise_its_limits(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-must-not-leak")
    monkeypatch.setenv("SITUATE_REDIS_URL", "redis://:hunter2@127.0.0.1:6379/0")
    box = sandbox.Sandbox()
    try:
        seen = box.probe(Limits(memory_mb=1024))
        isolation = box.isolation
    finally:
        box.close()
    names = set(seen["environment"])
    assert not {"ANTHROPIC_API_KEY", "SITUATE_REDIS_URL", "HOME"} & names and names <= set(sandbox.CHILD_ENV)
    limits = seen["limits"]
    assert limits["RLIMIT_AS"] == [1024 * 2**20] * 2  # hard = soft: it cannot raise it again
    assert limits["RLIMIT_CPU"][1] == sandbox.LIFETIME_CPU_S and limits["RLIMIT_CPU"][0] <= sandbox.LIFETIME_CPU_S
    assert limits["RLIMIT_NOFILE"][1] <= 64 and limits["RLIMIT_FSIZE"] == [0, 0] and limits["RLIMIT_CORE"] == [0, 0]
    if sys.platform.startswith("linux") and isolation["network"] == "namespace":
        assert seen["interfaces"] == ["lo"]  # a network of its own, with nothing in it
    else:  # said, not hidden: docs/reliability.md lists where it holds
        assert isolation["network"].startswith("shared (")
    if os.geteuid() == 0:
        if isolation["user"] == "nobody":
            assert seen["uid"] == seen["euid"] != 0
        else:  # stays root only when nobody could not read the code it may still import
            unreadable = isolation["user"].split("read ", 1)[1].rstrip(")")
            assert not os.stat(unreadable).st_mode & 0o004 or not os.stat(os.path.dirname(unreadable)).st_mode & 0o001


def test_text_budgets_count_utf8_bytes_not_characters():
    """An emoji is 4 bytes in the body store and the checkpoints (and was 12 as a JSON escape):
    the same 2,400 characters pass a 5,000-byte budget as letters and fail it as emoji."""
    limits = Limits(max_bytes=5_000)
    assert extract(make.emoji_xlsx(emoji=10, cells=240, char="a"), "letters.xlsx", limits).text.count("a" * 10) == 240
    with pytest.raises(ExtractionError, match=r"over 5,000 bytes \(SITUATE_MAX_EXTRACTED_BYTES\)"):
        extract(make.emoji_xlsx(emoji=10, cells=240), "grins.xlsx", limits)
    with pytest.raises(ExtractionError, match="bytes"):
        extract(make.emoji_xlsx(), "twelve-kb.xlsx")  # the attack: 19.9 M characters, 80 MB of text


def test_a_doctype_anywhere_in_an_office_part_fails_and_no_parser_expands_entities(tmp_path):
    """A DTD after a 5 KB comment passed a check of the first 4,096 bytes, and openpyxl (reading
    with the standard library's parser) expanded its entity into the text."""
    with pytest.raises(ExtractionError, match="declares a DTD or XML entities"):
        extract(make.doctype_xlsx(tmp_path / "dtd.xlsx"), "dtd.xlsx")
    # The parsers themselves, without the scan, in a process hardened as the child is (and with
    # openpyxl told not to use defusedxml itself: the standard library's parser is the one defused).
    script = textwrap.dedent(f'''
        import io, sys
        from workers.extraction.child import harden_xml
        harden_xml()
        import openpyxl
        data = open({str(tmp_path / "dtd.bin")!r}, "rb").read()
        try:
            book = openpyxl.load_workbook(io.BytesIO(data), read_only=True)
            print([row for row in book.worksheets[0].iter_rows(values_only=True)])
        except Exception as e:
            print("refused", type(e).__name__)
    ''')
    (tmp_path / "dtd.bin").write_bytes(make.doctype_xlsx(tmp_path / "dtd2.xlsx"))
    env = {**os.environ, "OPENPYXL_DEFUSEDXML": "False"}
    hardened = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60)
    assert "refused" in hardened.stdout and "EXPANDED" not in hardened.stdout, hardened.stdout + hardened.stderr
    plain = subprocess.run([sys.executable, "-c", script.replace("harden_xml()", "pass")], capture_output=True,
                           text=True, env=env, timeout=60)
    assert "INTERNALENTITYEXPANDED" in plain.stdout  # what the hardening stops: the test can see it


def test_a_pdf_built_to_be_slow_fails_on_its_page_budget_and_a_long_honest_one_does_not():
    """Form XObjects drawing each other, 10 wide and 5 deep: ~0.7 s of CPU a page. A 2,000-page
    file of them held an extraction slot for the whole 300 s; a real filing's pages take
    milliseconds (15 ms the slowest of the 59 public PDFs). Both read under one budget, its base
    2 s here instead of the default 10 s (the same rule, met sooner: ``ops/bench hostile`` times
    the default)."""
    budget = Limits(timeout_s=240, cpu_base_s=2.0)
    bomb = make.xobject_bomb(2000)
    started = time.monotonic()
    with pytest.raises(ExtractionError, match="s of CPU, over the 2 s \\+ 0.25 s a page allowed"):
        extract(bomb, "bomb.pdf", budget)
    took = time.monotonic() - started
    assert took < 60, f"the bomb held its slot {took:.0f} s"  # its CPU budget, not the 240 s clock
    honest = make.pdf([[f"Page {i}: revenue grew in region {i % 17}, see note {i % 9}."] for i in range(2000)])
    assert extract(honest, "long-report.pdf", budget).pages_total == 2000


def test_a_zip_directory_is_read_in_the_child_only():
    """Telling an upload's format where it arrives read a zip's whole central directory (1.3 M
    entries: 7.8 s and 466 MB in the API); now a bounded prefix, and the child refuses the count
    before it parses a directory."""
    data = make.zip_directory(300_000)
    tracemalloc.start()
    kind = detect.media_type(data, "report.docx")
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert kind == office.DOCX and peak < 2 * detect.SNIFF_BYTES + 1_000_000, peak
    with pytest.raises(ExtractionError, match="300,000 entries, over the 10,000"):
        extract(data, "report.docx")
