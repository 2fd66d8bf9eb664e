r"""Several GPUs of one host: replicated and sharded search, sharded builds, k-NN graphs past one GPU's budget,
Dask on a LocalCUDACluster, and a billion vectors (``--parts billion``).

    python benchmarks/studies/multi_gpu.py --out $OUT                       # every GPU of the machine
    python benchmarks/studies/multi_gpu.py --parts replicated,sharded --out $OUT

Parts (each writes lines to ``multi_gpu.jsonl``; ``multi_gpu.png`` plots throughput against GPUs):

* ``replicated``: sift-photos 450k, ``song.build`` defaults built once; batches of 100,000 queries (the
  10,000 queries repeated) searched on one GPU (the plain ``song.search``) and on 2, 4, ... GPUs
  (``song.search(..., devices=[...])``), queue sizes 32 and 64: queries/s (median of 5 after a warm-up),
  the speed-up over the one-GPU search, and recall@10 of the first 10,000. Target: >= 1.9x one GPU's
  queries/s on 2 GPUs and >= 3.6x on 4, at the same recall.
* ``sharded``: a clustered synthetic set (``benchmarks/_common.clustered``, overlapping, 96-d float32,
  ``--shard-rows`` per GPU, default 2M): one GPU builds ``song.build`` of its half, then m GPUs build the
  whole set sharded (``devices=[0..m-1], layout='sharded'``); 10,000 held-out queries searched on both.
  Target: the m-GPU build of m halves within 1.15x of one GPU's half; queries/s >= 0.9x at the same recall.
* ``graph``: NN-Descent k=32 of a clustered 128-d set of ``--graph-rows`` rows with ``memory_limit`` a
  quarter of its size: one GPU out of core against every GPU at once (``knngraph.knn_graph(...,
  devices=...)``), graph recall@10 on 1,000 sampled nodes. Target: <= 0.35x the one-GPU time on 4 GPUs.
* ``dask``: ``knngraph.distributed`` on a dask-cuda ``LocalCUDACluster`` of 2 GPUs (one worker each):
  the sift 450k SONG index in 2 shards, 100,000 queries (the 10,000 repeated) streamed in batches of
  10,000, against the same two shard indexes searched and merged in this process batch by batch; same ids
  required. Target: >= 0.9x in-process.
* ``billion`` (not run by default): ``--billion-rows`` (default 1e9) 96-d uint8 vectors made on the GPUs
  (overlapping clusters, fixed seed), GGNN built sharded over every GPU, 10,000 queries whose exact top-10
  come from the multi-GPU exact search; the time split (generation, build per GPU, search), peak memory,
  queries/s and recall@10.

Timing is the runner's (:func:`benchmarks.runner.measure.time_calls`: searches after a warm-up call, builds
once without one), recall@10 the runner's (:func:`benchmarks.runner.quality.recall`: ties at the true 10th
distance count, distances recomputed in float64) against sift-photos' ground truth or, on the synthetic
sets, the exact top-10 of ``knngraph.knn``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks._common import clustered  # noqa: E402
from benchmarks.runner import data, quality  # noqa: E402
from benchmarks.runner.measure import JsonLines, time_calls  # noqa: E402

PARTS = ("replicated", "sharded", "graph", "dask")

#: 'cuda', or 'cpu' for a smoke run of the parts on logical CPU devices (``--smoke``: small sizes, the same code)
KIND = {"device": "cuda", "sift_rows": 450_000}


def dev(i: int) -> str:
    return f"cuda:{i}" if KIND["device"] == "cuda" else "cpu"


def devs(m: int) -> list:
    return [dev(i) for i in range(m)] if KIND["device"] == "cuda" else ["cpu"] * m


def xp():
    if KIND["device"] == "cuda":
        import cupy

        return cupy
    return np


def gpu_count() -> int:
    if KIND["device"] != "cuda":
        return 2
    import cupy as cp

    return int(cp.cuda.runtime.getDeviceCount())


def device_sets(n_gpus: int):
    """1, 2, 4, ... GPUs (powers of two up to the machine's count, and the count itself)."""
    sizes, m = [], 1
    while m <= n_gpus:
        sizes.append(m)
        m *= 2
    if sizes[-1] != n_gpus:
        sizes.append(n_gpus)
    return [devs(m) for m in sizes]


def with_truth(name: str, base, queries, true_ids) -> data.Dataset:
    """``base`` and ``queries`` (host arrays) with the exact top-10 ``true_ids`` found here
    (``knngraph.knn``), to score by the runner's recall (:func:`benchmarks.runner.quality.recall`)."""
    return data.Dataset(name, base, queries, "sqeuclidean", "exact top-10 by knngraph.knn (multi_gpu.py)",
                        data.host(true_ids).astype(np.int64))


def sift() -> data.Dataset:
    return data.load(data.sift_photos(KIND["sift_rows"]))


def part_replicated(lines, n_gpus, queues=(32, 64), repeat=10):
    """Also one GPU without ``devices=`` (the plain search: host queries copied whole, then searched; what a
    one-device search runs) and, for comparison, ``chunks='whole'``: every GPU's share staged in page-locked
    memory and searched in one piece (``knngraph._gpu_queue.replica_chunks`` with one chunk per device), and
    ``chunks='chunked, one stream per GPU'``: the chunks queued on one stream of each GPU
    (``knngraph._gpu_queue.STREAMS_PER_DEVICE`` = 1), so each chunk's last queries hold its GPU alone."""
    import knngraph
    from knngraph import _gpu_queue, song

    ds = sift()
    index = song.build(song.IndexParams(), ds.base, device=dev(0), verbose=False)
    batch = np.ascontiguousarray(np.concatenate([ds.queries] * repeat))
    defaults = (_gpu_queue.MIN_CHUNK_ROWS, _gpu_queue.MAX_CHUNK_ROWS, _gpu_queue.STREAMS_PER_DEVICE)
    ways = {"whole": ((1 << 40), (1 << 40), defaults[2]), "chunked, one stream per GPU": (*defaults[:2], 1),
            "chunked": defaults}
    for q in queues:
        sp = song.SearchParams(queue_size=q)
        plain = time_calls(lambda: song.search(index, batch, 10, sp), repeats=5)
        lines.write(part="replicated", gpus=1, queue_size=q, batch=batch.shape[0], chunks="plain search",
                    qps=batch.shape[0] / plain.median_s, seconds=plain.median_s,
                    recall_at_10=quality.recall(ds, knngraph._device.as_numpy(plain.result.indices)[:ds.nq], 10))
        for way, setting in ways.items():
            _gpu_queue.MIN_CHUNK_ROWS, _gpu_queue.MAX_CHUNK_ROWS, _gpu_queue.STREAMS_PER_DEVICE = setting
            for devs in device_sets(n_gpus)[1:]:
                timing = time_calls(lambda: song.search(index, batch, 10, sp, devices=devs), repeats=5)
                qps = batch.shape[0] / timing.median_s
                lines.write(part="replicated", gpus=len(devs), queue_size=q, batch=batch.shape[0], chunks=way,
                            qps=qps, seconds=timing.median_s,
                            recall_at_10=quality.recall(ds, timing.result.indices[:ds.nq], 10),
                            speedup=qps * plain.median_s / batch.shape[0])
        _gpu_queue.MIN_CHUNK_ROWS, _gpu_queue.MAX_CHUNK_ROWS, _gpu_queue.STREAMS_PER_DEVICE = defaults
    del index, knngraph


def part_sharded(lines, n_gpus, rows_per_gpu):
    import knngraph
    from knngraph import song

    m = min(n_gpus, 2) if n_gpus < 4 else n_gpus
    x = clustered(rows_per_gpu * m + 10_000, 96, seed=5, overlapping=True, xp=xp())
    base, queries = x[:-10_000], x[-10_000:]
    half = base[:rows_per_gpu]
    on_half = with_truth("clustered half", half, queries, knngraph.knn(half, queries, 10, device=dev(0)).indices)
    on_all = with_truth("clustered", base, queries, knngraph.knn(base, queries, 10, devices=devs(m)).indices)
    # kernels compiled (or loaded) before either timed build: a fresh machine's first build compiles them
    for g in range(m):
        song.build(song.IndexParams(), half[:100_000], device=dev(g), verbose=False)
    t = time_calls(lambda: song.build(song.IndexParams(), half, device=dev(0), verbose=False), 1, warmup=False)
    one, t_one = t.result, t.median_s
    t = time_calls(lambda: song.build(song.IndexParams(), base, devices=devs(m), layout="sharded", verbose=False), 1,
                   warmup=False)
    spread, t_spread = t.result, t.median_s
    for q in (32, 64):
        sp = song.SearchParams(queue_size=q)
        a = time_calls(lambda: song.search(one, queries, 10, sp, device=dev(0)), repeats=3)
        b = time_calls(lambda: song.search(spread, queries, 10, sp), repeats=3)
        lines.write(part="sharded", gpus=m, rows_per_gpu=rows_per_gpu, queue_size=q, build_one_s=t_one,
                    build_sharded_s=t_spread, build_ratio=t_spread / t_one,
                    qps_one=queries.shape[0] / a.median_s, qps_sharded=queries.shape[0] / b.median_s,
                    qps_ratio=a.median_s / b.median_s, recall_one=quality.recall(on_half, a.result.indices, 10),
                    recall_sharded=quality.recall(on_all, b.result.indices, 10))


def part_graph(lines, n_gpus, rows):
    import knngraph
    from benchmarks.runner.quality import GraphTruth

    x = clustered(rows, 128, seed=9, xp=xp())
    limit = x.nbytes // 4
    truth = GraphTruth(x, "sqeuclidean", 10, sample=1000, device=dev(0))
    runs = [("one-gpu out of core", dict(device=dev(0))), (f"{n_gpus} gpus", dict(devices=devs(n_gpus)))]
    for g in range(n_gpus):  # kernels compiled before the timed builds
        knngraph.knn_graph(x[:100_000], 32, method="nndescent", device=dev(g), verbose=False)
    times = {}
    for name, where in runs:
        t = time_calls(lambda: knngraph.knn_graph(x, 32, method="nndescent", memory_limit=limit, verbose=False,
                                                  **where), 1, warmup=False)
        g, times[name] = t.result, t.median_s
        lines.write(part="graph", run=name, rows=rows, memory_limit=limit, seconds=times[name],
                    graph_recall_at_10=truth.recall(knngraph._device.as_numpy(g.indices), 10),
                    pieces=g.info.get("pieces"), pieces_per_device=g.info.get("pieces_per_device"),
                    partition_seconds=g.info.get("partition_seconds"),
                    seconds_per_device=g.info.get("seconds_per_device"))
    lines.write(part="graph", ratio=times[runs[1][0]] / times[runs[0][0]], gpus=n_gpus)


def part_dask(lines, batch=10_000, repeat=10):
    """Streamed search through Dask against the same two shard indexes searched and merged in this process,
    batch by batch (the same batches: the automatic search width depends on a batch's size)."""
    import dask_cuda
    import distributed

    import knngraph
    from knngraph import distributed as kd
    from knngraph import song
    from knngraph.graphops import merge_topk

    ds = sift()
    stream = np.ascontiguousarray(np.concatenate([ds.queries] * repeat))
    params = song.IndexParams(seed=3)
    sp = song.SearchParams(queue_size=32)
    with dask_cuda.LocalCUDACluster(CUDA_VISIBLE_DEVICES="0,1", dashboard_address=":0") as cluster, \
            distributed.Client(cluster) as client:
        index = kd.build(params, ds.base, client=client, shards=2, device="cuda").wait()
        shards = client.gather(index.futures)
        streamed = time_calls(lambda: kd.search(index, stream, 10, sp, device="cuda", batch_size=batch), 1)
        _, i = streamed.result

    def in_process():
        out = []
        for s0 in range(0, stream.shape[0], batch):
            ps = [s.search(stream[s0:s0 + batch], 10, sp, device=dev(0)) for s in shards]
            out.append(merge_topk([knngraph._device.as_numpy(p[0]) for p in ps],
                                  [knngraph._device.as_numpy(p[1]) + sh.offset for p, sh in zip(ps, index.shards)],
                                  10)[1])
        return np.concatenate(out)

    local = time_calls(in_process, 1)
    merged = local.result
    lines.write(part="dask", workers=2, batch=batch, queries=stream.shape[0],
                same_ids=bool(np.array_equal(knngraph._device.as_numpy(i), merged)),
                qps_dask=stream.shape[0] / streamed.median_s, qps_in_process=stream.shape[0] / local.median_s,
                ratio=local.median_s / streamed.median_s, recall_at_10=quality.recall(ds, i[:ds.nq], 10))


def part_billion(lines, n_gpus, rows):
    """The seed papers' scale: generation on the GPUs, GGNN sharded over them, exact truth by the multi-GPU
    exact search of 10,000 queries."""
    import cupy as cp

    import knngraph
    from knngraph import ggnn

    per = rows // n_gpus

    def generate():
        parts = []
        for g in range(n_gpus):
            with cp.cuda.Device(g):
                rs = cp.random.RandomState(1000 + g)
                centres = rs.standard_normal((1000, 96), dtype=cp.float32) * 20 + 128
                lab = rs.randint(0, 1000, per)
                block = cp.clip(centres[lab] + rs.standard_normal((per, 96), dtype=cp.float32) * 12, 0, 255)
                parts.append(block.astype(cp.uint8))
                del block, lab
        return parts

    gen = time_calls(generate, 1, warmup=False)
    parts, gen_s = gen.result, gen.median_s
    host = np.concatenate([p.get() for p in parts])
    queries = host[np.random.default_rng(0).integers(0, host.shape[0], 10_000)]
    built = time_calls(lambda: ggnn.build(ggnn.IndexParams(graph_degree=20, inverse_links=14, refinements=0), host,
                                          devices=list(range(n_gpus)), layout="sharded", verbose=False), 1, warmup=False)
    index = built.result
    truth = with_truth("billion", host, queries,
                       knngraph.knn(host, queries, 10, devices=list(range(n_gpus)), layout="sharded").indices)
    timing = time_calls(lambda: ggnn.search(index, queries, 10, ggnn.SearchParams(tau=0.5)), repeats=3)
    lines.write(part="billion", rows=rows, gpus=n_gpus, generation_s=gen_s, build_s=built.median_s,
                qps=queries.shape[0] / timing.median_s, recall_at_10=quality.recall(truth, timing.result.indices, 10),
                peak_gpu_bytes=[int(cp.cuda.Device(g).mem_info[1] - cp.cuda.Device(g).mem_info[0])
                                for g in range(n_gpus)])


def plot(jsonl: Path, png: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    rows = [json.loads(x) for x in jsonl.read_text().splitlines() if x.strip()]
    rep = [r for r in rows if r.get("part") == "replicated" and "qps" in r
           and r.get("chunks", "chunked") in ("chunked", "plain search")]
    if not rep:
        return
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for q in sorted({r["queue_size"] for r in rep}):
        pts = sorted((r["gpus"], r["qps"]) for r in rep if r["queue_size"] == q)
        ax.plot([p[0] for p in pts], [p[1] / 1e6 for p in pts], "o-", label=f"queue {q}")
    ax.set_xlabel("GPUs (replicated index, 100k-query batches)")
    ax.set_ylabel("million queries / s")
    gpu = rep[0].get("env", {}).get("gpu", "GPU")
    ax.set_title(f"sift-photos 450k, {gpu}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=120)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", default=",".join(PARTS))
    ap.add_argument("--shard-rows", type=int, default=2_000_000)
    ap.add_argument("--graph-rows", type=int, default=4_000_000)
    ap.add_argument("--billion-rows", type=int, default=1_000_000_000)
    ap.add_argument("--out", default="out")
    ap.add_argument("--smoke", action="store_true",
                    help="the parts but 'dask' and 'billion' on two logical CPU devices at small sizes (checks the "
                         "study itself on a machine without a GPU; its numbers mean nothing)")
    args = ap.parse_args(argv)
    if args.smoke:
        KIND.update(device="cpu", sift_rows=20_000)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lines = JsonLines(out / "multi_gpu.jsonl")
    n = gpu_count()
    parts = args.parts.split(",")
    for part in parts:
        t0 = time.perf_counter()
        try:
            if part == "replicated":
                part_replicated(lines, n)
            elif part == "sharded":
                part_sharded(lines, n, args.shard_rows)
            elif part == "graph":
                part_graph(lines, n, args.graph_rows)
            elif part == "dask":
                part_dask(lines)
            elif part == "billion":
                part_billion(lines, n, args.billion_rows)
            else:
                raise ValueError(f"unknown part {part!r}")
        except Exception as exc:  # noqa: BLE001 - one part failing must not hide the others' numbers
            import traceback

            traceback.print_exc()
            lines.write(part=part, error=f"{type(exc).__name__}: {exc}")
        print(f"part {part}: {time.perf_counter() - t0:.1f} s", flush=True)
    plot(out / "multi_gpu.jsonl", out / "multi_gpu.png")


if __name__ == "__main__":
    main()
