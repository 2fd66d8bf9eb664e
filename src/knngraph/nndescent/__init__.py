"""Approximate k-NN graphs by NN-Descent: GNND on the GPU (Wang, Zhao, Zeng, "Fast k-NN Graph Construction
by GPU based NN-Descent"), the same iteration on the CPU, graph merge (GGM), graphs of data larger than
the memory budget, and incremental extension.

The module contract (:mod:`knngraph.index`)::

    params = nndescent.IndexParams(graph_degree=32, metric="sqeuclidean")
    index = nndescent.build(params, base)            # index.graph is a knngraph.Graph
    index = nndescent.extend(index, more_vectors)    # GGM merge of the new points' graph
    nndescent.save("g.index", index); index = nndescent.load("g.index")
    g = nndescent.merge_graphs(g1, g2, base1, base2) # = knngraph.merge_graphs

Most users call ``knngraph.knn_graph(base, k, method="nndescent")``. NN-Descent builds graphs; to search
one, hand it to a graph searcher (``knngraph.song.from_graph(index.graph, index.dataset)``).

How it works (GNND sections in brackets): initial lists, then iterations of sampling the first p NEW and
p OLD entries of each list plus up to p reverse entries each [4.1], a local join of every NEW-NEW and
NEW-OLD sample pair of each node [4.2], and the update of the lists [4.3]. The GPU path starts from
random lists (GNND Alg. 1) and uses GNND's fixed-size sample arrays, one thread block per node,
shared-memory distance tiles and selective update with spinlocked in-place insertion (``_kernels.py``).
The CPU path starts from a random projection forest, as pynndescent does (each node's nearest leaf-mates
in a few trees that split space by the hyperplane halfway between two random points; ``_rptree.py``),
which leaves a few iterations to run, and runs the same iteration in numba (``cpu.py``). The iteration
loop, the merge and the out-of-core drivers are written once over an engine (``_build.py``). Merging two
graphs [5.1] keeps half of every list, fills the other half with random nodes of the other set and
refines with cross pairs only. Speed and recall against pynndescent and the GNND authors' code are in
``benchmarks/REPORT.md``.

When the data does not fit the build's ``memory_limit`` (out-of-core), ``IndexParams.out_of_core`` picks
how it is cut:

* ``'shard_pairs'``: the paper's scheme [5]: equal shards in storage order, each shard's graph built,
  then every pair of shards merged once with GGM, the next shard loading while the current merge runs.
  With few shards this is the most accurate; but a node's true neighbours are spread over all s shards,
  so with many shards each merge must find far-down cross neighbours from random starts, the cost grows
  with s^2 and recall falls.
* ``'clusters'``: k-means centroids from a sample; every row in the cluster of its nearest centroid and
  in those of its 2nd to ``cluster_overlap``-th nearest whose border it lies within ``cluster_margin``
  neighbourhood radii of; each cluster (halved until it fits, the rows near the cut on both sides) built
  in memory while the next one loads, and every row's lists from its clusters merged
  (:mod:`knngraph.partition`). About ``rows built / n`` in-memory builds of work (``info['copies']``:
  1.1 to 1.8 on the clustered sets measured, at most about 2), whatever the number of clusters.
* ``'auto'`` (default): 'shard_pairs' when at most 4 shards are needed (6 merges), else 'clusters'.
"""

from ._index import Index, build, extend, load, merge_graphs, piece_params, save
from ._params import INIT_MODES, OUT_OF_CORE, UPDATE_MODES, IndexParams

__all__ = ["IndexParams", "Index", "build", "extend", "save", "load", "merge_graphs", "piece_params",
           "UPDATE_MODES", "INIT_MODES", "OUT_OF_CORE"]
