"""The suites behind the committed report: what runs on the CPU development machine and on a GPU.

``python -m benchmarks suite cpu`` (2 cores) and ``python -m benchmarks suite gpu`` (an H100 / H200). On
the lent GPU machine, whose commands stop after 10 minutes, ``bash scripts/gpu_check.sh bench suite`` runs
the GPU suite in one command: sift and scaling took about 5 minutes on an H200, the clustered out-of-core
builds at 1M and 10M about 1.5 more (with out_of_core='shard_pairs' the 10M build's 861 merges alone took
6.5 minutes and needed a command of their own, see benchmarks/results/bench_gpu_h200.log); the
search-graph part is new and not yet timed there. ``--quick`` shrinks every dataset and sweep so a whole
suite runs in a minute or two: it checks the code, not the speed (``--device cpu`` runs the GPU suite's
runs on the CPU for that purpose).

Parts of the CPU suite (``--parts``, both by default):

* ``compare``: sift-photos 100k and minilm-words, knngraph's exact search, SONG and NN-Descent next to
  faiss-cpu, hnswlib and pynndescent (about 20 minutes on 2 cores);
* ``search_graphs``: the search graphs of GGNN and GRNND (:func:`search_graph_runs`) on sift-photos 100k
  only: their CPU builds take about 90 and 10 s there, and the part took 5 minutes on the 2 shared cores
  (minilm-words would add as much again).

Parts of the GPU suite (``--parts``):

* ``sift``: sift-photos 450k, exact k-NN (knngraph vs PyTorch GEMM + topk and cuVS brute force), SONG
  search curves on the exact 96-NN graph pruned to degree 32 (``song.build``'s defaults) and on an
  NN-Descent graph, next to cuVS CAGRA on its own graph (NN-Descent build, degree 32) and CAGRA's searcher
  on knngraph's exact-96 graph (``cuvs-cagra-on-knngraph``: the same graph as the first SONG curve);
  batch sizes 1, 10, 100, 1000 (at most 1000 calls each) and all 10,000 for exact search, SONG and both
  CAGRAs (time per call); k=64 graphs (exact, PyTorch, cuVS brute force, NN-Descent sweep, cuVS
  NN-Descent). Without cuVS its runs write 'skipped' lines with the install note.
* ``scaling``: NN-Descent k=32 build time and graph recall on the synthetic Gaussian mixture, 128-d,
  n = 10k ... 10M, data in host memory; the exact graph up to 1M for comparison;
* ``ooc``: the same builder with ``memory_limit`` = a quarter of the data size (out-of-core; the default
  ``out_of_core='auto'`` picks overlapping clusters at these sizes), at the sizes of ``--ooc-sizes``
  (default 1M and 10M);
* ``search_graphs``: sift-photos 450k, the search graphs of GGNN and GRNND (:func:`search_graph_runs`);
* ``ooc_probe`` (not run by default): 1M points with the 10M run's memory_limit (1.28 GB), so its shards
  have the 10M run's shard size: a few of the same shard-pair merges, to estimate the 10M run's time
  (its 820 merges dominate) before spending a whole device call on it.
"""

from __future__ import annotations

from knngraph.song import AUTO_ROUTES

from .run import RunSpec

__all__ = ["cpu_suite", "gpu_suite", "search_graph_runs", "CPU_PARTS", "GPU_PARTS", "DEFAULT_GPU_PARTS",
           "SCALING_SIZES", "SEARCH_GRAPH_TAG"]

CPU_PARTS = ("compare", "search_graphs")
GPU_PARTS = ("sift", "search_graphs", "scaling", "ooc", "ooc_probe")
#: GPU parts run when --parts is not given
DEFAULT_GPU_PARTS = ("sift", "search_graphs", "scaling", "ooc")
#: memory_limit of the out-of-core build at 10M points (a quarter of 10M x 128 float32)
OOC_10M_LIMIT = 10_000_000 * 128 * 4 // 4
SCALING_SIZES = (10_000, 30_000, 100_000, 300_000, 1_000_000, 3_000_000, 10_000_000)
#: the tag of the search-graph runs (GGNN, GRNND), drawn in figures of their own
SEARCH_GRAPH_TAG = "search-graphs"
#: the SONG graph of the CPU suite: NN-Descent 64-NN pruned to degree 32 (the runner's default before
#: song.build's fields became its build parameters, so that earlier lines stay the same points)
CPU_SONG_GRAPH = {"build_algo": ["nndescent"], "intermediate_graph_degree": [64], "graph_degree": [32]}


