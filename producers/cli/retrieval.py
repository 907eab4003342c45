"""``situate search``, ``situate eval`` and ``situate tune``: the read path, from the command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.table import Table

from producers.cli.common import err, existing, fail, out, safe

if TYPE_CHECKING:
    from producers.evaluation.evaluate import LabelledQuery
    from workers.storage.catalog import CollectionConfig


CANDIDATES_HELP = "each side's candidates (default: 150)"


def search(
    query: str = typer.Argument(...),
    collection: str = typer.Option(..., "--collection", "-c"),
    k: int = typer.Option(10, "--k", min=1, max=1000),
    mode: str = typer.Option("hybrid", help="hybrid | bm25 | dense"),
    filters: list[str] = typer.Option([], "--filter", help="metadata KEY=VALUE (repeatable)"),
    fusion: str | None = typer.Option(None, help="rrf | weighted (default: the collection's)"),
    context_weight: float | None = typer.Option(None, help="BM25 weight of the context field"),
    dense_weight: float | None = typer.Option(None, help="weight of the dense side in fusion"),
    rrf_k: int | None = typer.Option(None, "--rrf-k", min=1, max=1000, help="RRF's k (lower: sharper)"),
    reranker: str | None = typer.Option(None, help="none | voyage | bedrock | cohere | onnx"),
    candidates: int | None = typer.Option(None, min=1, max=1000, help=CANDIDATES_HELP),
    json_output: bool = typer.Option(False, "--json"),
) -> None:
    """Hybrid search (BM25 + k-NN, fused, optionally reranked) over a collection."""
    import time

    from producers.retrieval import search as retrieval
    from workers.embedding import registry as embedders

    config = existing(collection)
    embedders.get(config.embedder, config.embed_model)  # load the model before the clock starts
    parsed: dict[str, Any] = {}
    for f in filters:
        key, _, value = f.partition("=")
        parsed.setdefault(key, []).append(value)
    flat = {k_: v[0] if len(v) == 1 else v for k_, v in parsed.items()}
    started = time.perf_counter()
    options = retrieval.SearchOptions(mode=mode, fusion=fusion, context_weight=context_weight,
                                      dense_weight=dense_weight, reranker=reranker, rrf_k=rrf_k,
                                      candidates=candidates)
    try:
        hits = retrieval.search(config, query, k=k, filters=flat, options=options)
    except ValueError as e:
        fail(str(e))
    took_ms = (time.perf_counter() - started) * 1000
    if json_output:
        print(json.dumps({"took_ms": round(took_ms, 1), "hits": [
            {"doc_id": h.doc_id, "chunk": h.chunk, "score": h.score, "text": h.text, "context": h.context,
             "metadata": h.metadata, "pages": h.pages, "section": h.section, "title": h.title} for h in hits]}))
        return
    for rank, h in enumerate(hits, start=1):
        out.print(f"[bold]{rank:>2}.[/bold] {safe(citation(h))} #{h.chunk}  score={h.score:.4f}", highlight=False)
        if h.context:
            out.print(f"    [cyan]{safe(' '.join(h.context.split())[:160])}[/cyan]", highlight=False)
        snippet = " ".join(h.text.split())[:160]
        out.print(f"    {safe(snippet)}", highlight=False)
    out.print(f"[dim]{len(hits)} hits in {took_ms:.0f} ms[/dim]")


def _configurations(spec: str, names: list[str]) -> list[tuple[str, str, tuple[str, bool]]]:
    """``hybrid,bm25,dense,hybrid+rerank`` x collections -> (label, collection, (mode, rerank))."""
    from producers.retrieval.search import MODES

    out = []
    for name in names:
        for item in [x.strip() for x in spec.split(",") if x.strip()]:
            mode, _, rerank = item.partition("+")
            if mode not in MODES or rerank not in ("", "rerank"):
                fail(f"unknown configuration {item!r}: a mode ({', '.join(MODES)}), optionally +rerank")
            label = item if len(names) == 1 else f"{name}:{item}"
            out.append((label, name, (mode, bool(rerank))))
    return out


def _evaluate_collection(labelled: list[LabelledQuery], name: str, config: CollectionConfig, spec: str, reranker: str,
                         overrides: dict[str, Any],
                         label_prefix: str = "") -> list[Any]:
    """Each configuration of ``spec`` on one collection, labelled ``<prefix>mode``."""
    from producers.evaluation.evaluate import Retrieved, evaluate
    from producers.retrieval import search as retrieval

    results = []
    for label, _, (mode, rerank) in _configurations(spec, [name]):
        if rerank and reranker == "none":
            fail("hybrid+rerank needs a reranker: --reranker or SITUATE_RERANKER")
        options = retrieval.SearchOptions(mode=mode, reranker=reranker if rerank else "none", **overrides)

        def run(q: str, k: int, config: CollectionConfig = config,
                options: retrieval.SearchOptions = options) -> list[Retrieved]:
            return [Retrieved(h.doc_id, h.chunk, h.text, h.pages) for h in retrieval.search(config, q, k=k, options=options)]
        try:
            results.append(evaluate(labelled, run, label_prefix + label))
        except ValueError as e:
            fail(str(e))
    return results


def eval_cmd(
    names: list[str] = typer.Option([], "--collection", "-c",
                                    help="Repeat to compare collections (e.g. plain, then contextual)."),
    queries: Path | None = typer.Option(None, "--queries", exists=True, dir_okay=False),
    fmt: str = typer.Option("auto", "--format", help="auto (each line's keys decide) | cookbook | jsonl"),
    suites_file: Path | None = typer.Option(
        None, "--suites", exists=True, dir_okay=False,
        help="several corpora at once (YAML: name -> queries, format, collections by role); a table per "
             "corpus and a summary"),
    configs: str | None = typer.Option(
        None, help="comma-separated: dense, bm25, hybrid, hybrid+rerank (default: dense,bm25,hybrid "
                   "and hybrid+rerank when a reranker is set)"),
    reranker: str | None = typer.Option(None, help="reranker for +rerank configurations (default: SITUATE_RERANKER)"),
    fusion: str | None = typer.Option(None, help="override every collection's fusion"),
    context_weight: float | None = typer.Option(None, help="override the BM25 weight of contexts"),
    dense_weight: float | None = typer.Option(None, help="override the dense weight"),
    rrf_k: int | None = typer.Option(None, "--rrf-k", min=1, max=1000, help="override RRF's k"),
    candidates: int | None = typer.Option(None, min=1, max=1000, help=CANDIDATES_HELP),
    compare: str | None = typer.Option(
        None, help="BEFORE,AFTER configuration labels whose flipped queries are listed "
                   "(default: the first collection's hybrid against the last one's, or dense against hybrid)"),
    report: Path | None = typer.Option(None, help="write report.md and pass_at_k.png into this folder"),
    json_output: bool = typer.Option(False, "--json"),
) -> None:
    """Pass@k, Recall@k (k = 5, 10, 20) and MRR@10 of each search configuration, side by side;
    the queries that flipped between two of them; optionally a markdown report and a chart.
    With --suites, on several corpora at once."""
    from producers.evaluation.evaluate import load_queries
    from workers.errors import QueryFileError
    from workers.settings import get_settings

    chosen_reranker = reranker or get_settings().reranker
    spec = configs or ("dense,bm25,hybrid" + (",hybrid+rerank" if chosen_reranker != "none" else ""))
    overrides = {"fusion": fusion, "context_weight": context_weight, "dense_weight": dense_weight, "rrf_k": rrf_k,
                 "candidates": candidates}
    if suites_file:
        if names or queries:
            fail("--suites names its collections and queries itself: no --collection/--queries with it")
        return _eval_suites(suites_file, spec, chosen_reranker, overrides, report, json_output)
    if not names or not queries:
        fail("name the collections (--collection) and the labelled queries (--queries), or give --suites")
    loaded = {name: existing(name) for name in names}
    try:
        labelled = load_queries(queries, fmt)
    except QueryFileError as e:
        fail(str(e))
    results = []
    for name, config in loaded.items():
        results += _evaluate_collection(labelled, name, config, spec, chosen_reranker, overrides,
                                        f"{name}:" if len(names) > 1 else "")
    _print_results(results, loaded, names, labelled, queries.name, compare, report, json_output, chosen_reranker,
                   overrides)


def _print_results(results: list[Any], loaded: dict[str, Any], names: list[str], labelled: Any, source: str,
                   compare: str | None, report: Path | None, json_output: bool, chosen_reranker: str,
                   overrides: dict[str, Any]) -> None:
    from producers.evaluation import significance
    from producers.evaluation.evaluate import KS, MRR_K, chart_png, flips, markdown_report

    by_label = {r.label: r for r in results}
    if compare:
        before, _, after = compare.partition(",")
        if before not in by_label or after not in by_label:
            fail(f"--compare names two of: {', '.join(by_label)}")
        pair = (by_label[before], by_label[after])
    elif len(names) > 1 and f"{names[0]}:hybrid" in by_label and f"{names[-1]}:hybrid" in by_label:
        pair = (by_label[f"{names[0]}:hybrid"], by_label[f"{names[-1]}:hybrid"])
    elif len(results) > 1:
        pair = (results[0], results[-1])
    else:
        pair = None
    described = [describe(n, c, overrides) for n, c in loaded.items()]
    title = f"Retrieval on {source}: {len(labelled)} queries"
    if report:
        report.mkdir(parents=True, exist_ok=True)
        drawn = chart_png(results, report / "pass_at_k.png", title)
        if not drawn:
            err.print("no chart in the report: it needs matplotlib (pip install 'situate[report]')")
        notes = [f"- {d}" for d in described] + [f"- reranker: `{chosen_reranker}`"]
        (report / "report.md").write_text(markdown_report(results, pair, title, notes, "pass_at_k.png" if drawn else None),
                                          encoding="utf-8")
    differences = significance.compare(pair[0].per_query, pair[1].per_query) if pair else {}
    if json_output:
        payload: dict[str, Any] = {"results": [r.summary() for r in results]}
        if pair:
            gained, lost = flips(*pair)
            payload["flips"] = {"before": pair[0].label, "after": pair[1].label,
                                "gained": [f.__dict__ for f in gained], "lost": [f.__dict__ for f in lost]}
            payload["differences"] = {subset: [d.to_json() for d in ds] for subset, ds in differences.items()}
        print(json.dumps(payload))
        return
    paged = any(r.pages for r in results)  # page labels: FinanceBench's page@k and doc@k first
    table = Table("configuration", *([f"page@{k}" for k in KS] + [f"doc@{k}" for k in KS] if paged else []),
                  *[f"Pass@{k}" for k in KS], *[f"Recall@{k}" for k in KS], f"MRR@{MRR_K}", "p50 ms", title=title)
    for r in results:
        table.add_row(safe(r.label), *([f"{r.hit_at[k]:.2f}" for k in KS] + [f"{r.doc_at[k]:.2f}" for k in KS]
                                       if paged else []),
                      *[f"{r.pass_at[k]:.2f}" for k in KS], *[f"{r.recall_at[k]:.2f}" for k in KS],
                      f"{r.mrr:.3f}", f"{r.latency_ms_p50:.0f}")
    out.print(table, width=max(out.width, 150))  # wide enough for its columns, even in a log
    _print_groups(results)
    for d in described:
        out.print(f"[dim]{safe(d)}[/dim]", highlight=False)
    if pair:
        gained, lost = flips(*pair)
        out.print(f"{pair[0].label} -> {pair[1].label}: {len(gained)} queries gained at Pass@10, {len(lost)} lost"
                  + (f" (details in {report / 'report.md'})" if report else ""))
        for f in (gained[:3] + lost[:3]):
            out.print(f"  {'+' if f.after > f.before else '-'} {safe(f.query[:100])}  ({f.before:.2f} -> {f.after:.2f})",
                      highlight=False)
        print_differences(pair[0].label, pair[1].label, differences)
    if report:
        out.print(f"report: {report / 'report.md'}, chart: {report / 'pass_at_k.png'}")


def print_differences(before: str, after: str, differences: dict[str, list[Any]]) -> None:
    """Each metric's paired difference with its 95% interval, clustered by document; the questions
    a person labelled and the generated ones apart when both are there (``significance``)."""
    for subset, found in differences.items():
        who = {"all": "all questions", "person": "questions a person labelled",
               "generated": "questions a model generated"}[subset]
        table = Table("metric", before, after, "difference", "95% interval", "noise?", "documents (questions) needed",
                      title=f"{safe(before)} -> {safe(after)}, {who} (paired, clustered by document)")
        for d in found:
            table.add_row(d.metric, f"{d.before:.2f}", f"{d.after:.2f}", f"{d.difference:+.2f}",
                          "-" if d.too_few_documents else f"{d.low:+.2f} to {d.high:+.2f}",
                          "too few documents" if d.too_few_documents else
                          "within the noise" if d.within_noise else "more than noise",
                          "-" if d.documents_needed is None else f"{d.documents_needed:,} ({d.questions_needed:,})")
        out.print(table, width=max(out.width, 150))
        headline = next((d for d in found if d.metric in ("Pass@10", "page@10")), found[0])
        out.print(headline.sentence(), highlight=False)


def _print_groups(results: list[Any], k: int = 10) -> None:
    """The headline at ``k`` per group of queries (``doc_type``…), when they carry one."""
    from producers.evaluation.evaluate import group_rows

    rows = group_rows(results, k)
    if not rows:
        return
    metric = "page" if any(r.pages for r in results) else "Pass"
    table = Table(*[safe(c) for c in rows[0]], title=f"{metric}@{k} per group of queries")
    for row in rows:
        table.add_row(*[safe(v) for v in row.values()])
    out.print(table, width=max(out.width, 150))


def citation(hit: Any) -> str:
    """Where a hit is: ``3M_2018_10K.pdf p. 60 · Item 8 › Cash flows`` (pages and section when known)."""
    from situate.citations import citation as where

    return where(hit.doc_id, hit.pages, hit.section)


def describe(name: str, c: CollectionConfig, overrides: dict[str, Any]) -> str:
    from producers.retrieval.search import SearchOptions

    r = SearchOptions(**{k: v for k, v in overrides.items() if v is not None}).resolved(c)
    auto = " (auto: by the collection's share of code)" if overrides.get("dense_weight") is None \
        and c.dense_weight is None else ""
    k = f", k={r.rrf_k}" if r.fusion == "rrf" else ""
    return (f"{name}: contextualizer `{c.contextualizer}`{f' ({c.model})' if c.model else ''}, embedder "
            f"`{c.embedder}`, language {c.language}, fusion `{r.fusion}`{k}, dense weight {r.dense_weight}{auto}, "
            f"context weight {r.context_weight}, {r.candidates} candidates a side")


def _eval_suites(path: Path, spec: str, chosen_reranker: str, overrides: dict[str, Any], report: Path | None,
                 json_output: bool) -> None:
    from producers.evaluation import suites
    from producers.evaluation.evaluate import KS
    from workers.errors import QueryFileError

    try:
        loaded_suites = suites.load_suites(path)
    except QueryFileError as e:
        fail(str(e))
    configs = {c: existing(c) for s in loaded_suites for c in s.collections.values()}
    suites.run(loaded_suites, lambda suite, role, collection: _evaluate_collection(
        suite.queries, collection, configs[collection], spec, chosen_reranker, overrides, f"{role}:"))
    rows = suites.summary(loaded_suites)
    title = f"Retrieval on {len(loaded_suites)} corpora"
    if report:
        report.mkdir(parents=True, exist_ok=True)
        text = suites.markdown(loaded_suites, title) + "\n" + "\n".join(
            f"- {describe(c, config, overrides)}" for c, config in configs.items()) + "\n"
        (report / "report.md").write_text(text, encoding="utf-8")
    if json_output:
        print(json.dumps({"suites": {s.name: [r.summary() for r in s.results] for s in loaded_suites},
                          "summary": rows}))
        return
    for s in loaded_suites:
        paged = any(r.pages for r in s.results)
        table = Table("configuration", *([f"page@{k}" for k in KS] + [f"doc@{k}" for k in KS] if paged else []),
                      *[f"Pass@{k}" for k in KS], "MRR@10", title=f"{s.name}: {len(s.queries)} queries")
        for r in s.results:
            table.add_row(safe(r.label), *([f"{r.hit_at[k]:.2f}" for k in KS] + [f"{r.doc_at[k]:.2f}" for k in KS]
                                           if paged else []), *[f"{r.pass_at[k]:.2f}" for k in KS], f"{r.mrr:.3f}")
        out.print(table, width=max(out.width, 120))
        _print_groups(s.results)
        for before, after, found in suites.differences(s):
            print_differences(before, after, found)
    if rows:
        table = Table(title="summary: Pass@10 per corpus, mean Pass@k over corpora")
        for name in rows[0]:
            table.add_column(name, no_wrap=True)
        for row in rows:
            table.add_row(*[str(v) for v in row.values()])
        out.print(table, width=max(out.width, 200))
    for c, config in configs.items():
        out.print(f"[dim]{safe(describe(c, config, overrides))}[/dim]", highlight=False)


def tune(
    collection: str = typer.Option(..., "--collection", "-c"),
    queries: Path = typer.Option(..., "--queries", exists=True, dir_okay=False),
    fmt: str = typer.Option("auto", "--format", help="auto (each line's keys decide) | cookbook | jsonl"),
    folds: int = typer.Option(5, min=2, max=20, help="cross-validation folds"),
    reranker: str | None = typer.Option(None, "--reranker",
                                           help="also try each setting reranked by this (none | voyage | bedrock | "
                                                "cohere | onnx); default: the collection's or the server's reranker"),
    apply: bool = typer.Option(False, "--apply", help="store the winner as the collection's search defaults"),
    json_output: bool = typer.Option(False, "--json"),
) -> None:
    """Find the fusion, weights, RRF k and reranking that suit your labelled queries, graded with
    cross-validation (never on the queries a setting was chosen on); --apply stores the winner."""
    from producers.evaluation import tuning
    from producers.evaluation.evaluate import KS, load_queries
    from producers.retrieval import rerankers as retrieval_rerankers
    from workers import lifecycle
    from workers.errors import QueryFileError

    config = existing(collection)
    try:
        labelled = load_queries(queries, fmt)
    except QueryFileError as e:
        fail(str(e))
    from producers.retrieval.search import SearchOptions

    has_contexts = config.contextualizer != "none"
    weights = tuning.CONTEXT_WEIGHTS if has_contexts else (0.0,)
    resolved = SearchOptions().resolved(config)
    current = tuning.Setting(resolved.fusion, resolved.dense_weight, resolved.context_weight if has_contexts else 0.0,
                             resolved.rrf_k, resolved.reranker or "none")
    tried = reranker if reranker is not None else current.reranker
    try:
        for name in {tried, current.reranker}:
            retrieval_rerankers.check(name)
            if name != "none":
                retrieval_rerankers.get(name)
    except ValueError as e:
        fail(str(e))
    if current.context_weight not in weights:
        weights = (*weights, current.context_weight)
    rankings = tuning.side_rankings(config, labelled, weights)
    grid = tuning.grid(has_contexts, tried)
    if current not in grid:
        grid.append(current)
    for name in {tried, current.reranker} - {"none"}:
        scored = tuning.add_rerank_scores(labelled, rankings, name)
        if not json_output:
            out.print(f"[dim]{name} scored {scored} candidates ({scored / len(labelled):.0f} per query)[/dim]")
    try:
        result = tuning.tune(labelled, rankings, current, grid, folds)
    except ValueError as e:
        fail(str(e))
    if apply:
        # Reranking is pinned only when it was in the running; else the server's default still applies.
        pinned = {"reranker": result.winner.reranker} if {tried, current.reranker} != {"none"} else {}
        lifecycle.set_search_defaults(collection, fusion=result.winner.fusion, dense_weight=result.winner.dense_weight,
                                      context_weight=result.winner.context_weight, rrf_k=result.winner.rrf_k, **pinned)
    if json_output:
        print(json.dumps({**result.summary(), "applied": apply}))
        return
    table = Table("", *[f"Pass@{k}" for k in KS], "MRR@10",
                  title=f"{collection}: {len(labelled)} queries, {len(grid)} settings, {folds} folds")
    for r in (result.current, result.held_out, result.winner_all):
        table.add_row(r.label, *[f"{r.pass_at[k]:.2f}" for k in KS], f"{r.mrr:.3f}")
    out.print(table)
    gain = result.held_out.pass_at[10] - result.current.pass_at[10]
    out.print(f"current: {current.label()}")
    out.print(f"winner:  {result.winner.label()}  (held-out Pass@10 {gain:+.2f} over the current defaults)")
    chosen = sorted({w.label() for w in result.fold_winners})
    out.print(f"[dim]the folds chose: {'; '.join(chosen)}[/dim]")
    out.print("applied: the collection's search defaults are now the winner's" if apply else
              "not applied (--apply stores the winner as the collection's search defaults)")
