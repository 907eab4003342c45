"""Who, what and when a document is, as a reader of its first page sees it: what a chunk cut from
page 60 has lost and a reader of page 1 knows. Offline contexts carry it on every chunk, and
citations show the title.

Only what is a cover is read as one:

- **a filing's cover page** — the SEC forms, and the reports that copy them — is recognised by
  "SECURITIES AND EXCHANGE COMMISSION" on the first page, and only then are the form
  (``FORM 10-K``), the issuer (the line above "(Exact name of registrant as specified in its
  charter)") and the period ("For the fiscal year ended December 31, 2019") read;
- **a press release** by its own signs at the top ("FOR IMMEDIATE RELEASE", "reports",
  "BUSINESS WIRE"…): the issuer is the name before its ticker (``Johnson & Johnson (NYSE: JNJ)``),
  the date its dateline's; a results release without a ticker by its headline, the issuer
  first (``Amcor reports fiscal 2023 results``);
- **any other document** — a paper, a manual, a report, a brochure — by its title page: the file's
  title property when it is one (not "Untitled", "Microsoft Word - draft.docx" or an accession
  number), else the first lines of its first page that read as a title; and a date on that page.

A paper that quotes "FORM 10-K" and "Apple Inc. (NASDAQ: AAPL)" is not Apple's filing. The file's
name is a last resort: users name their files (``3M_2018_10K.pdf``), in any script
(``rapport_société_générale_2022.pdf``), but a hash (``379f44022bb27aa53efd5d322c7b57bf.pdf``)
says nothing and is left out.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

MONTH = r"(?:January|February|March|April|May|June|July|August|September|October|November|December)"
DATE = rf"{MONTH}\s+\d{{1,2}},?\s+\d{{4}}"
FIRST_PAGE = 3_000   # characters: a title page, a release's first paragraph
_SEC = re.compile(r"SECURITIES\s+AND\s+EXCHANGE\s+COMMISSION", re.I)
_FORM = re.compile(r"\bFORM\s+(10-K|10-Q|8-K|20-F|40-F|6-K|S-1|S-4|DEF\s*14A|11-K)\b", re.I)
_REGISTRANT = re.compile(r"\(\s*exact\s+name\s+of\s+(?:the\s+)?registrant", re.I)
_PERIOD = re.compile(rf"for\s+the\s+(fiscal\s+year|quarterly\s+period|year|quarter|period)\s+ended:?\s+({DATE})", re.I)
_REPORT_DATE = re.compile(rf"date\s+of\s+report[^:]*:\s*({DATE})", re.I)
_RELEASE = re.compile(r"FOR IMMEDIATE RELEASE|PRESS RELEASE|NEWS RELEASE|BUSINESS WIRE|PR ?Newswire|GLOBE NEWSWIRE|"
                      r"Exhibit 99\.1")
# A release's headline: "<Issuer> Reports …", "<ISSUER> ANNOUNCES …" (the issuer checked against its ticker's name).
_HEADLINE = re.compile(r"^(\S+)[^\n]{0,80}?\s(?:Reports|REPORTS|Announces|ANNOUNCES)\s", re.M)
# A results release's headline, the issuer first, with or without a ticker, a period before
# "results": "Amcor reports fiscal 2023 results …", "ACME Corp. Announces Third Quarter 2022 Results".
_RESULTS_HEADLINE = re.compile(r"^([A-Z][\w&.,'’ -]{0,60}?)\s+(?:reports|announces)\s+(?:[\w,-]+\s+){0,6}?"
                               r"(?:fiscal|quarter|year|annual|full[- ]year|first|second|third|fourth|Q[1-4]|\d{4})"
                               r"(?:\s+[\w,-]+){0,4}?\s+results\b", re.I)
_TICKER = re.compile(r"([A-Z][\w&.,'’ -]{1,60}?)\s*\((?:NYSE|NASDAQ|Nasdaq|NYSE American|LSE|TSX|ASX)\s*:\s*[A-Z.]{1,6}\)")
_NAME_CUT = re.compile(rf"^.*(?:\s[-–—]\s|{DATE}\W*)")  # a dateline before the name: "YORK, March 3, 2023 - "
_DATELINE = re.compile(rf"\(\s*({DATE})\s*\)")
_ANY_DATE = re.compile(DATE)
_ACCESSION = re.compile(r"^\d{10}-\d{2}-\d{6}$")
_EDITOR_TITLE = re.compile(r"^(?:Microsoft\s+(?:Word|PowerPoint|Excel)\s*-\s*|untitled\b|document\d*$|presentation\d*$|"
                           r"powerpoint presentation$|slide \d+$)", re.I)
_FILE_SUFFIX = re.compile(r"\.(?:docx?|pptx?|xlsx?|pdf|odt|rtf|txt|indd|qxd)$", re.I)
_HASH = re.compile(r"^(?=.*\d)(?=.*[a-f])[0-9a-f]{16,}$", re.I)
_FILE_WORD = re.compile(r"[^\W\d_]+|\d+")
_QUARTER = re.compile(r"^(\d{4})([QH][1-4])$", re.I)  # 2023Q2 -> 2023, Q2
# Small capitals come out of some PDFs as a capital, a space, the rest: "MGM R ESORTS I NTERNATIONAL".
# Two such breaks in one name at least: "T ROWE PRICE" has a real initial.
_SMALL_CAPS = re.compile(r"\b([A-Z]) (?=[A-Z]{2,}\b)")


def of(first_pages: str, properties: dict[str, str], name: str = "") -> dict[str, str]:
    """The profile: any of ``organisation``, ``form``, ``period``, ``date``, ``title``, ``year``."""
    head = first_pages[:20_000]
    first = head[:FIRST_PAGE]
    out: dict[str, str] = {}
    if _SEC.search(first):
        out.update(_filing(head))
    elif (ticker := _TICKER.search(first)):
        organisation = _NAME_CUT.sub("", ticker.group(1)).strip(" ,.–-")
        if organisation and _is_release(first, organisation):
            out["organisation"] = organisation
    elif (headline := _RESULTS_HEADLINE.match(first.lstrip())) and headline.group(1)[:1].isupper():
        out["organisation"] = headline.group(1).strip(" ,.–-")
    if "date" not in out and (dated := _DATELINE.search(first) or _ANY_DATE.search(first[:1_500])):
        out["date"] = " ".join(dated.group(1 if dated.re is _DATELINE else 0).split())
    if "date" in out:
        out["year"] = _fiscal_year(out["date"]) if "fiscal" in out.get("period", "") else out["date"][-4:]
    title = meaningful_title(properties.get("title", ""), name)
    if title:
        out["title"] = title
    return out


def _is_release(first: str, issuer: str) -> bool:
    """A press release says so at its top, or leads with its issuer's headline ("Ulta Beauty
    Announces …"): a paper that mentions a ticker does neither."""
    if _RELEASE.search(first[:1_500]):
        return True
    top = "\n".join(first.splitlines()[:6])
    return any(m.group(1).lower() == issuer.split()[0].lower() for m in _HEADLINE.finditer(top))


