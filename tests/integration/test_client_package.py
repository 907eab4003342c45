"""The client's own distribution, ``situate-client`` (``producers/situate-client``), as an
application installs it: its wheel built from this checkout, installed with its dependencies from
the package index into a fresh virtualenv that holds nothing else, then used against a real API
and workers. It must bring ``situate`` alone — none of the server's top-level packages, none of
its dependencies — and import in well under a second."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from ops.harness import Api

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "client-token-51c2"
# What the server needs and an application searching it must not carry.
SERVER_ONLY = {"celery", "kombu", "redis", "opensearch-py", "onnxruntime", "numpy", "pypdfium2", "boto3",
               "anthropic", "voyageai", "fastapi", "uvicorn", "flower", "tree-sitter", "matplotlib", "mcp"}

SCRIPT = """
import json, sys, time
started = time.perf_counter()
import situate
imported = time.perf_counter() - started
from situate import SituateClient
url, token, collection = sys.argv[1:4]
with SituateClient(url, token=token) as client:
    client.create_collection(collection, contextualizer="none", embedder="local")
    client.add_documents(collection, [{"id": "otters", "text": "Sea otters hold hands while they sleep."},
                                      {"id": "kelp", "text": "Kelp forests grow fastest in cold water."}])
    client.wait(collection, ["otters", "kelp"])
    hits = client.search(collection, "which animals hold hands asleep?", k=2)
print(json.dumps({"import_s": imported, "module": situate.__file__, "version": situate.__version__,
                  "top": hits[0]["doc_id"]}))
"""


@pytest.fixture(scope="module")
def client_venv(tmp_path_factory) -> Path:
    """A fresh virtualenv with the client's wheel and its dependencies from the index."""
    where = tmp_path_factory.mktemp("client-package")
    source = where / "source"  # a copy: a build writes build/ and *.egg-info where it runs
    shutil.copytree(ROOT / "producers" / "situate-client", source, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(where / "dist"), str(source)], check=True, capture_output=True)
    wheel = next((where / "dist").glob("situate_client-*.whl"))
    with zipfile.ZipFile(wheel) as built:
        tops = {name.split("/")[0] for name in built.namelist() if not name.split("/")[0].endswith(".dist-info")}
    assert tops == {"situate"}, tops
    venv.create(where / "venv", with_pip=True)
    python = where / "venv" / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(wheel)],
                   check=True, capture_output=True, text=True)
    return python


def test_the_client_installs_alone_and_searches_a_running_api(client_venv, worker, collection_name):
    listed = subprocess.run([str(client_venv), "-m", "pip", "list", "--format", "json", "--disable-pip-version-check"],
                            check=True, capture_output=True, text=True).stdout
    installed = {p["name"].lower(): p["version"] for p in json.loads(listed)}
    assert "situate-client" in installed and "httpx" in installed
    assert len(installed) <= 15, sorted(installed)
    assert not SERVER_ONLY & set(installed), SERVER_ONLY & set(installed)
    api = Api(env={"SITUATE_API_TOKEN": TOKEN})
    try:
        out = subprocess.run([str(client_venv), "-c", SCRIPT, api.url, TOKEN, collection_name], capture_output=True,
                             text=True, cwd=client_venv.parents[1], timeout=300)
    finally:
        api.stop()
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert Path(result["module"]).is_relative_to(client_venv.parents[1])  # its own copy, not this checkout
    assert result["top"] == "otters" and result["version"] == installed["situate-client"]
    assert result["import_s"] < 1.0, result
