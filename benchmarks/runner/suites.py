"""The suites behind the committed report: what runs on the CPU development machine and on a GPU.

``python -m benchmarks suite cpu`` (2 cores, about 20 minutes) and ``python -m benchmarks suite gpu``
(an H100 / H200). On the lent GPU machine, whose commands stop after 10 minutes, ``bash scripts/gpu_check.sh
bench suite`` runs it all in one command: sift and scaling took about 5 minutes on an H200, the clustered
out-of-core builds at 1M and 10M about 1.5 more (with out_of_core='shard_pairs' the 10M build's 861
merges alone took 6.5 minutes and needed a command of their own, see benchmarks/results/bench_gpu_h200.log). ``--quick`` shrinks
every dataset and sweep so a whole suite runs in a minute or two: it checks the code, not the speed
(``--device cpu`` runs the GPU suite's runs on the CPU for that purpose).

Parts of the GPU suite (``--parts``):

* ``sift``: sift-photos 450k, exact k-NN (knngraph vs PyTorch GEMM + topk), SONG search curves on an
  exact and an NN-Descent graph, batch-size sweep, k=64 graphs (exact, PyTorch, NN-Descent sweep);
* ``scaling``: NN-Descent k=32 build time and graph recall on the synthetic Gaussian mixture, 128-d,
  n = 10k ... 10M, data in host memory; the exact graph up to 1M for comparison;
* ``ooc``: the same builder with ``memory_limit`` = a quarter of the data size (out-of-core; the default
  ``out_of_core='auto'`` picks overlapping clusters at these sizes), at the sizes of ``--ooc-sizes``
  (default 1M and 10M);
* ``ooc_probe`` (not run by default): 1M points with the 10M run's memory_limit (1.28 GB), so its shards
  have the 10M run's shard size: a few of the same shard-pair merges, to estimate the 10M run's time
  (its 820 merges dominate) before spending a whole device call on it.
"""

from __future__ import annotations

from .run import RunSpec

__all__ = ["cpu_suite", "gpu_suite", "GPU_PARTS", "DEFAULT_GPU_PARTS", "SCALING_SIZES"]

GPU_PARTS = ("sift", "scaling", "ooc", "ooc_probe")
#: parts run when --parts is not given
DEFAULT_GPU_PARTS = ("sift", "scaling", "ooc")
#: memory_limit of the out-of-core build at 10M points (a quarter of 10M x 128 float32)
OOC_10M_LIMIT = 10_000_000 * 128 * 4 // 4
SCALING_SIZES = (10_000, 30_000, 100_000, 300_000, 1_000_000, 3_000_000, 10_000_000)


def _synth(n: int, nq: int = 0) -> str:
    return f"synth:n={n},d=128,nq={nq}"


def cpu_suite(quick: bool = False) -> list[RunSpec]:
    """sift-photos 100k and minilm-words on the CPU: knngraph's exact search, SONG and NN-Descent next to
    faiss-cpu (flat, HNSW, IVF), hnswlib and pynndescent. Searches: k=10, all queries per call, median of 3
    timed calls. Index builds are timed once after a warm-up build on 20k rows (JIT compilation) to keep
    the suite near 20 minutes on 2 cores; the k=32 graph builds of NN-Descent and pynndescent, the
    comparison issue 3 asks for, are the median of 3."""
    datasets = ["sample:nq=300"] if quick else ["sift-photos-100k", "minilm-words"]
    specs = []
    for ds in datasets:
        once = {"build_repeats": 1}
        specs += [
            RunSpec(ds, "search", "knngraph-exact"),
            RunSpec(ds, "search", "faiss-flat"),
            RunSpec(ds, "search", "knngraph-song", search={"queue_size": [10, 16, 32, 64, 128]}, **once),
            RunSpec(ds, "search", "hnswlib", search={"ef": [10, 20, 40, 80, 160]}, **once),
            RunSpec(ds, "search", "faiss-hnsw", search={"efSearch": [16, 32, 64, 128, 256]}, **once),
            RunSpec(ds, "search", "faiss-ivf", search={"nprobe": [1, 4, 16, 64]}, **once),
            RunSpec(ds, "search", "pynndescent", search={"epsilon": [0.0, 0.1, 0.2, 0.3]}, **once),
            RunSpec(ds, "graph", "knngraph-nndescent", k=32, graph={"sample_size": [0, 8, 16]},
                    build_repeats=1 if quick else 3),
            RunSpec(ds, "graph", "pynndescent", k=32, build_repeats=1 if quick else 3),
            RunSpec(ds, "graph", "knngraph-exact", k=32, **once),
        ]
    return specs


def gpu_suite(parts=DEFAULT_GPU_PARTS, quick: bool = False, device: str = "cuda", ooc_sizes=(1_000_000, 10_000_000),
              ooc_time_limit_s: float | None = None) -> list[RunSpec]:
    """The GPU suite (see the module docs); ``quick`` for a code check at tiny sizes; ``ooc_time_limit_s``
    ends an out-of-core build that runs longer with a 'timeout' line (:class:`RunSpec`)."""
    specs = []
    sift = "sample:nq=300" if quick else "sift-photos-450k"
    if "sift" in parts:
        q_sizes = [16, 32] if quick else [16, 32, 48, 64, 96, 128, 256]
        batches = [50, 300] if quick else [100, 1000, 10000]
        specs += [
            RunSpec(sift, "search", "knngraph-exact", device=device),
            RunSpec(sift, "search", "torch-exact", device=device),
            RunSpec(sift, "search", "knngraph-song", device=device, search={"queue_size": q_sizes},
                    build={"graph": ["exact", "nndescent"], "graph_k": [64], "graph_degree": [32]}),
            RunSpec(sift, "search", "knngraph-exact", device=device, batch_sizes=batches, tag="batch"),
            RunSpec(sift, "search", "torch-exact", device=device, batch_sizes=batches, tag="batch"),
            RunSpec(sift, "search", "knngraph-song", device=device, search={"queue_size": [64]}, batch_sizes=batches,
                    build={"graph": ["nndescent"], "graph_k": [64], "graph_degree": [32]}, build_repeats=1, tag="batch"),
            RunSpec(sift, "graph", "knngraph-exact", device=device, k=64),
            RunSpec(sift, "graph", "torch-exact", device=device, k=64),
            RunSpec(sift, "graph", "knngraph-nndescent", device=device, k=64,
                    graph={"sample_size": [16, 32], "max_iterations": [4, 6, 8, 12, 20]}),
        ]
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