def _synth(n: int, nq: int = 0) -> str:
    return f"synth:n={n},d=128,nq={nq}"


def search_graph_runs(dataset: str, device: str = "cpu", quick: bool = False, song_graph: dict | None = None,
                      **protocol) -> list[RunSpec]:
    """GGNN and GRNND as builders of search graphs (tag :data:`SEARCH_GRAPH_TAG`), each with its library
    defaults: GGNN's own index searched over its knob tau at several queue sizes (``knngraph-ggnn``), and
    the fast searcher (``song.search``, ``queue_size`` swept) on GGNN's and on GRNND's graph as built
    (``knngraph-song-on-ggnn``, ``knngraph-song-on-grnnd``; the build time is the builder's, plus
    ``song.from_graph``); for reference in the same run, the same searcher on its prepared k-NN graph
    (``knngraph-song``, ``song_graph``: its build parameters, default ``song.build``'s defaults).
    ``protocol``: further :class:`RunSpec` fields (e.g. ``build_repeats``)."""
    on_gpu = device == "cuda"
    if quick:
        taus, ggnn_queues, queues = [0.3, 0.7], [32, 128], [16, 64]
    elif on_gpu:
        taus, ggnn_queues = [0.3, 0.4, 0.5, 0.7, 1.0, 1.5, 3.0], [64, 128, 256, 512]
        queues = [16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512]
    else:  # the CPU searches one query per thread: fewer, wider steps
        taus, ggnn_queues, queues = [0.3, 0.5, 0.7, 1.0], [32, 128, 512], [16, 32, 64, 128, 256]
    song_queues = [10, 16, 32, 64, 128] if not (quick or on_gpu) else queues  # the CPU suite's SONG sweep
    tag = {"tag": SEARCH_GRAPH_TAG, "device": device, **protocol}
    return [RunSpec(dataset, "search", "knngraph-ggnn", search={"tau": taus, "queue_size": ggnn_queues}, **tag),
            RunSpec(dataset, "search", "knngraph-song-on-ggnn", search={"queue_size": queues}, **tag),
            RunSpec(dataset, "search", "knngraph-song-on-grnnd", search={"queue_size": queues}, **tag),
            RunSpec(dataset, "search", "knngraph-song", build=song_graph, search={"queue_size": song_queues}, **tag)]


def cpu_suite(parts=CPU_PARTS, quick: bool = False) -> list[RunSpec]:
    """The CPU suite (see the module docs). Searches: k=10, all queries per call, median of 3 timed calls.
    Index builds are timed once after a warm-up build on 20k rows (JIT compilation) to keep the suite
    near half an hour on 2 cores; the k=32 graph builds of NN-Descent and pynndescent are the median of 3."""
    datasets = ["sample:nq=300"] if quick else ["sift-photos-100k", "minilm-words"]
    specs = []
    once = {"build_repeats": 1}
    for ds in datasets if "compare" in parts else ():
        specs += [
            RunSpec(ds, "search", "knngraph-exact"),
            RunSpec(ds, "search", "faiss-flat"),
            RunSpec(ds, "search", "knngraph-song", build=CPU_SONG_GRAPH, search={"queue_size": [10, 16, 32, 64, 128]},
                    **once),
            RunSpec(ds, "search", "hnswlib", search={"ef": [10, 20, 40, 80, 160]}, **once),
            RunSpec(ds, "search", "faiss-hnsw", search={"efSearch": [16, 32, 64, 128, 256]}, **once),
            RunSpec(ds, "search", "faiss-ivf", search={"nprobe": [1, 4, 16, 64]}, **once),
            RunSpec(ds, "search", "pynndescent", search={"epsilon": [0.0, 0.1, 0.2, 0.3]}, **once),
            RunSpec(ds, "graph", "knngraph-nndescent", k=32, graph={"sample_size": [0, 8, 16]},
                    build_repeats=1 if quick else 3),
            RunSpec(ds, "graph", "pynndescent", k=32, build_repeats=1 if quick else 3),
            RunSpec(ds, "graph", "knngraph-exact", k=32, **once),
        ]
    if "search_graphs" in parts:
        specs += search_graph_runs(datasets[0], "cpu", quick, song_graph=CPU_SONG_GRAPH, **once)
    return specs


