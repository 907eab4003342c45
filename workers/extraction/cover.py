"""Who, what and when a document is (its cover page, as a reader sees it), from its first pages: what a chunk cut from page 60 has
lost and a reader of page 1 knows. Offline contexts carry it on every chunk (the issuer, the
form, the period), and citations show the title.

What is read, in order of trust:
- a filing's cover page (the SEC forms, and the many reports that copy them): the form
  (``FORM 10-K``), the issuer (the line above "(Exact name of registrant as specified in its
  charter)"), the period ("For the fiscal year ended December 31, 2019", "For the quarterly
  period ended …", "Date of report …");
- a press release's dateline: ``Johnson & Johnson (NYSE: JNJ)`` and ``(January 24, 2023)``;
- the file's own properties, when they are words and not an accession number or a file name;
- the file name: users name their files (``3M_2018_10K.pdf``), and its words are often the best
  title there is.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

MONTH = r"(?:January|February|March|April|May|June|July|August|September|October|November|December)"
DATE = rf"{MONTH}\s+\d{{1,2}},?\s+\d{{4}}"
_FORM = re.compile(r"\bFORM\s+(10-K|10-Q|8-K|20-F|40-F|6-K|S-1|S-4|DEF\s*14A|11-K)\b", re.I)
_REGISTRANT = re.compile(r"\(\s*exact\s+name\s+of\s+(?:the\s+)?registrant", re.I)
_PERIOD = re.compile(rf"for\s+the\s+(fiscal\s+year|quarterly\s+period|year|quarter|period)\s+ended:?\s+({DATE})", re.I)
_REPORT_DATE = re.compile(rf"date\s+of\s+report[^:]*:\s*({DATE})", re.I)
_TICKER = re.compile(r"([A-Z][\w&.,'’ -]{1,60}?)\s*\((?:NYSE|NASDAQ|Nasdaq|NYSE American|LSE|TSX|ASX)\s*:\s*[A-Z.]{1,6}\)")
_DATELINE = re.compile(rf"\(\s*({DATE})\s*\)")
_ANY_DATE = re.compile(DATE)
_ACCESSION = re.compile(r"^\d{10}-\d{2}-\d{6}$")
_FILE_WORD = re.compile(r"[A-Za-z]+|\d+")
# Small capitals come out of some PDFs as a capital, a space, the rest: "MGM R ESORTS I NTERNATIONAL".
_SMALL_CAPS = re.compile(r"\b([A-Z]) (?=[A-Z]{2,}\b)")


def of(first_pages: str, properties: dict[str, str], name: str = "") -> dict[str, str]:
    """The profile: any of ``organisation``, ``form``, ``period``, ``date``, ``title``, ``year``."""
    head = first_pages[:20_000]
    out: dict[str, str] = {}
    form = _FORM.search(head)
    if form:
        out["form"] = "Form " + " ".join(form.group(1).upper().split())
    lines = [" ".join(line.split()) for line in head.splitlines()]
    for i, line in enumerate(lines):
        if _REGISTRANT.search(line):
            above = next((lines[j] for j in range(i - 1, max(-1, i - 4), -1) if lines[j].strip("_-–—= ")), "")
            above = re.sub(r"^.*?(commission\s+file\s+number\s+\S+|_{3,}|-{3,})\s*", "", above, flags=re.I)
            if above and not _REGISTRANT.search(above):
                out["organisation"] = _SMALL_CAPS.sub(r"\1", above).strip(" ,.")
            break
    period = _PERIOD.search(head)
    if period:
        kind = " ".join(period.group(1).lower().split())
        out["period"] = f"{kind} ended {' '.join(period.group(2).split())}"
        out["date"] = " ".join(period.group(2).split())
    elif (report := _REPORT_DATE.search(head)):
        out["date"] = " ".join(report.group(1).split())
    if "organisation" not in out and (ticker := _TICKER.search(head)):
        out["organisation"] = ticker.group(1).strip(" ,.–-")
    if "date" not in out and (dateline := _DATELINE.search(head) or _ANY_DATE.search(head[:3000])):
        out["date"] = " ".join(dateline.group(1 if dateline.re is _DATELINE else 0).split())
    if "date" in out:
        out["year"] = out["date"][-4:]
    title = meaningful_title(properties.get("title", ""), name)
    if title:
        out["title"] = title
    return out


def meaningful_title(title: str, name: str = "") -> str:
    """A file's title property if it says something: not empty, not an accession number, not
    the file's own name."""
    title = " ".join((title or "").split())
    if len(title) < 4 or _ACCESSION.match(title) or not re.search(r"[A-Za-z]{3}", title):
        return ""
    if name and title.lower() in (name.lower(), PurePosixPath(name).stem.lower()):
        return ""
    return title[:200]


def file_words(name: str) -> list[str]:
    """``ACTIVISIONBLIZZARD_2019_10K.pdf`` -> ACTIVISIONBLIZZARD, 2019, 10K; ``2023Q2`` -> 2023, Q2."""
    stem = PurePosixPath(name).stem
    words: list[str] = []
    for token in re.split(r"[\s_./-]+", stem):
        parts = _FILE_WORD.findall(token)
        # "10K", "Q2", "8K" read as one word; "2023Q2" as two
        if len(parts) == 2 and parts[0].isdigit() and len(parts[0]) <= 2:
            words.append(token)
        else:
            words.extend(parts)
    return [w for w in words if w]


def describe(profile: dict[str, str], name: str = "") -> str:
    """One line a reader recognises: ``Activision Blizzard, Inc. · Form 10-K · fiscal year ended
    December 31, 2019`` (fields as found; the title or the file name when there is no issuer)."""
    who = profile.get("organisation") or profile.get("title") or " ".join(file_words(name))
    parts = [who, profile.get("form", ""), profile.get("period") or profile.get("date", "")]
    return " · ".join(p for p in parts if p)