def is_filing(first_pages: str) -> bool:
    """A filing's cover (the SEC's forms and their copies): its headings follow the forms' rules."""
    return bool(_SEC.search(first_pages[:FIRST_PAGE]) and _FORM.search(first_pages[:20_000]))


def _filing(head: str) -> dict[str, str]:
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
                out["organisation"] = _small_caps(above).strip(" ,._")
            break
    period = _PERIOD.search(head)
    if period:
        kind = " ".join(period.group(1).lower().split())
        out["period"] = f"{kind} ended {' '.join(period.group(2).split())}"
        out["date"] = " ".join(period.group(2).split())
    elif (report := _REPORT_DATE.search(head)):
        out["date"] = " ".join(report.group(1).split())
    return out


def _small_caps(line: str) -> str:
    return _SMALL_CAPS.sub(r"\1", line) if len(_SMALL_CAPS.findall(line)) >= 2 else line


def _fiscal_year(date: str) -> str:
    """The fiscal year a period ending on ``date`` is named for: its year, but a 52/53-week
    year that ends in the first days of January is the year before's (ended January 1, 2023:
    fiscal 2022)."""
    year = int(date[-4:])
    day = re.search(r"January\s+(\d{1,2})", date)
    return str(year - 1) if day and int(day.group(1)) <= 7 else str(year)


def meaningful_title(title: str, name: str = "") -> str:
    """A file's title property if it says something: not empty, not an editor's placeholder
    ("Untitled", "Microsoft Word - draft.docx"), not an accession number, not the file's name."""
    title = " ".join((title or "").split())
    if len(title) < 4 or _ACCESSION.match(title) or not re.search(r"[^\W\d_]{3}", title):
        return ""
    if _EDITOR_TITLE.match(title) or _FILE_SUFFIX.search(title):
        return ""
    if name and title.lower() in (name.lower(), PurePosixPath(name).stem.lower()):
        return ""
    return title[:200]


def file_words(name: str) -> list[str]:
    """``ACTIVISIONBLIZZARD_2019_10K.pdf`` -> ACTIVISIONBLIZZARD, 2019, 10K; ``2023Q2`` -> 2023, Q2;
    ``rapport_société_générale`` -> rapport, société, générale; a hash -> nothing."""
    stem = PurePosixPath(name).stem
    words: list[str] = []
    for token in re.split(r"[\s_./-]+", stem):
        if not token or _HASH.match(token):
            continue
        quarter = _QUARTER.match(token)
        parts = _FILE_WORD.findall(token)
        if quarter:
            words += [quarter.group(1), quarter.group(2).upper()]
        elif len(parts) == 2 and parts[0].isdigit() and len(parts[0]) <= 2:  # "10K", "8K": one word
            words.append(token)
        elif len(parts) == 2 and parts[0].isalpha() and parts[1].isdigit() and len(parts[1]) <= 2:  # "Q2", "V1"
            words.append(token)
        else:
            words.extend(parts)
    return words


def describe(profile: dict[str, str], name: str = "") -> str:
    """One line a reader recognises: ``Activision Blizzard, Inc. · Form 10-K · fiscal year ended
    December 31, 2019`` (fields as found; the title, or the file's words, when there is no issuer)."""
    who = profile.get("organisation") or profile.get("title") or " ".join(file_words(name))
    parts = [who, profile.get("form", ""), profile.get("period") or profile.get("date", "")]
    return " · ".join(p for p in parts if p)
