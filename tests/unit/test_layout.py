"""The shape of the code: no import cycles (imports inside functions included), imports that only
go down the layers ARCHITECTURE.md draws, producers that send without the worker's machinery, no
module named like the standard library's, package ``__init__`` files that import nothing, a read
path that never pulls in Celery, and modules of a size one can read."""

from __future__ import annotations

import ast
import io
import re
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("workers", "producers")
MAX_LINES = 450


# The layers, bottom up (ARCHITECTURE.md, "The tree"): a module imports from its own layer or
# those below it. A module belongs to the layer of its longest matching prefix.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    # the Python client, its own distribution (producers/situate-client/): nothing of the server
    ("client", ("situate",)),
    ("foundation", ("workers.errors", "workers.keys", "workers.settings", "workers.logs")),
    ("services", ("workers.connections", "workers.models", "workers.allowlist",
                  "workers.metrics", "workers.faults")),
    ("parts", ("workers.embedding", "workers.extraction", "workers.chunks", "workers.documents")),
    ("storage", ("workers.storage",)),
    ("contextualizers", ("workers.contextualizers", "workers.lifecycle")),
    # sending, and what producers may ask of the pipeline by sending (a reindex's start and switch)
    ("sending", ("workers.pipeline.routing", "workers.pipeline.sending", "workers.pipeline.fair",
                 "workers.pipeline.rebuild")),
    ("worker", ("workers.pipeline",)),
    ("read path", ("producers.retrieval",)),
    ("producers", ("producers",)),
    ("entry points", ("producers.web.api", "producers.web.mcp_server", "producers.cli", "producers.client")),
]
# Above the worker in the list, yet never importing it: producers send by name (``sending``).
NOT_ABOVE_THE_WORKER = ("read path", "producers", "entry points")
# The public face (the client, ``situate``): the one package whose ``__init__`` is its list of names.
PUBLIC = "situate"
CLIENT = ROOT / "producers" / "situate-client"
# The one way up, on purpose: ``situate worker`` and ``situate flower`` run the worker's own app.
ALLOWED = {("producers.cli.processes", "workers.pipeline.app")}


def project_modules() -> dict[str, Path]:
    modules = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if path.is_relative_to(CLIENT):
                continue
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            modules[name] = path
    for path in (CLIENT / "situate").rglob("*.py"):  # installed as ``situate``
        parts = path.relative_to(CLIENT).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    for path in (ROOT / "ops").glob("*.py"):  # a package of scripts and helpers, above everything
        modules["ops" if path.stem == "__init__" else f"ops.{path.stem}"] = path
    return modules


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Project modules that ``name`` imports anywhere in its body, functions included."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def resolve(target: str) -> str | None:
        while target and target not in modules:
            target = target.rpartition(".")[0]
        return target or None

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # ``from a.b import c``: c is a module of a.b, or a name inside a.b.
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        else:
            continue
        for target in targets:
            resolved = resolve(target)
            if resolved and resolved != name:
                found.add(resolved)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = project_modules()
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = [0]
    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles_among_project_modules():
    graph = import_graph()
    assert len(graph) > 40 and graph["workers.pipeline.tasks"], "the graph should cover the project"
    assert cycles(graph) == []


def layer_of(module: str) -> int:
    best, found = -1, -1
    for rank, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, found = len(prefix), rank
    return found


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every import that goes up a layer, or from the producers' side into the worker's."""
    worker = next(rank for rank, (name, _) in enumerate(LAYERS) if name == "worker")
    apart = {rank for rank, (name, _) in enumerate(LAYERS) if name in NOT_ABOVE_THE_WORKER}
    found = []
    for module, targets in graph.items():
        here = layer_of(module)
        if here < 0:  # ops/ scripts and benches: above everything
            continue
        for target in targets:
            there = layer_of(target)
            if (module, target) in ALLOWED:
                continue
            if there > here or (there == worker and here in apart):
                found.append(f"{module} ({LAYERS[here][0]}) imports {target} ({LAYERS[there][0]})")
    return sorted(found)


def test_every_module_has_a_layer():
    # (the package ``workers`` itself is its map, importing nothing)
    assert [m for m in project_modules() if m.startswith((*PACKAGES, "situate")) and m != "workers"
            and layer_of(m) < 0] == []


def test_the_client_installs_alone():
    """The client's distribution holds ``situate`` only: it may import nothing of the server."""
    graph = import_graph()
    client = {m: targets for m, targets in graph.items() if m == "situate" or m.startswith("situate.")}
    assert len(client) >= 5
    assert {m: sorted(t for t in targets if not t.startswith("situate")) for m, targets in client.items()} == \
        {m: [] for m in client}


def test_the_direction_finder_finds_an_upward_import():
    planted = {"workers.storage.states": {"workers.pipeline.tasks"}, "producers.ingest.submit": {"workers.pipeline.guard"},
               "workers.pipeline.tasks": {"workers.storage.states"}}
    assert upward_imports(planted) == [
        "producers.ingest.submit (producers) imports workers.pipeline.guard (worker)",
        "workers.storage.states (storage) imports workers.pipeline.tasks (worker)"]


def test_imports_only_go_down_the_layers():
    assert upward_imports(import_graph()) == []


