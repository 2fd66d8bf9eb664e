"""Past one GPU and one machine: sharded search indexes, sharded searches and k-NN graphs of data larger
than one worker, on a Dask cluster (``dask.distributed``; ``dask-cuda``'s ``LocalCUDACluster`` puts one
worker on each GPU). Install with ``pip install 'knngraph[dask]'``.

::

    import distributed
    from knngraph import song, distributed as kd

    client = distributed.Client("tcp://scheduler:8786")          # or LocalCluster / LocalCUDACluster
    index = kd.build(song.IndexParams(graph_degree=32), ["part0.fbin", "part1.fbin"], client=client)
    d, i = kd.search(index, queries, k=10, params=song.SearchParams(queue_size=64))   # ids are global
    kd.delete(index, ids)                                   # a task per shard holding some of them
    kd.save("sift.sharded", index); index = kd.load("sift.sharded", client=client)

    g = kd.knn_graph(dask_array, 32, client=client, piece_rows=5_000_000)   # Dask arrays (d, i)
    kd.knn_graph(["a.fbin", "b.fbin"], 32, client=client, out="graph.parts")  # .knng shards

**Sharded index** (:func:`build`): one index of any searching algorithm of :mod:`knngraph.registry` per
shard, built by a worker from its own rows (a Dask array chunk, a file the worker reads, or a slice of a
NumPy array shipped in the task), through that algorithm's module contract. The shards live on the
workers. :func:`search` sends each batch of queries to every shard, turns shard ids into global ids
(shard offset + id) and merges the per-shard top-k with :func:`knngraph.graphops.merge_topk`; batches
stream, a few under way at once.

**k-NN graph** (:func:`knn_graph`): the overlapping k-means clusters of the out-of-core NN-Descent build
(:mod:`knngraph.partition`: k-means on a sample, every row in its ``overlap`` nearest clusters, clusters
too large for ``piece_rows`` halved), each piece's graph built by a worker with any graph builder, and
every row's lists from its pieces merged by row blocks (a shuffle by row id).

**Devices.** ``device="auto"`` is resolved by each worker: its GPU when it has one, else its CPUs; the
same code runs on both.

**Faults.** Every shard and piece is the result of a Dask task whose inputs Dask can recompute (the
rows, the file to read, the saved shard to load), so a worker lost in the middle of a build or a search
is survived: its tasks rerun elsewhere. A task that fails for good (a file gone, a worker lost too many
times) raises an error naming the shard or piece (:class:`ShardError`, or the original error type with
the name in front); no partial result is ever returned.
"""

try:
    import dask  # noqa: F401
    import distributed  # noqa: F401
except ImportError:  # pragma: no cover - the dask extra is missing
    raise ImportError("knngraph.distributed needs Dask: pip install 'knngraph[dask]'") from None

from ._common import ShardError, connect
from ._graph import knn_graph, load_graph
from ._index import ShardedIndex, build, delete, load, save, search

__all__ = ["ShardedIndex", "build", "search", "delete", "save", "load", "knn_graph", "load_graph", "connect",
           "ShardError"]
