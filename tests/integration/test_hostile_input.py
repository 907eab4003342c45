"""What a hostile document or folder can do to the operator's terminal and machine: nothing.

- Ids and text carrying Rich markup and terminal escape sequences are printed as text by every
  command that shows them (``ingest``, ``failed``, ``retry``, ``search``, ``delete``): no crash
  on ``a[/x]``, no hyperlink from ``[link=…]``, no escape byte reaching the terminal.
- Folder ingest stays in its folder: a link out of it is never read, even with
  ``--follow-symlinks``; a file over the size limit is refused before it is read; what was left
  out is counted and listed.
"""

from __future__ import annotations

import json
import os

from tests.support import run_cli, write_jsonl

ESC = "\x1b"
HOSTILE_IDS = ["a[/x]", "[link=http://evil.example]click[/link]", "[bold red]loud[/]", "rtl\u202egnp.exe"]


def no_escape_reaches_the_terminal(result) -> None:
    printed = result.stdout + result.stderr
    assert ESC not in printed, f"an escape sequence reached the terminal: {printed!r}"
    assert "\u202e" not in printed
    assert "Traceback" not in printed and "MarkupError" not in printed, printed


def test_every_command_prints_hostile_ids_and_text_as_text(worker, collection_name, tmp_path):
    text = f"Otter notes {ESC}]0;pwned{ESC}\\ {ESC}[2J cleared [red]not red[/red] [link=http://evil.example]x[/link]"
    docs = [{"id": i, "text": f"{text} number {n}"} for n, i in enumerate(HOSTILE_IDS)]
    docs += [{"id": "empty[/x]", "text": ""}, {"id": f"esc{ESC}[31m", "text": "control characters in the id"}]
    path = write_jsonl(tmp_path / "hostile.jsonl", docs)
    ingested = run_cli("ingest", "-c", collection_name, "--contextualizer", "none", path)
    assert ingested.returncode == 1, ingested.stderr  # two of them fail, visibly
    no_escape_reaches_the_terminal(ingested)
    assert "empty[/x]" in ingested.stdout and "\\x1b" in ingested.stdout  # the bad id, shown escaped

    failed = run_cli("failed", "-c", collection_name)
    assert failed.returncode == 0, failed.stderr
    no_escape_reaches_the_terminal(failed)
    assert "empty[/x]" in failed.stdout

    retried = run_cli("retry", "-c", collection_name, "--no-wait", "empty[/x]")
    no_escape_reaches_the_terminal(retried)
    assert "empty[/x]" in retried.stdout

    found = run_cli("search", "-c", collection_name, "otter notes")
    assert found.returncode == 0, found.stderr
    no_escape_reaches_the_terminal(found)
    for hostile in HOSTILE_IDS[:3]:
        assert hostile in found.stdout, hostile  # printed as it is, markup and all
    assert "[red]not red[/red]" in found.stdout and "\\x1b" in found.stdout

    status = run_cli("status", "-c", collection_name)
    no_escape_reaches_the_terminal(status)
    deleted = run_cli("delete", "-c", collection_name, "a[/x]", "[nope]")
    no_escape_reaches_the_terminal(deleted)
    assert deleted.returncode == 1 and "[nope]" in deleted.stdout


def test_folder_ingest_stays_in_its_folder_and_checks_sizes_before_reading(worker, collection_name, tmp_path):
    secret = tmp_path / "outside" / "credentials"
    secret.parent.mkdir()
    secret.write_text("aws_secret_access_key = WALRUS-SECRET-0042\n")
    folder = tmp_path / "notes"
    (folder / "sub").mkdir(parents=True)
    (folder / "real.md").write_text("# Otters\n\nOtters hold hands while they sleep.\n")
    (folder / "big.txt").write_text("x" * 5000)
    os.symlink(secret, folder / "notes.md")  # a link out of the folder
    os.symlink(secret.parent, folder / "sub" / "escape")  # a folder link out of it
    os.symlink(folder / "real.md", folder / "sub" / "again.md")  # a link inside it
    env = {"SITUATE_MAX_DOCUMENT_BYTES": "4000"}

    plain = run_cli("ingest", "-c", collection_name, "--contextualizer", "none", str(folder), "--json", env=env)
    summary = json.loads(plain.stdout)
    reasons = summary["skipped"]["by_reason"]
    assert sorted(sum(reasons.values(), [])) == ["notes.md", "sub/again.md", "sub/escape"]
    assert summary["indexed"] == 1 and [f["doc_id"] for f in summary["failed"]] == ["big.txt"]
    assert "not read" in summary["failed"][0]["error"]

    followed = run_cli("ingest", "-c", collection_name, str(folder), "--follow-symlinks", "--json", env=env)
    summary = json.loads(followed.stdout)
    assert sorted(sum(summary["skipped"]["by_reason"].values(), [])) == ["notes.md", "sub/escape"]
    assert summary["documents"] == 3  # real.md (unchanged), sub/again.md (its link, inside), big.txt
    leaked = run_cli("search", "-c", collection_name, "WALRUS-SECRET-0042 aws_secret_access_key", "--json")
    assert "WALRUS" not in leaked.stdout

    chosen = run_cli("ingest", "-c", collection_name, str(folder), "--include", "*.md", "--exclude", "real.md",
                     "--json", env=env)
    summary = json.loads(chosen.stdout)
    assert summary["documents"] == 0 and "left out by --include/--exclude" in summary["skipped"]["by_reason"]
