"""Contextualizers of one's own, from modules named in ``SITUATE_PLUGINS``: every thread of a
process that asks for a plugin's name finds it, and a plugin that cannot be imported says so on
every call instead of leaving a process that believes it loaded."""

from __future__ import annotations

import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from workers.contextualizers import registry
from workers.errors import PluginError
from workers.settings import override


@pytest.fixture
def plugin_folder(tmp_path: Path) -> Iterator[Path]:
    sys.path.insert(0, str(tmp_path))
    saved = dict(registry.PROVIDERS), registry._plugins_loaded
    registry._plugins_loaded = False
    yield tmp_path
    sys.path.remove(str(tmp_path))
    registry.PROVIDERS.clear()
    registry.PROVIDERS.update(saved[0])
    registry._plugins_loaded = saved[1]
    override(plugins="")


def test_threads_asking_while_a_slow_plugin_imports_all_find_its_name(plugin_folder: Path) -> None:
    """The cause of "unknown contextualizer" in workers: the loader marked plugins loaded before
    importing them, so a second caller during the import went on without the registration."""
    (plugin_folder / "slow_plugin.py").write_text(textwrap.dedent("""
        import time
        from workers.contextualizers import registry
        from workers.contextualizers.offline import NoContext
        time.sleep(0.5)  # a plugin that imports a heavy library
        registry.register("slow-one", lambda config: NoContext())
    """))
    override(plugins="slow_plugin")
    errors: list[BaseException] = []

    def ask() -> None:
        try:
            registry.check_name("slow-one")
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_a_plugin_that_cannot_be_imported_fails_every_call_with_its_cause(plugin_folder: Path) -> None:
    (plugin_folder / "broken_plugin.py").write_text("import no_such_library_here\n")
    override(plugins="broken_plugin")
    for _ in range(2):  # the second call too: not "unknown contextualizer" from a registry marked loaded
        with pytest.raises(PluginError, match="broken_plugin.*no_such_library_here"):
            registry.check_name("keywords")
    assert registry._plugins_loaded is False
