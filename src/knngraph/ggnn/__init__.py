"""GGNN: hierarchical graph construction and block-per-query search with backtracking (Groh, Ruppert,
Wieschollek, Lensch, "GGNN: Graph-Based GPU Nearest Neighbor Search"), with a CPU path that runs the
same algorithm.

For a fast build: ``ggnn.IndexParams(graph_degree=20, inverse_links=14, refinements=0)`` (1.65 s on
sift-photos 450k on an H200, a graph searched further than the authors' k=24 graph; README). For recall@10
0.99 at high throughput: a larger degree (k=48, r=2: 0.9925 at 1.5M queries/s there, with
``SearchParams(queue_size=128, tau=1.0)``, two warps per query: the automatic width at that queue).

The module contract (:mod:`knngraph.index`)::

    from knngraph import ggnn

    index = ggnn.build(ggnn.IndexParams(graph_degree=24), base)            # the hierarchy of section 5
    d, i = ggnn.search(index, queries, k=10, params=ggnn.SearchParams(tau=0.5))
    index = ggnn.from_graph(any_graph, base)                                # GGNN search on any graph
    song_index = knngraph.song.from_graph(index.graph, base)                # other searchers on its graph
    d, i = ggnn.search(index, queries, k=10, filter=mask)                   # only ids where mask is True
    index = ggnn.delete(index, ids)                                         # never returned again
    ggnn.save("sift.ggnn", index); index = ggnn.load("sift.ggnn")

**The speed/recall knob is ``SearchParams.tau``** (tau_q): a query stops when the best unexpanded
candidate is farther than d_k + tau^2 * min(d_1, d+_nn1) (squared distances, see below). Measured on the
CPU, sift 20k, k=10, default build, default (sorted) cache: tau 0 -> recall@10 0.86, 0.3 -> 0.93, 0.5 ->
0.98, 0.8 -> 0.99 (``benchmarks/studies/ggnn_cpu.py``; ``tests/ggnn`` holds recall@10 >= 0.95 at tau = 0.5 with
either cache). With the sorted cache ``queue_size`` bounds what a large tau can reach: raise both.

**Build** (section 5, Algorithm 3): the n points in random order form g^(L-1) bottom segments of about s
points; each upper layer l holds s * g^(L-1-l) points, segment j drawn from segments j*g .. j*g+g-1 of the
layer below by weighted reservoir sampling with each point's nearest-neighbour distance as weight; the
top layer is one segment of s points. For each new top layer, every layer below is merged (the k nearest
of each point found by a hierarchical query from its top segment, brute force inside segments of the top
layer itself) and symmetrically linked; ``refinements`` passes repeat the merges from the final top. The
bottom layer is ``index.graph``, a :class:`~knngraph.Graph` any searcher takes; the top layer gives the
entry points. **Search** (sections 4.1 and 5.4): fetch the top layer's s points, then search the bottom
layer only. On the GPU one block per query keeps the cache in shared memory: by default the authors'
later sorted buffer (``cache='sorted'``, the fast searcher's kernel: one warp per query, or up to 8 for
small batches, ``search_width``), or the paper's sorted best list, sorted priority queue and visited ring
(``cache='rings'``, one warp); the CPU runs the same caches, one thread per query.

**Sharding** (section 5.5): ``IndexParams(n_shards=m)`` builds m independent hierarchies over contiguous
slices; a search runs on every shard and merges the per-shard top-k. On a GPU, shards that do not fit in
``memory_limit`` together are copied from host memory one at a time (see :mod:`knngraph.ggnn._shards`).

**Decisions where the paper is silent or ambiguous**:

* A1: g = floor((n/s)^(1/(L-1))) (the examples and sizes, not the printed 1/L); bottom segments hold >= s
  points; when g < 2 the number of layers drops (a single layer is one brute-force segment).
* A3: the slack is applied to squared distances as in the authors' code, d^2 <= d_k^2 + tau^2 *
  min(d_1^2, nn1^2); the paper's plain-distance Eq. 2 is several times looser at the same tau. The build
  uses the mean nearest-neighbour distance (Eq. 4), the search the maximum d+_nn1 (Eq. 3). Cosine uses
  1 - cos (half the squared distance of normalised vectors); inner product uses ``|d_1|``.
* A2: search cache, two layouts (``SearchParams(cache=...)``) with the same stopping rule. 'sorted'
  (default): the authors' later SortedBufferCache layout (their code), one sorted buffer of
  ``queue_size`` (256) entries whose head is the best list, each entry marked once expanded, visited
  ids in a hash table; run by the library's fast searcher with the slack stop
  (:mod:`knngraph.beam`). 'rings': the paper's Fig. 2, best list max(k, 10), queue
  ``queue_size`` (64), visited ring the rest of ``cache_size`` (256, the authors' "fast" layout; 512
  gave the same recall on sift 20k). ``max_iterations`` (400) caps expansions in both. Build caches
  (always rings): best = graph_degree, queue 32, ring 64, at most 100 expansions per layer of a merge
  query.
* A4: a merge writes all k slots with nearest neighbours; symmetric linking then puts inverse links in
  the last k_sym slots ([NN | inverse | further NN], as the authors' code): rows stay full.
* A5: random partition of the bottom layer (Fig. 1), seeded; WRS keys log(u)/w with u from a hash of
  (seed, layer, row).
* A6: symmetric linking accepts a point when it is within the criterion for z and inside the sphere
  around q_m = z + 0.4 (x - z) through x, both with slack tau_b^2 * mean nn1 (the code's AND); at most 20
  pops per path; the link goes to the first point of the best list (nearest to z) with a free slot.
  Links are placed in waves of rows (the searches of a wave see the links of earlier waves), in row
  order, on the CPU and the GPU alike (the paper's code places them with atomics as they are found; on
  the GPU that made the graph depend on the scheduling and search worse), so builds are reproducible.
* A7: each shard keeps its own d+_nn1.
* ``extend`` rebuilds the index with the new vectors (the paper has no insertion), leaving deleted ones out.
* Filters and deletion (not in the paper): the sorted cache's walk is the fast searcher's filtered walk,
  its list and the slack stop's d_k entry grown by the allowed share (:func:`knngraph.beam.search`), or
  the exact scan over the allowed vectors when the cost model of :func:`knngraph.beam.filtered_path`
  finds it cheaper; ``delete`` marks ids in a bitset that every search clears from its allowed ids
  (``cache='rings'`` refuses both).

**GPU build**: the build's arrays stay on the device from start to end. The merges and the linking's path
searches run as CUDA kernels (one block per point, the search's cache); the links are placed with the
CPU's sequential result by parallel fixed-point rounds (``_link_kernels``) and written into the rows by
a kernel; the final rows are sorted on the device, in chunks, and assembled in host memory, so the device
holds one shard's build at a time and a build larger than ``memory_limit`` runs in more shards
(:func:`shard_build_bytes`). The top-layer selection (a sort) and the
nearest-neighbour statistics run on the host, on one column of distances each.

**Not implemented**: the background overlap of shard copies with searches; shards on several GPUs
run one after another.
"""

from ._index import Index, build, compact, delete, extend, from_graph, load, save, search, shard_build_bytes
from ._params import MAX_CACHE_SIZE, IndexParams, SearchParams

__all__ = ["IndexParams", "SearchParams", "Index", "build", "from_graph", "search", "extend", "delete", "compact",
           "save", "load", "shard_build_bytes", "MAX_CACHE_SIZE"]
