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
    * walk: ``max(walk_call + nq * walk_query * g(walk_growth), walk_latency * g(walk_latency_growth)) * dim
      / 128`` with ``g(e) = (list / 64) ** e``: a batch that fills the device costs a fixed cost per call
      and a query's share of the device's throughput at a list of 64 entries on 128-d vectors (sift),
      growing with the list (more expansions, each merging into a longer list, and fewer walks resident at
      once); a batch too small to fill it costs the walk of one query (its latency, growing with the list
      too). Its cost does not depend on the number of vectors (a walk visits a few thousand of them); it
      does on the graph's degree, which the constants fix at the measured graphs' (32 to 40).
    """

    exact_call: float
    exact_row: float
    exact_query: float
    exact_mac: float
    walk_call: float
    walk_query: float
    walk_growth: float
    walk_latency: float
    walk_latency_growth: float

    def exact_seconds(self, nq: int, n_allowed: int, dim: int) -> float:
        return self.exact_call + n_allowed * self.exact_row + nq * (self.exact_query + n_allowed * dim * self.exact_mac)

    def walk_seconds(self, nq: int, queue: int, dim: int) -> float:
        batch = self.walk_call + nq * self.walk_query * (queue / 64) ** self.walk_growth
        return max(batch, self.walk_latency * (queue / 64) ** self.walk_latency_growth) * dim / 128


#: the constants by kind of device ('cpu', 'cuda'), for 128-d 8-bit vectors and graphs of degree 32-40 (both
#: paths scale alike with the row length: the model takes dimension as the only size of a row), fitted by
#: ``python benchmarks/studies/filtered_search.py --calibrate`` (its ``fit_costs``: least squares on the relative
#: error of the exact scans; log-log lines through the walks of full and of small batches) to:
#:
#: * 'cuda': an H200, sift-photos 450k (uint8, 128-d), the exact scan over 1 - 50% of the rows in batches of
#:   10, 200 and 10,000 queries and the filtered walk at lists of 65 to 1024 entries in batches of 10 and
#:   10,000 (``benchmarks/results/filtered_search_cuda_sift450k_h200.jsonl``, parts 'calibrate' and 'fit'). The
#:   exact scan costs 5.4 ms per call and 83 ns per allowed row before any query (the allowed rows listed
#:   and gathered), then 5e-14 s per distance term: at 10 queries it is 5.0 ms with 1% allowed and 21 ms
#:   with 50%. A walk of 10,000 queries took 2.9 ms at a list of 65 and 180 ms at 1024 (the throughput
#:   falls faster than the list grows: long lists leave fewer walks resident); 10 queries took 0.76 ms at
#:   65 and 14.3 ms at 1024 (one walk's latency).
#: * 'cpu': sift-photos 100k (uint8, 128-d), 2 threads, the same parts with batches of 10, 200 and 2,000
#:   queries (``benchmarks/results/filtered_search_cpu_2cores_calibrate.jsonl``). One thread walks one query,
#:   so a small batch is no faster per query than a large one: the latency term stays below the batch term.
COSTS = {
    "cuda": FilteredCosts(exact_call=5.41e-3, exact_row=8.31e-8, exact_query=0.0, exact_mac=5.0e-14,
                          walk_call=7.55e-4, walk_query=2.4e-7, walk_growth=1.56,
                          walk_latency=5.27e-4, walk_latency_growth=1.13),
    "cpu": FilteredCosts(exact_call=6.65e-3, exact_row=6.13e-8, exact_query=1.21e-6, exact_mac=1.67e-11,
                         walk_call=3.2e-4, walk_query=2.23e-5, walk_growth=1.05, walk_latency=2.79e-4,
                         walk_latency_growth=1.0),
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
