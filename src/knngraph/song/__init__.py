"""SONG: graph search with one GPU warp per query (Zhao, Tan, Li, "SONG: Approximate Nearest Neighbor
Search on GPU"), on any fixed-degree graph, with a CPU path that runs the same algorithm.

The module contract (:mod:`knngraph.index`)::

    import knngraph
    from knngraph import song

    # an index built from the vectors: k-NN graph, preparation, entry points
    index = song.build(song.IndexParams(metric="sqeuclidean"), base)
    # or over any builder's graph
    g = knngraph.optimize_graph(knngraph.knn_graph(base, 96, method="nndescent"), base, graph_degree=32)
    index = song.from_graph(g, base)

    d, i = song.search(index, queries, k=10, params=song.SearchParams(queue_size=64))
    index = song.extend(index, more_vectors)
    index = song.delete(index, ids)          # never returned again; compacted past half the rows deleted
    song.save("sift.song", index); index = song.load("sift.song")

**The speed/recall knob is ``queue_size``** (Q): each query keeps its Q best candidates (the bounded
priority queue of section IV-C) and its Q best results so far; the search stops when the nearest
unexpanded candidate is worse than all Q results. Larger Q: more vertices expanded, higher recall, lower
throughput; ``k <= queue_size``. Recall and queries per second against Q are measured by
``benchmarks/studies/song_gpu.py`` and ``benchmarks/studies/song_cpu.py`` (``benchmarks/REPORT.md``).

**Entry points.** By default each query starts from ``IndexParams.n_entry_points`` (32) vertices: the
*medoid* and random vertices (:func:`knngraph.graphops.default_entry_points`), computed once per index.
Several spread-out starts make the search robust on graphs with weakly connected clusters (k-NN graphs of
real data often have them); 32 cost one 32-id chunk of distance computations per query.
``from_graph(..., entry_points=...)`` chooses them.

**Visited set** (section IV-B/E): ``visited="hash"`` (default) is an open-addressing hash table in
shared memory with selected insertion and visited deletion, so it holds only the ids in the queue and
in the results (<= 2Q); ``"bloom"`` is a Bloom filter (no deletion: every id ever queued stays marked, so
fewer distances are recomputed but rare false positives may skip a vertex).

**What is implemented from the paper**: one warp per query and the three stages of Fig. 3; the
bounded priority queue (symmetric min-max heap), selected insertion and visited deletion (section IV);
hash table and Bloom filter visited sets (:mod:`knngraph.primitives.visited`); 1-bit hashing
(section VII). Not implemented: the Cuckoo filter, the "basic" and "selected-insertion-only" hash-table ablations of Fig. 7, multi-query per warp and
multi-step probing (section V; the paper measured both as slower than one query and one step).

**Data beyond GPU memory** (section VII): ``IndexParams(hash_bits=128)`` keeps 1-bit random-projection
codes (16 bytes per vector at 128 bits) on the GPU and the full vectors in host memory; the graph is
searched with Hamming distances and the final ``rerank`` candidates are re-ranked exactly on the host.
Use it when the vectors do not fit on the GPU (the graph, 4 * degree bytes per vector, must); expect
lower recall at a given queue size than the full-vector search and raise ``queue_size`` / ``rerank``.

**Filters and deletion** (not in the paper): ``search(..., filter=mask)`` walks as without a filter (ids
that may not be returned still lead to those that may) with the list grown to ``queue_size`` / (allowed
share), and returns the first k allowed entries; or it scans the allowed vectors exactly when the cost
model of :func:`knngraph.beam.filtered_path` finds that cheaper (``SearchParams.filtered_path``).
``delete(index, ids)`` marks ids in a bitset that every search clears from its allowed ids; past
``compact_above`` of the rows deleted, :func:`compact` rebuilds the index over the live vectors, keeping
their ids.
"""

from ._index import Index, build, compact, delete, extend, from_graph, load, save, search
from ._params import AUTO_ROUTES, MAX_QUEUE_SIZE, BuildRoute, IndexParams, SearchParams
from .hashing import RandomProjectionHasher

__all__ = ["IndexParams", "SearchParams", "Index", "build", "from_graph", "search", "extend", "delete", "compact",
           "save", "load", "RandomProjectionHasher", "MAX_QUEUE_SIZE", "AUTO_ROUTES", "BuildRoute"]
