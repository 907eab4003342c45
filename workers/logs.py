"""Logs: one JSON object per line, carrying the document it is about, never a secret.

Every line a worker writes while a stage runs carries the task id, collection, doc_id and
version (bound when the task starts: ``bind``), so ``grep`` or any log store follows one
document's life across stages and workers. Two things are removed from every line before it
is written: the values of the secrets this process holds (API keys, tokens, passwords in the
environment) and credentials inside URLs (``scheme://user:password@host``).
``SITUATE_LOG_FORMAT=text`` gives the usual human lines instead of JSON.
"""

from __future__ import annotations

import contextvars
import json
import logging
import re
import sys
import time
from typing import Any

from workers.settings import get_credentials, get_settings

_context: contextvars.ContextVar[dict[str, Any]] = contextvars.ContextVar("situate_log_context")

_URL_CREDENTIALS = re.compile(r"(\w+://)[^/\s:@]*:[^/\s@]+@")


def bind(**fields: Any) -> contextvars.Token[dict[str, Any]]:
    """Add fields to every line logged from here on (in this thread or task); ``unbind`` after."""
    return _context.set({**_context.get({}), **{k: v for k, v in fields.items() if v is not None}})


def unbind(token: contextvars.Token[dict[str, Any]]) -> None:
    _context.reset(token)


def redact(text: str) -> str:
    for value in get_credentials().secrets():
        text = text.replace(value, "***")
    return _URL_CREDENTIALS.sub(r"\1***@", text)


def mask_url(url: str) -> str:
    """A URL fit to print: its credentials replaced."""
    return _URL_CREDENTIALS.sub(r"\1***@", url)


class Redact(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = redact(record.getMessage())
        record.args = ()
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {"ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
                                + f".{int(record.msecs):03d}Z",
                                "level": record.levelname.lower(), "logger": record.name, "process": record.processName}
        message = record.getMessage()
        try:  # our usage lines are JSON already: merge, don't nest a string
            parsed = json.loads(message) if message.startswith("{") else None
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            line.update(parsed)
        else:
            line["msg"] = message
        for key, value in _context.get({}).items():
            line.setdefault(key, value)
        if record.exc_info:
            line["exc"] = redact(self.formatException(record.exc_info))
        return json.dumps(line, default=str)


def configure(level: str = "INFO", fmt: str | None = None) -> None:
    """Root logging for a situate process: JSON (or text) on stderr, secrets redacted."""
    fmt = fmt or get_settings().log_format
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else
                         logging.Formatter("[%(asctime)s: %(levelname)s/%(processName)s] %(message)s"))
    handler.addFilter(Redact())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("httpx", "httpx2", "openai", "opensearch", "urllib3", "botocore"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
