"""The extraction child: ``python -m workers.extraction.child REQUESTS REPLIES MEMORY_MB CPU_S``.

It is started by ``sandbox`` with an empty environment and two pipes (file descriptors given on
its command line), and before it reads a single untrusted byte it gives up what it could misuse:

- **hard limits** it cannot raise again: its address space (``MEMORY_MB``), CPU seconds over its
  life (``CPU_S``; each file gets a soft limit below it), open files, and a file size of 0 (it
  writes nothing but its replies, on a pipe);
- **XML that cannot expand**: the standard library's parsers are replaced by defusedxml's (what
  openpyxl reads with), and lxml's default parser resolves no entity, loads no DTD and reaches no
  network (python-docx and python-pptx build theirs with ``resolve_entities=False``);
- **the network**, where the kernel allows a namespace of its own (Linux: as root, or through an
  unprivileged user namespace): nothing but a loopback that is down;
- **its user**: as root, it becomes ``nobody`` once the parsers are imported (when the code is
  readable by ``nobody``; it stays root otherwise, and says so).

Then it serves requests one at a time: a JSON header frame and the file's bytes in, a JSON reply
frame out, carrying the request's id (or a page of a PDF to draw: ``render``). ``isolation`` in its
first frame says what held.
"""

from __future__ import annotations

import base64
import ctypes
import ctypes.util
import json
import os
import pwd
import resource
import site
import socket
import stat
import sys
import time
from pathlib import Path
from typing import Any

from workers.errors import ExtractionError
from workers.extraction import formats, frames, render
from workers.extraction.limits import Limits

MAX_REQUEST_HEADER = 1 << 16
MAX_FILE_BYTES = (1 << 32) - 1  # the worker checks the deployment's own limit before sending
OPEN_FILES = 64
CLONE_NEWUSER, CLONE_NEWNET = 0x10000000, 0x40000000


def harden_xml() -> None:
    """No XML parser in this process expands an entity or reads a DTD or the network."""
    import defusedxml
    from lxml import etree

    defusedxml.defuse_stdlib()
    etree.set_default_parser(etree.XMLParser(resolve_entities=False, load_dtd=False, no_network=True,
                                             huge_tree=False))


def _limit(kind: int, value: int) -> None:
    resource.setrlimit(kind, (value, value))


def _own_network() -> str:
    """A network namespace of our own: "namespace" if it held, else why not."""
    libc_name = ctypes.util.find_library("c")
    if not sys.platform.startswith("linux") or not libc_name:
        return "shared (no network namespaces on this platform)"
    libc = ctypes.CDLL(libc_name, use_errno=True)
    flags = CLONE_NEWNET if os.geteuid() == 0 else CLONE_NEWUSER | CLONE_NEWNET
    if libc.unshare(flags) != 0:
        return f"shared (unshare: {os.strerror(ctypes.get_errno())})"
    return "namespace"


def _readable_by_others(path: Path) -> bool:
    """Whether ``nobody`` can reach ``path`` (every folder above it searchable, itself readable)."""
    try:
        for folder in [path, *path.parents]:
            mode = folder.stat().st_mode
            if not mode & stat.S_IXOTH or (folder == path and not mode & stat.S_IROTH):
                return False
    except OSError:
        return False
    return True


def _drop_to_nobody() -> str:
    if os.geteuid() != 0:
        return f"uid {os.geteuid()} (not root: stays the worker's user)"
    # Where parsers read files lazily (their data files, modules not imported yet): the installed
    # packages and ours. The standard library's lazily-loaded modules were imported by ``preload``.
    code = [Path(p) for p in {*site.getsitepackages(), formats.PACKAGE_ROOT} if Path(p).is_dir()]
    unreadable = [str(p) for p in code if not _readable_by_others(p)]
    if unreadable:
        return f"root (nobody could not read {unreadable[0]})"
    nobody = pwd.getpwnam("nobody")
    os.setgroups([])
    os.setgid(nobody.pw_gid)
    os.setuid(nobody.pw_uid)
    return "nobody"


def harden(memory_mb: int, cpu_s: int) -> dict[str, Any]:
    """Everything the module's docstring lists, in an order that works: imports first (files to
    read), the network and the user next (root needed), the limits last."""
    _limit(resource.RLIMIT_CORE, 0)
    harden_xml()  # first: a parser module imported after it takes the defused functions by name
    formats.preload()
    network = _own_network()
    user = _drop_to_nobody()
    _limit(resource.RLIMIT_AS, memory_mb * 1024 * 1024)
    _limit(resource.RLIMIT_CPU, cpu_s)
    _limit(resource.RLIMIT_NOFILE, OPEN_FILES)
    _limit(resource.RLIMIT_FSIZE, 0)
    return {"network": network, "user": user, "environment": sorted(os.environ)}


def probe() -> dict[str, Any]:
    """What this process holds and may do, for the worker's log and the tests."""
    limits = {name: list(resource.getrlimit(getattr(resource, name)))
              for name in ("RLIMIT_AS", "RLIMIT_CPU", "RLIMIT_NOFILE", "RLIMIT_FSIZE", "RLIMIT_CORE")}
    return {"environment": sorted(os.environ), "uid": os.getuid(), "euid": os.geteuid(), "limits": limits,
            "interfaces": [name for _, name in socket.if_nameindex()]}


def answer(header: dict[str, Any], data: bytes) -> dict[str, Any]:
    if header.get("probe"):
        return {"probe": probe()}
    limits = Limits(**header["limits"])
    soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
    # Until the file says how many pages it has, its wall-clock budget bounds its CPU too.
    resource.setrlimit(resource.RLIMIT_CPU, (min(hard, int(time.process_time() + limits.timeout_s) + 2), hard))
    if "render" in header:  # a page to draw (the search page's citations), not a file to read
        asked = header["render"]
        try:
            png, found = render.page_png(data, int(asked["page"]), int(asked["dpi"]), [str(x) for x in asked["lines"]])
        except ExtractionError as e:
            return {"error": str(e)}
        return {"png": base64.b64encode(png).decode("ascii"), "found": found}
    name = str(header.get("name") or "the file")
    try:
        return {"extracted": formats.extract(data, str(header["media_type"]), limits, name).to_json()}
    except ExtractionError as e:
        return {"error": str(e)}
    except MemoryError:
        return {"error": f"the file needs more than {limits.memory_mb:,} MB to be read (SITUATE_EXTRACT_MEMORY_MB)"}
    except RecursionError:
        return {"error": "the file is nested too deeply to be read"}
    except Exception as e:  # noqa: BLE001 - any parser's failure on any file: this file fails, with its kind
        return {"error": f"could not read the file ({type(e).__name__}: {str(e)[:200]})"}


def serve(requests: int, replies: int, memory_mb: int, cpu_s: int) -> None:
    isolation = harden(memory_mb, cpu_s)
    frames.write(replies, json.dumps({"ready": True, "isolation": isolation}).encode())
    while True:
        try:
            header = json.loads(frames.read(requests, MAX_REQUEST_HEADER))
            data = bytes(frames.read(requests, MAX_FILE_BYTES))
        except EOFError:
            return  # the worker closed the pipe: done
        reply = {**answer(header, data), "id": header.get("id"), "cpu_s": round(time.process_time(), 3)}
        # UTF-8 as is (an emoji is 4 bytes, not a 12-byte escape); a lone surrogate a parser let
        # through becomes U+FFFD rather than an unencodable reply.
        frames.write(replies, json.dumps(reply, ensure_ascii=False).encode("utf-8", "replace"))


if __name__ == "__main__":
    serve(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
