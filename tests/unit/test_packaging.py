"""What a user installs: the server's distribution (``pyproject.toml``), whose package list holds
every folder of code and data the checkout has, and the client ``situate`` (the client's own
distribution, ``producers/situate-client``, which the server's maps in too). The client's wheel
alone, in a fresh environment, is ``tests/integration/test_client_package.py``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import venv
import zipfile
from pathlib import Path

import producers.client

ROOT = Path(__file__).resolve().parents[2]


def _declared_packages() -> set[str]:
    return set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])


CLIENT = ROOT / "producers" / "situate-client"


def test_every_folder_that_ships_is_a_declared_package():
    folders = set()
    for top in ("workers", "producers"):
        for path in [ROOT / top, *(ROOT / top).rglob("*")]:
            if path.is_relative_to(CLIENT):  # a distribution of its own, mapped in as ``situate``
                continue
            if path.is_dir() and path.name != "__pycache__" and any(
                    f.is_file() and f.suffix != ".pyc" for f in path.iterdir()):
                folders.add(".".join(path.relative_to(ROOT).parts))
    assert folders | {"situate"} == _declared_packages()


def test_situate_exports_the_public_names():
    import situate
    import situate.langchain

    assert situate.SituateClient is producers.client.SituateClient  # 0.2's import path, kept
    assert situate.AsyncSituateClient is producers.client.AsyncSituateClient
    assert issubclass(situate.SituateError, situate.PublicError)
    assert situate.LangChainRetriever is situate.langchain.SituateRetriever
    assert all(hasattr(situate, name) for name in situate.__all__)
    server = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert situate.__version__ == server
    assert tomllib.loads((CLIENT / "pyproject.toml").read_text())["project"]["version"] == server  # one version


def test_a_built_wheel_gives_situate_to_a_fresh_environment(tmp_path):
    """The wheel, installed in a new venv that holds nothing else, answers ``from situate import
    SituateClient`` from its own copy (not this checkout); its one third-party import, httpx, is
    lent from this environment's packages (no .pth of ours is read from there)."""
    source = tmp_path / "source"  # a copy: a build writes build/ and *.egg-info where it runs
    for part in ("workers", "producers"):
        shutil.copytree(ROOT / part, source / part, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build"))
    for part in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / part, source / part)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path / "dist"), str(source)], check=True, capture_output=True, cwd=tmp_path)
    wheel = next((tmp_path / "dist").glob("situate-*.whl"))
    venv.create(tmp_path / "venv", with_pip=False)
    site = next((tmp_path / "venv" / "lib").glob("python*/site-packages"))
    with zipfile.ZipFile(wheel) as unpacked:  # what pip would lay out, without pip in the venv
        unpacked.extractall(site)
    import httpx

    lent = str(Path(httpx.__file__).parents[1])
    out = subprocess.run([str(tmp_path / "venv" / "bin" / "python"), "-c",
                          "import sys; sys.path.append(sys.argv[1]); import situate; "
                          "from situate import SituateClient; print(situate.__file__, SituateClient.__module__)", lent],
                         capture_output=True, text=True, cwd=tmp_path, env={"PATH": os.environ["PATH"]})
    assert out.returncode == 0, out.stderr
    where, module = out.stdout.split()
    assert Path(where).is_relative_to(site) and module == "situate.client"
