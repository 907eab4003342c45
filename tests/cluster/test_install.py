"""``ops/opensearch/install`` assembles a distribution once, under a lock: two callers at once (ops/up
and a test's private cluster, or two pytest processes) once left one of them running a node from a
half-copied folder ("Could not find or load main class org.opensearch.plugins.PluginCli")."""

from __future__ import annotations

import os
import subprocess

from ops.harness import ROOT

INSTALL = ROOT / "ops" / "opensearch" / "install"


def test_two_installs_at_once_both_get_a_whole_distribution(tmp_path):
    # The downloads are shared with ops/up's install (Maven's local repository): only the assembly is timed.
    runs = [subprocess.Popen([str(INSTALL), str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(2)]
    outcomes = [(run.wait(timeout=600), *run.communicate()) for run in runs]
    outcomes = [(code, out.strip(), err) for code, out, err in outcomes]
    assert all(code == 0 for code, _, _ in outcomes), [err[-2000:] for _, _, err in outcomes]
    homes = {home for _, home, _ in outcomes}
    assert len(homes) == 1
    home = homes.pop()
    java = {"OPENSEARCH_JAVA_HOME": os.environ.get("OPENSEARCH_JAVA_HOME", "/usr/lib/jvm/java-17-openjdk-amd64")}
    listed = subprocess.run([f"{home}/bin/opensearch-plugin", "list"], capture_output=True, text=True, timeout=120,
                            env={**os.environ, **java})
    assert listed.returncode == 0 and "opensearch-knn" in listed.stdout, listed.stderr[-2000:]
    assert (tmp_path / f"{home.rsplit('/', 1)[-1]}" / ".installed").is_file()