def test_producers_send_without_the_workers_machinery():
    """The API, the MCP server and the client reach Celery only through ``sending``: no
    bootsteps, no worker state, no task module; ``/metrics`` and the fleet's view no Celery at all."""
    graph = import_graph()
    modules = project_modules()

    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            module = todo.pop()
            if module not in seen:
                seen.add(module)
                todo.extend(graph[module])
        return seen

    def celery_imports(module: str) -> set[str]:
        tree = ast.parse(modules[module].read_text())
        names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        names |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        return {n for n in names if n.split(".")[0] in ("celery", "kombu", "billiard")}

    api = reach("producers.web.api")
    assert "workers.pipeline.sending" in api, "the API sends documents"
    assert sorted(m for m in api if m.startswith("workers.pipeline")) == [
        "workers.pipeline.fair", "workers.pipeline.rebuild", "workers.pipeline.routing", "workers.pipeline.sending"]
    assert {n for m in api for n in celery_imports(m)} == {"celery", "celery.signals", "kombu.transport"}
    for fleet_view in ("producers.web.prometheus", "producers.web.fleet"):
        assert not {n for m in reach(fleet_view) for n in celery_imports(m)}, fleet_view


def test_no_module_is_named_like_a_standard_library_module():
    clashes = [name for name in project_modules() if name.rpartition(".")[2] in sys.stdlib_module_names]
    assert clashes == []


def test_package_inits_import_nothing_of_the_project():
    """A package's ``__init__`` is its map, in words: importing one module of a package then
    never drags the others (nor a cycle) in through the package."""
    modules = project_modules()
    for name, path in modules.items():
        if path.name == "__init__.py":
            assert name == PUBLIC or imports_of(name, path, modules) == set(), name
            assert ast.get_docstring(ast.parse(path.read_text())), f"{name} should say what is where"


def test_the_read_path_never_imports_celery():
    graph = import_graph()
    reach, todo = set(), [m for m in graph if m.startswith("producers.retrieval")]
    while todo:
        module = todo.pop()
        if module not in reach:
            reach.add(module)
            todo.extend(graph[module])
    modules = project_modules()
    for module in reach:
        tree = ast.parse(modules[module].read_text())
        names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        names |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert not any(n == "celery" or n.startswith("celery.") for n in names), module
        assert not module.startswith("workers.pipeline"), f"the read path reaches {module}"


def test_every_module_says_why_it_exists_and_fits_in_an_afternoon():
    for name, path in project_modules().items():
        text = path.read_text()
        assert ast.get_docstring(ast.parse(text)), f"{name} has no docstring"
        assert len(text.splitlines()) <= MAX_LINES, f"{name} has {len(text.splitlines())} lines"


# Where Redis is called: storage/, the clients themselves, and the metrics every layer counts
# into (below storage on purpose: a provider fault or an embedder counts there).
REDIS_CALLERS = ("workers.storage", "workers.connections", "workers.metrics")
REDIS_HANDLES = {"redis_client", "redis_bytes_client", "script", "scripts"}


def redis_calls(path: Path) -> list[str]:
    """What in a module reaches Redis: a client or a Lua script taken, or redis-py imported for
    more than its exceptions."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module in ("workers.connections", "workers.storage", "workers.storage.scripts"):
                found += [a.name for a in node.names if a.name in REDIS_HANDLES]
            elif (node.module == "redis" or node.module.startswith("redis.")) and node.module != "redis.exceptions":
                found.append(node.module)
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name == "redis" or a.name.startswith("redis.")]
    return found


def test_the_redis_finder_finds_a_client():
    planted = ROOT / "tests" / "unit" / "__init__.py"
    assert redis_calls(planted) == []
    assert redis_calls(ROOT / "workers" / "storage" / "states.py"), "states.py takes a client: the finder must see it"


def test_no_module_outside_storage_calls_redis():
    outside = {name: calls for name, path in project_modules().items()
               if not name.startswith(REDIS_CALLERS) and name.startswith(PACKAGES) and (calls := redis_calls(path))}
    assert outside == {}


# A measured figure lives with its benchmark's result (docs/benchmarks.md), never in code: a
# figure in a docstring is stale at the next run. What a comment may not say: a date, a metric
# with its value, a rate, or "measured" with a number in the same sentence.
FIGURES = re.compile(r"\b20\d\d-\d\d-\d\d\b|(?i:\b(?:pass|page|doc|recall|mrr)@\d+[^.\n]{0,12}?\d+\.\d)"
                     r"|(?i:\d\s*(?:chunks|pages|passages|queries|documents)(?:/s| per second| a second))"
                     r"|(?i:\bmeasured\b[^.\n]*?\d)")


def prose_of(path: Path) -> list[tuple[int, str]]:
    """A module's comments and docstrings, with their line numbers."""
    text = path.read_text()
    found = [(t.start[0], t.string) for t in tokenize.generate_tokens(io.StringIO(text).readline)
             if t.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                found.append((getattr(node, "lineno", 1), doc))
    return found


def test_the_figure_finder_finds_a_figure():
    assert FIGURES.search("Measured on 37 filings: about 170 pages/s on one core")
    assert FIGURES.search("hybrid page@10 64.1 against 67.2") and FIGURES.search("read 2026-11-30")
    assert not FIGURES.search("page@k of hybrid search, at 500 candidates (ops/bench corpora)")


def test_no_measured_figure_or_date_in_a_comment_or_docstring():
    found = [f"{name}:{line}: {FIGURES.search(text).group()!r}"  # type: ignore[union-attr]
             for name, path in project_modules().items() if name.startswith((*PACKAGES, "situate"))
             for line, text in prose_of(path) if FIGURES.search(text)]
    assert found == []
