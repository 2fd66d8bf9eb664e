"""``knngraph warmup``: compile every kernel ahead of first use (:func:`knngraph.warmup`); ``knngraph demo``:
build, search and report recall and speed on the bundled sample."""

from __future__ import annotations

import json

import numpy as np

import knngraph

from .._warmup import DTYPES, METRICS
from .common import Timer, add_common_options, emit, jsonable, non_negative_int, positive_int

__all__ = ["add_commands", "cmd_demo", "cmd_warmup"]


def add_commands(subparsers) -> None:
    """Add ``warmup`` and ``demo`` to the command line's ``subparsers``."""
    p = subparsers.add_parser("warmup", help="compile every kernel now (kept on disk), not on first use")
    p.add_argument("--dtype", action="append", choices=DTYPES,
                   help="vector dtype to compile for (repeatable; default: all four)")
    p.add_argument("--metric", action="append", choices=METRICS,
                   help="metric to compile for (repeatable; default: all four)")
    p.add_argument("--dim", action="append", type=positive_int,
                   help="GPU: vector dimension of the graph searchers' kernels (repeatable; default 128)")
    p.add_argument("--processes", type=non_negative_int, default=0,
                   help="worker processes (default 0: one per core, at most 8)")
    add_common_options(p)
    p.set_defaults(func=cmd_warmup)

    p = subparsers.add_parser("demo", help="build, search and report recall/speed on the bundled sample")
    add_common_options(p)
    p.set_defaults(func=cmd_demo)


def cmd_demo(args) -> int:
    """Build, search, report recall and speed on the bundled sift-photos sample (GPU if there is one).

    Lines are printed as each step ends; timings leave out the compilation of kernels (a first run), which
    is reported on its own line."""
    from .. import _firstrun
    from .._compiling import compile_seconds
    from .._device import resolve_device
    from ..datasets import load_sample
    from ..evaluate import graph_recall, recall_at_k

    say = (lambda line: None) if args.json else (lambda line: print(line, flush=True))
    compiled_before = compile_seconds()
    s = load_sample()
    dev = resolve_device(args.device)
    device = "cuda" if dev.is_cuda else "cpu"
    say(f"knngraph {knngraph.__version__} demo on the bundled sift-photos sample: {s.base.shape[0]} base "
        f"vectors, {s.queries.shape[0]} queries, {s.base.shape[1]}-d uint8, device={device}")
    results = {"device": device, "n": int(s.base.shape[0]), "n_queries": int(s.queries.shape[0])}
    # a first run on the CPU compiles NN-Descent's iteration kernels and the beam searcher in a second
    # process meanwhile (knngraph._firstrun): this one compiles the rest first
    has_nndescent = "nndescent" in knngraph.registry.graph_builders()
    has_song = "song" in knngraph.registry.graph_searchers()
    nndescent_compile, compiled_aside = None, 0.0
    if device == "cpu" and has_nndescent:
        nndescent_compile = _firstrun.start_nndescent_compile(s.base.dtype)

    # first calls (GPU context, threads, kernels) on the batches timed below: a smaller warm-up batch would
    # take the few-query kernels and compile them too, for nothing
    knngraph.knn(s.base, s.queries, 10, device=device, verbose=False)
    with Timer() as t:
        d, i = knngraph.knn(s.base, s.queries, 10, device=device, verbose=False)
    rec = recall_at_k(np.asarray(i), s.gt_indices, 10, distances=np.asarray(d), true_distances=s.gt_distances)
    results["exact_search"] = {"seconds": t.seconds, "queries_per_second": s.queries.shape[0] / t.seconds,
                               "recall@10": rec}
    say(f"exact search     k=10: recall@10 {rec:.4f}, {s.queries.shape[0] / t.seconds:>10,.0f} queries/s")

    with Timer() as t:
        exact = knngraph.knn_graph(s.base, 32, device=device, verbose=False)
    results["exact_graph"] = {"seconds": t.seconds, "k": 32}
    say(f"exact graph      k=32: built in {t.seconds:.2f} s")

    if has_song:
        search_graph = knngraph.optimize_graph(exact, s.base, device=device, verbose=False)
    if has_nndescent:
        if nndescent_compile is not None:
            _firstrun.compile_forest(s.base, 32)
        compiled_aside = _firstrun.wait(nndescent_compile)
        with Timer() as t:
            g = knngraph.knn_graph(s.base, 32, method="nndescent", device=device, verbose=False)
        r10 = graph_recall(g, 10, true_graph=exact)
        results["nndescent_graph"] = {"seconds": t.seconds, "k": 32, "graph_recall@10": r10}
        say(f"NN-Descent graph k=32: built in {t.seconds:.2f} s, graph recall@10 {r10:.4f}")
    if has_song:
        from .. import song

        index = song.from_graph(search_graph, s.base, device=device)
        song.search(index, s.queries, 10, device=device, verbose=False)
        with Timer() as t:
            d, i = song.search(index, s.queries, 10, device=device, verbose=False)
        rec = recall_at_k(np.asarray(i), s.gt_indices, 10, distances=np.asarray(d), true_distances=s.gt_distances)
        results["song_search"] = {"seconds": t.seconds, "queries_per_second": s.queries.shape[0] / t.seconds,
                                  "recall@10": rec}
        say(f"SONG graph search k=10: recall@10 {rec:.4f}, {s.queries.shape[0] / t.seconds:>10,.0f} queries/s")
    results["compile_seconds"] = compile_seconds() - compiled_before
    results["compile_seconds_second_process"] = compiled_aside
    if results["compile_seconds"] >= 0.05:
        aside = f" (+ {compiled_aside:.1f} s in a second process meanwhile)" if compiled_aside else ""
        say(f"(+ {results['compile_seconds']:.1f} s compiling kernels{aside}, first run only: cached on disk now; "
            f"the timings above leave it out)")
    if args.json:
        print(json.dumps(results, default=jsonable))
    return 0


def cmd_warmup(args) -> int:
    """Compile every kernel ahead of first use (:func:`knngraph.warmup`)."""
    from .._warmup import warmup

    res = warmup(args.device, args.dtype or DTYPES, args.metric or METRICS, dims=args.dim or (128,),
                 processes=args.processes, verbose=not args.json)
    compiled = res["compile_seconds"]
    emit(args, dict(task="warmup", **res),
         [f"kernels ready ({res['device']}; {', '.join(res['dtypes'])}; {', '.join(res['metrics'])}): "
          f"{res['seconds']:.1f} s, {compiled:.1f} s of it compiling in {res['processes']} process(es)"
          + ("" if compiled >= 0.05 else " (all were compiled already)")])
    return 0
