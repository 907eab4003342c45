"""``python -m producers.web.probe [--any-status] URL``: exit 0 when ``URL`` answers 2xx within
4 s (with ``--any-status``: answers at all, for Flower, whose every page asks for its password).
A container's health check for the API (``/healthz``, ``/readyz``) and Flower without curl in
the image, in arguments with no spaces: podman 4.3's Docker API splits a health check's
arguments on spaces, which breaks ``python -c "..."``."""

from __future__ import annotations

import sys
import urllib.error
import urllib.request


def main(argv: list[str]) -> int:
    any_status = argv[:1] == ["--any-status"]
    urls = argv[1:] if any_status else argv
    if len(urls) != 1:
        print("usage: python -m producers.web.probe [--any-status] URL", file=sys.stderr)
        return 2
    try:
        with urllib.request.urlopen(urls[0], timeout=4) as reply:  # noqa: S310 - a URL the operator configured
            return 0 if 200 <= reply.status < 300 else 1
    except urllib.error.HTTPError as e:
        if any_status:
            return 0
        print(f"{urls[0]}: {e}", file=sys.stderr)
        return 1
    except (urllib.error.URLError, OSError) as e:
        print(f"{urls[0]}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
