"""Filtered searches with the fast searcher: the choice between the walk and the exact scan over the
allowed rows (a cost model).

A filtered walk (:func:`knngraph.beam.search` with ``filter=``) walks as an unfiltered one and returns the
first k allowed entries of its final list, so the list must hold enough allowed entries: about
``queue_size`` of them, the depth at which an unfiltered search of that queue finds its k, which takes a
list of ``queue_size / share`` entries (:func:`~knngraph.beam.filtered_queue_size`). Its cost grows with
that list, so when few ids are allowed the exact scan over them (one GEMM over the gathered allowed
vectors, :func:`knngraph.bruteforce.search` with the filter, recall 1) is cheaper; when many are, the walk
is. :func:`filtered_path` picks the cheaper by the estimates of :class:`FilteredCosts`, whose constants
were fitted to measurements of both paths on each kind of device (each constant says which). The exact
scan is also taken whatever the costs when the list the walk would need is longer than the searcher's
longest (:data:`~knngraph.beam.MAX_QUEUE_SIZE`): a capped list holds too few allowed entries for the
recall of ``queue_size``.
"""

from __future__ import annotations

import dataclasses

from ._search import MAX_QUEUE_SIZE, filtered_queue_size

__all__ = ["FilteredCosts", "COSTS", "filtered_path", "FILTERED_PATHS"]

#: what ``filtered_path=`` may say: the cost model's choice, or one path always
FILTERED_PATHS = ("auto", "graph", "exact")


@dataclasses.dataclass(frozen=True)
class FilteredCosts:
    """Estimated seconds of the two paths of a filtered search on one kind of device.

    * exact scan: ``exact_call + n_allowed * exact_row + nq * (exact_query + n_allowed * dim * exact_mac)``:
      a fixed cost per call (launches, host work), one per allowed row (its id listed, its vector gathered),
      and per query its fixed cost (k-selection, copies) and each distance term of the GEMM;
    * walk: ``walk_call + nq * walk_query * (list / 64) ** walk_growth * dim / 128``: a query's walk at a
      list of 64 entries on 128-d vectors (sift), growing with the list (more expansions, each merging
      into a longer list) and the row length. Its cost does not depend on the number of vectors (a walk
      visits a few thousand of them); it does on the graph's degree, which the constants fix at the
      measured graphs' (32 to 40).
    """

    exact_call: float
    exact_row: float
    exact_query: float
    exact_mac: float
    walk_call: float
    walk_query: float
    walk_growth: float

    def exact_seconds(self, nq: int, n_allowed: int, dim: int) -> float:
        return self.exact_call + n_allowed * self.exact_row + nq * (self.exact_query + n_allowed * dim * self.exact_mac)

    def walk_seconds(self, nq: int, queue: int, dim: int) -> float:
        return self.walk_call + nq * self.walk_query * (queue / 64) ** self.walk_growth * dim / 128


#: the constants by kind of device ('cpu', 'cuda'), for 128-d 8-bit vectors and graphs of degree 32-40 (both
#: paths scale alike with the row length: the model takes dimension as the only size of a row). Where
#: they come from:
#:
#: * 'cuda', exact scan: an H100, sift-photos 450k (uint8, 128-d), 10k queries, k=10, the exact search over
#:   the allowed rows took 7.1 / 9.8 / 39.5 / 78.7 ms with 1 / 10 / 50 / 90% allowed
#:   (``benchmarks/results/filtered_search_cuda_sift450k_h100.jsonl``, part 'exact'); least squares on
#:   the relative error: 0.53 us per query and 1.16e-13 s per distance term (within 20% of each time).
#:   Those 10k-query runs cannot tell what a call or an allowed row costs apart from the queries; so these
#:   two are estimates: 0.75 ns per allowed row (its id listed on the host and copied to the GPU, 8 bytes
#:   at about 12 GB/s, and its 128 bytes gathered at the card's 2.96 TB/s copy bandwidth measured in
#:   ``benchmarks/results/search_gpu_sift_h100.jsonl``) and 0.1 ms per call (the launches). A GPU run of
#:   ``benchmarks/studies/filtered_search.py --device cuda --calibrate`` measures all four.
#: * 'cuda', walk: the same card and data, the fast searcher's unfiltered queue sweep (10k queries): 1.34 /
#:   2.42 / 4.81 / 8.40 / 11.7 ms at lists of 32 / 64 / 128 / 192 / 256 (``search_gpu_sift_h100.jsonl``,
#:   part 'batch10k'): 0.26 us per query at 64, growing as (list / 64) ** 1.03 (a log-log fit); a call
#:   of one to a hundred queries took 0.15 - 0.33 ms there (part 'small_batch'): 0.15 ms per call. A
#:   filtered walk is that walk with a longer list (its compaction of the list is one pass at the end).
#: * 'cpu': sift-photos 100k (uint8, 128-d), 2 threads, measured by ``benchmarks/studies/filtered_search.py
#:   --calibrate`` (``benchmarks/results/filtered_search_cpu_2cores.jsonl``, parts 'calibrate' and 'fit'):
#:   the exact scan over 1 - 50% of the rows in batches of 10, 200 and 2000 queries and the filtered
#:   walk at lists of 64 to 1024 in batches of 10 and 2000 queries, fitted by least squares.
COSTS = {
    "cuda": FilteredCosts(exact_call=1e-4, exact_row=7.5e-10, exact_query=5.3e-7, exact_mac=1.16e-13,
                          walk_call=1.5e-4, walk_query=2.6e-7, walk_growth=1.03),
    "cpu": FilteredCosts(exact_call=1e-3, exact_row=2e-8, exact_query=1e-6, exact_mac=2.2e-11, walk_call=1e-4,
                         walk_query=2.0e-5, walk_growth=0.9),
}


def filtered_path(n_allowed: int, n: int, nq: int, dim: int, queue_size: int, device_kind: str,
                  choice: str = "auto") -> tuple[str, int]:
    """(path, list length) of a filtered search of ``nq`` queries over ``n`` vectors of which ``n_allowed``
    are allowed: 'exact' (the scan over the allowed rows; list length 0) or 'graph' (the walk with the
    list of :func:`filtered_queue_size`). ``choice`` 'auto' asks the cost model (:data:`COSTS` for
    ``device_kind``, 'cpu' or 'cuda'): the exact scan when no id is allowed, when the walk would need a
    list longer than the searcher's longest, or when its estimate is lower; 'graph' or 'exact' force one."""
    if choice not in FILTERED_PATHS:
        raise ValueError(f"filtered_path must be one of {', '.join(map(repr, FILTERED_PATHS))}, got {choice!r}")
    fraction = n_allowed / n if n else 0.0
    queue = filtered_queue_size(queue_size, fraction)
    if choice == "graph":
        return "graph", queue
    if choice == "exact" or n_allowed == 0 or queue_size > fraction * MAX_QUEUE_SIZE:
        return "exact", 0
    costs = COSTS["cuda" if device_kind == "cuda" else "cpu"]
    if costs.exact_seconds(nq, n_allowed, dim) < costs.walk_seconds(nq, queue, dim):
        return "exact", 0
    return "graph", queue