def gpu_suite(parts=DEFAULT_GPU_PARTS, quick: bool = False, device: str = "cuda", ooc_sizes=(1_000_000, 10_000_000),
              ooc_time_limit_s: float | None = None) -> list[RunSpec]:
    """The GPU suite (see the module docs); ``quick`` for a code check at tiny sizes; ``ooc_time_limit_s``
    ends an out-of-core build that runs longer with a 'timeout' line (:class:`RunSpec`)."""
    specs = []
    sift = "sample:nq=300" if quick else "sift-photos-450k"
    if "sift" in parts:
        q_sizes = [16, 32] if quick else [16, 32, 48, 64, 96, 128, 256]
        itopk = [16, 32] if quick else [16, 32, 48, 64, 96, 128, 256, 512]
        batches = [1, 10, 300] if quick else [1, 10, 100, 1000, 10000]
        max_calls = 5 if quick else 1000
        small = {"batch_sizes": batches, "max_calls": max_calls, "tag": "batch", "build_repeats": 1}
        # song.build's defaults: the graph knngraph's GPU searcher uses and cuvs-cagra-on-knngraph searches
        gpu_route = AUTO_ROUTES["cuda"]
        song_graph = {"build_algo": [gpu_route.build_algo], "intermediate_graph_degree": [gpu_route.intermediate_graph_degree],
                      "graph_degree": [gpu_route.graph_degree]}
        cagra = {"itopk_size": itopk, "search_width": [1]}
        specs += [
            RunSpec(sift, "search", "knngraph-exact", device=device),
            RunSpec(sift, "search", "torch-exact", device=device),
            RunSpec(sift, "search", "cuvs-brute-force", device=device),
            RunSpec(sift, "search", "knngraph-song", device=device, search={"queue_size": q_sizes}, build=song_graph),
            RunSpec(sift, "search", "knngraph-song", device=device, search={"queue_size": q_sizes},
                    build={"build_algo": ["nndescent"], "intermediate_graph_degree": [64], "graph_degree": [32]}),
            RunSpec(sift, "search", "cuvs-cagra-on-knngraph", device=device, search=cagra),
            RunSpec(sift, "search", "cuvs-cagra", device=device, search=cagra),
            RunSpec(sift, "search", "knngraph-exact", device=device, **small),
            RunSpec(sift, "search", "torch-exact", device=device, **small),
            RunSpec(sift, "search", "cuvs-brute-force", device=device, **small),
            RunSpec(sift, "search", "knngraph-song", device=device, search={"queue_size": [32, 64, 128]},
                    build=song_graph, **small),
            RunSpec(sift, "search", "cuvs-cagra-on-knngraph", device=device,
                    search={"itopk_size": [32, 64, 128], "search_width": [1]}, **small),
            RunSpec(sift, "search", "cuvs-cagra", device=device, search={"itopk_size": [32, 64, 128], "search_width": [1]},
                    **small),
            RunSpec(sift, "graph", "knngraph-exact", device=device, k=64),
            RunSpec(sift, "graph", "torch-exact", device=device, k=64),
            RunSpec(sift, "graph", "cuvs-brute-force", device=device, k=64),
            RunSpec(sift, "graph", "knngraph-nndescent", device=device, k=64,
                    graph={"sample_size": [16, 32], "max_iterations": [4, 6, 8, 12, 20]}),
            RunSpec(sift, "graph", "cuvs-nn-descent", device=device, k=64),
        ]
    if "search_graphs" in parts:
        specs += search_graph_runs(sift, device, quick)
    sizes = [2_000, 5_000, 20_000] if quick else list(SCALING_SIZES)
    if "scaling" in parts:
        for n in sizes:
            big = n >= 3_000_000
            specs.append(RunSpec(_synth(n), "graph", "knngraph-nndescent", device=device, k=32, input="host",
                                 build_repeats=1 if big else 3, tag="scaling"))
            if n <= (5_000 if quick else 1_000_000):
                specs.append(RunSpec(_synth(n), "graph", "knngraph-exact", device=device, k=32, input="host",
                                     build_repeats=1 if n >= 1_000_000 else 3, tag="scaling"))
    if "ooc_probe" in parts:
        specs.append(RunSpec(_synth(20_000 if quick else 1_000_000), "graph", "knngraph-nndescent", device=device, k=32,
                             input="host", graph={"memory_limit": [OOC_10M_LIMIT // 400 if quick else OOC_10M_LIMIT]},
                             build_repeats=1, build_warmup="none", log_progress=True, tag="ooc-probe"))
    if "ooc" in parts:
        for n in ([20_000] if quick else list(ooc_sizes)):
            specs.append(RunSpec(_synth(n), "graph", "knngraph-nndescent", device=device, k=32, input="host",
                                 graph={"memory_limit": ["quarter"]}, build_repeats=1, build_warmup="none",
                                 log_progress=True, time_limit_s=ooc_time_limit_s, tag="ooc"))
    return specs
