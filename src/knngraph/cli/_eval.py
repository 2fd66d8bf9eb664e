"""``knngraph eval``: recall@k and R@k of a result (ids or a graph) against the truth (true ids, an exact
graph, or the exact neighbours computed from the vectors)."""

from __future__ import annotations

import numpy as np

from .common import (add_common_options, check_input, emit, file_extension, is_graph_file, positive_int, read_graph,
                     read_vectors)

__all__ = ["add_commands", "cmd_eval"]


def add_commands(subparsers) -> None:
    """Add ``eval`` to the command line's ``subparsers``."""
    p = subparsers.add_parser("eval", help="recall of a result against ground truth")
    p.add_argument("result", help="result ids (any vector format) or a graph file (.knng)")
    p.add_argument("truth", nargs="?", help="true ids (any format) or an exact graph (.knng)")
    p.add_argument("-k", type=positive_int, default=10, help="k of recall@k (default 10)")
    p.add_argument("--result-distances", help="distances of the result (to count ties)")
    p.add_argument("--truth-distances", help="true distances (to count ties)")
    p.add_argument("--truth-dataset", help="HDF5 TRUTH: dataset of the true ids (default neighbors; the "
                   "'distances' dataset counts ties when --result-distances is given)")
    p.add_argument("--base", help="for a graph result without TRUTH: the vectors, to compute exact neighbours")
    p.add_argument("--sample", type=positive_int, default=None,
                   help="with --base: evaluate a random sample of nodes")
    add_common_options(p)
    p.set_defaults(func=cmd_eval)


def _read_ids(path, label, dataset=None):
    """Ids from a vector file: its data must be integers (a float file is most likely distances)."""
    ids = np.asarray(read_vectors(path, dataset, label=label))
    if ids.dtype.kind not in "iu":
        raise ValueError(f"{label} {path}: holds {ids.dtype} data, but ids must be integers (a distances file "
                         f"given as ids?)")
    return ids


def _read_distances(path, label, ids_shape, ids_label, dataset=None):
    dist = np.asarray(read_vectors(path, dataset, label=label))
    if dist.dtype.kind not in "iuf":
        raise ValueError(f"{label} {path}: holds {dist.dtype} data, but distances must be numbers")
    if dist.shape != ids_shape:
        raise ValueError(f"{label} {path} has shape {dist.shape} but {ids_label} has shape {ids_shape}")
    return dist


def _read_ids_and_distances(path, distances_path, label, dataset=None, distances_dataset=None):
    """(ids, distances or None, Graph or None) of a result/truth: a graph file, or an ids file plus an
    optional distances file (for HDF5 files: the datasets named)."""
    if is_graph_file(path):
        g = read_graph(path, label)
        return g.indices, g.distances, g
    ids = _read_ids(path, label, dataset)
    dist = _read_distances(distances_path, f"--{label.lower()}-distances", ids.shape, f"{label} {path}",
                           distances_dataset) if distances_path else None
    return ids, dist, None


def _check_eval_arguments(args) -> None:
    """The combinations of eval's arguments that make sense, and its input paths (before any reading)."""
    if is_graph_file(args.result):
        if args.result_distances:
            raise ValueError("--result-distances: a .knng result holds its own distances")
        if args.truth is None and args.base is None:
            raise ValueError("a graph result needs TRUTH (an exact graph or true ids) or --base (the vectors, to "
                             "compute the exact neighbours)")
        if args.truth is not None and args.base is not None:
            raise ValueError("give TRUTH or --base, not both")
    else:
        if args.truth is None:
            raise ValueError(f"an ids result needs TRUTH (true ids, or an exact graph): knngraph eval "
                             f"{args.result} TRUTH (--base applies to a .knng graph result)")
        if args.base is not None:
            raise ValueError("--base applies to a .knng graph result; an ids result needs TRUTH")
    if args.sample is not None and args.base is None:
        raise ValueError("--sample applies with --base (TRUTH is evaluated on all rows)")
    if args.truth is not None and is_graph_file(args.truth) and args.truth_distances:
        raise ValueError("--truth-distances: a .knng truth holds its own distances")
    if args.truth_dataset is not None and (args.truth is None or file_extension(args.truth) not in (".hdf5", ".h5")):
        raise ValueError("--truth-dataset applies to an HDF5 TRUTH (an ann-benchmarks file)")
    for path, label in ((args.result, "RESULT"), (args.truth, "TRUTH")):
        if path is not None:
            check_input(path, label, vectors=not is_graph_file(path))
    for path, label in ((args.result_distances, "--result-distances"), (args.truth_distances, "--truth-distances"),
                        (args.base, "--base")):
        if path is not None:
            check_input(path, label, vectors=True)


def cmd_eval(args) -> int:
    """Print the recall of RESULT against TRUTH (or, for a graph, against the exact graph of ``--base``)."""
    from .. import evaluate

    _check_eval_arguments(args)
    ids, dist, graph = _read_ids_and_distances(args.result, args.result_distances, "RESULT")
    if graph is not None and args.base is not None:
        base = read_vectors(args.base, label="--base")
        if base.shape[0] != graph.n:
            raise ValueError(f"--base {args.base} has {base.shape[0]} rows but the graph {args.result} has "
                             f"{graph.n} nodes; give the vectors the graph was built on")
        r = evaluate.graph_recall(graph, args.k, base=base, sample=args.sample, device=args.device)
        payload = {"graph_recall": r, "k": args.k, "sample": args.sample}
        emit(args, payload, [f"graph recall@{args.k} = {r:.4f}" + (f" (sample of {args.sample} nodes)"
                                                                   if args.sample else "")])
        return 0
    from .. import io

    truth_distances, distances_dataset = args.truth_distances, None
    if io.is_hdf5(args.truth):  # an ann-benchmarks file: true ids in 'neighbors', distances in 'distances'
        args.truth_dataset = args.truth_dataset or "neighbors"
        if truth_distances is None and dist is not None:
            truth_distances, distances_dataset = args.truth, "distances"
    t_ids, t_dist, t_graph = _read_ids_and_distances(args.truth, truth_distances, "TRUTH", args.truth_dataset,
                                                     distances_dataset)
    if ids.shape[0] != t_ids.shape[0]:
        raise ValueError(f"RESULT {args.result} has {ids.shape[0]} rows but TRUTH {args.truth} has "
                         f"{t_ids.shape[0]}")
    use_dist = dist is not None and t_dist is not None
    if use_dist and graph is not None and t_graph is not None:
        # both carry a metric: compare like with like (euclidean <-> sqeuclidean converts, others refuse)
        t_dist = evaluate.true_distances_in(graph.metric, t_graph.metric, t_dist)
    kw = {"distances": dist, "true_distances": t_dist} if use_dist else {}
    rec = evaluate.recall_at_k(ids, t_ids, args.k, **kw)
    rk = evaluate.r_at_k(ids, t_ids, args.k, **kw)
    key = "graph_recall" if graph is not None else "recall"
    payload = {key: rec, "R_at_k": rk, "k": args.k, "ties_counted": use_dist, "rows": int(ids.shape[0])}
    emit(args, payload, [f"{'graph ' if graph is not None else ''}recall@{args.k} = {rec:.4f}",
                         f"R@{args.k} = {rk:.4f}",
                         "ties counted (distances given)" if use_dist else "ties not counted (no distances given)"])
    return 0
