"""``ops/bench --record``: a benchmark's latest result, written into its own section of
docs/benchmarks.md with the date, the machine and the command — the one place measured figures
live (code names the benchmark that decided a choice, never its figures).

A section is whatever lies between ``<!-- ops/bench NAME -->`` and ``<!-- /ops/bench NAME -->``;
the prose around it is written by hand. The run is a child process (a benchmark starts other
processes whose output goes to the same terminal), its output echoed as it comes and kept.
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "benchmarks.md"
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_PROGRESS = re.compile(r"[━─]{8,}|^\s*$")


def machine() -> str:
    """``2 cores, Intel(R) Xeon(R) …, 24 GiB``: what the figures were measured on."""
    model = ""
    try:
        model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                      if line.startswith("model name")), "")
    except OSError:
        pass
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2 ** 30
    return f"{os.cpu_count()} cores, {model or platform.processor() or platform.machine()}, {memory:.0f} GiB"


def section(name: str, command: str, output: str, when: str | None = None) -> str:
    lines = [_ANSI.sub("", line).rstrip() for line in output.splitlines()]
    kept = [line for line in lines if not _PROGRESS.search(line) and "BuildBackendWarning" not in line]
    stamp = when or time.strftime("%Y-%m-%d")
    return "\n".join([f"<!-- ops/bench {name} -->", f"`{command}` — {stamp}, {machine()}:", "", "```text",
                      *kept, "```", f"<!-- /ops/bench {name} -->"])


def write(name: str, text: str) -> None:
    page = PAGE.read_text()
    pattern = re.compile(rf"<!-- ops/bench {re.escape(name)} -->.*?<!-- /ops/bench {re.escape(name)} -->", re.S)
    if pattern.search(page):
        page = pattern.sub(lambda _: text, page)
    else:
        page = page.rstrip() + f"\n\n## `ops/bench {name}`\n\n{text}\n"
    PAGE.write_text(page)


def record(args: list[str], command: list[str]) -> int:
    name = next((a for a in args if not a.startswith("-")), "")
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    kept = []
    assert proc.stdout is not None
    for line in proc.stdout:
        sys.stdout.write(line)
        kept.append(line)
    if proc.wait() != 0:
        print(f"[situate] ops/bench {name} failed: docs/benchmarks.md left as it was", file=sys.stderr)
        return proc.returncode
    write(name, section(name, "ops/bench " + " ".join(args), "".join(kept)))
    print(f"[situate] recorded in {PAGE.relative_to(ROOT)}, section ops/bench {name}", file=sys.stderr)
    return 0
