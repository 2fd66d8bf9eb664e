"""The fast graph searcher: best-first search over one sorted list, shared by the graph searchers (the
default searcher of :mod:`knngraph.song`, and :mod:`knngraph.ggnn`'s ``cache='sorted'``).

::

    from knngraph import beam

    view = beam.GraphView(graph.indices, vectors, entry_points, "sqeuclidean")
    distances, ids = beam.search(view, queries, k=10, queue_size=64, device="cuda")

A :class:`GraphView` is a plain view of a search graph (int32 ids, -1 padded), its vectors, entry points
and metric, with the per-device state that searches keep (device copies, norms, one prepared launch per
search configuration, the CPU's visited stamps). :func:`search` keeps the ``queue_size`` nearest vertices
seen in one sorted list, expands the first unexpanded one until none is left (on a GPU the first
``search_width``, warps teaming up on one query) and returns the first ``k``; with ``slack`` each query also
stops at GGNN's bound (Groh et al., "GGNN: Graph-Based GPU Nearest Neighbor Search", Eq. 2). With ``filter``
the walk is the same and each query returns the first ``k`` allowed entries of a list grown by the allowed
share (:func:`filtered_queue_size`); :func:`filtered_path` is the cost model that the searchers over it
(:func:`knngraph.song.search`, :func:`knngraph.ggnn.search`) ask whether the exact scan over the allowed
vectors is cheaper (``_filtered.py``).

Where things are: the GPU kernels in ``_kernels.py`` (numba-cuda), their host side (distance modes, search
widths, shared memory, prepared launches) in ``cuda.py``, the CPU twin in ``cpu.py`` and this entry in
``_search.py``. Importing this package loads neither numba.cuda nor CuPy: the GPU modules are imported on
first GPU use.
"""

from ._filtered import COSTS, FILTERED_PATHS, FilteredCosts, filtered_path
from ._search import (CPU_WALKS, INT8_WALK_MAX_ERROR, INT8_WALK_MIN_DIM, MAX_QUEUE_SIZE, MAX_SEARCH_WIDTH,
                      GraphView, filtered_kb, filtered_queue_size, int8_codes, int8_plan, search, search_checked)

__all__ = ["GraphView", "search", "search_checked", "MAX_QUEUE_SIZE", "MAX_SEARCH_WIDTH", "filtered_queue_size",
           "filtered_kb", "filtered_path", "FilteredCosts", "COSTS", "FILTERED_PATHS", "CPU_WALKS",
           "INT8_WALK_MIN_DIM", "INT8_WALK_MAX_ERROR", "int8_codes", "int8_plan"]
