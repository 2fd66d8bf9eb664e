"""GNND (the GPU's scheme: random initial lists, selective update) on short lists first, then on wide ones.

    NUMBA_NUM_THREADS=2 python benchmarks/studies/nndescent_wide_tail.py --out out/          # CPU, 200k rows
    python benchmarks/studies/nndescent_wide_tail.py --device cuda --sizes 1000000,4000000 --clusters 1000 \
        --p 32 --switch u0.1,i4 --fills empty@16,2hop16x16old@16,2hop32x16mix@16,2hop32x32mix@16 --out out/
    python benchmarks/studies/nndescent_wide_tail.py --report out/nndescent_wide_tail.jsonl   # tables of a file

The library iterates the selective update on lists of 2k entries from the start (``intermediate_graph_degree``
auto), so that the returned k converge; the first iterations on random lists are the costliest (each local
join is NEW x (NEW + OLD) samples per node) and do little. This study drives the engine
(``knngraph.nndescent._build.make_engine``: ``cpu.Engine`` or ``cuda.Engine``, the same calls) directly:

* ``wide64 pP``: the library's build: ``new_graph(n, 2k)``, ``init`` (random), iterations with sample size P
  until one inserts fewer than ``--threshold`` x n x 2k entries (the baseline; one run per ``--p``);
* ``short32 pP``: the same on lists of k (``new_graph(n, k)``), the phase 1 of every two-phase schedule (one
  run per ``--p1``);
* ``short32 pP >SWITCH FILL wide64 pQ``: phase 1 on lists of k until a switch point of ``--switch``
  (``u0.1``: after the first iteration inserting fewer than 0.1 x n x k entries; ``i5``: after 5
  iterations; the phase-1 run is shared, its lists copied at each switch point), then a new (n, 2k) graph
  whose first k columns are the phase-1 lists and the rest filled by one of ``--fills``:

  - ``random``: ``engine.init(..., keep=k, ...)``, as GGM fills its lists: random NEW ids, the kept
    entries all marked OLD (what the engines can do today; the random ids are not checked against the
    kept ones, so a few lists get a duplicate entry);
  - ``empty``: no entries (id -1, distance inf, OLD); the phase-1 entries keep their flags. The lists
    grow through the selective updates (an empty slot accepts any offer);
  - ``2hopAxB`` / ``2hopAxBold``: the 2k nearest of the phase-1 list and of the first B entries of the lists
    of its first A entries (neighbours of neighbours; the node, duplicates and listed ids dropped before
    any distance is computed; array code, NumPy or CuPy, and numba threads for the CPU's distances);
    phase-1 entries keep their flags, new ones are NEW (``old``: OLD; ``mix``: NEW among the first k, OLD
    behind). ``/rN`` appended: the same 2-hop
    pass again on the wide lists after N wide iterations;

  ``FILL@Q`` runs that fill only with tail sample size Q, a plain FILL once per ``--tail-p``. Then
  iterations on the wide lists with sample size Q until one inserts fewer than ``--threshold`` x n x 2k
  entries.

Each run records per iteration: entries inserted (and as a share of n x list width), seconds, graph recall@10
and @k of the first k columns (``benchmarks.runner.quality.GraphTruth``, ``--sample`` nodes, brute force;
not in the timings) and the work of the local joins counted from the engine's sample arrays after the
iteration (not in the timings): for each node the deduplicated NEW samples nn and OLD samples no (forward
and reverse, capped at p each, as both engines' joins gather them; NEW wins over OLD), then

* ``pairs``: sum of nn (nn - 1) / 2 + nn no over nodes with nn > 0, the distances the join computes (the
  CPU join exactly; the GPU join the same pairs, padded to 4 x 4 tiles);
* ``tiles``: sum of nb (nb + 1) / 2 + nb ob, nb = ceil(nn / 4), ob = ceil(no / 4): the GPU join's tiles;
* ``gathered``: sum of nn + no over nodes with nn > 0 (sample vectors loaded), ``active``: nodes with nn > 0.

``init_pairs`` counts the random lists' distances, ``widen_pairs`` the fill's (2-hop: distinct new
candidates; ``fill_candidates``: the ids gathered before deduplication), ``fill_recall@*`` the recall right
after the fill. The CPU's reverse samples are a seeded reservoir, the GPU's the atomic race order: the
counts are each engine's own. ``model_s_1M`` is a rough GPU time of the iterations (``GPU_MODEL``; no
init, no fill) for ranking CPU runs.

The summaries also give each run cut at looser stops (``--cuts``: the first iteration of the last phase
inserting fewer than that share of n x width; a cut of the recorded curve, as the iterations do not depend
on the stop) and where its recall@k first reaches each of ``--targets``. One JSON line per run in
``nndescent_wide_tail.jsonl`` under --out (with every iteration's record), a Markdown table on stdout.
Every schedule runs once on ``--warmup-rows`` rows first (JIT), unrecorded.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a script: python benchmarks/studies/NAME.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks._common import clustered  # noqa: E402
from benchmarks.runner.measure import JsonLines  # noqa: E402
from benchmarks.runner.quality import GraphTruth  # noqa: E402

NEW, OLD = 1, 0  # knngraph.nndescent._common's list flags


# --------------------------------------------------------------------------------------------------
# work of the local joins, from the engine's sample arrays


def _sample_arrays(engine, st):
    """(new_f, nf, new_r, nr, old_f, nof, old_r, nor) of the last iteration (both engines keep them)."""
    if engine.is_cuda:
        a = st.arrays
        return a["new_f"], a["nf"], a["new_r"], a["nr"], a["old_f"], a["nof"], a["old_r"], a["nor"]
    new_f, old_f, new_r, old_r, nf, nof, nr, nor = st.samples
    return new_f, nf, new_r, nr, old_f, nof, old_r, nor


def _distinct(xp, a):
    """Distinct ids >= 0 per row of ``a``."""
    s = xp.sort(a, axis=1)
    first = xp.concatenate([xp.ones((s.shape[0], 1), bool), s[:, 1:] != s[:, :-1]], axis=1)
    return ((s >= 0) & first).sum(axis=1)


def join_work(engine, st, p, rows=1 << 18) -> dict:
    """The last iteration's local-join work (see the module doc)."""
    xp = engine.xp
    new_f, nf, new_r, nr, old_f, nof, old_r, nor = _sample_arrays(engine, st)
    n = new_f.shape[0]
    pw = new_f.shape[1]
    cols = xp.arange(pw, dtype=np.int32)[None, :]
    tot = {"pairs": 0, "tiles": 0, "gathered": 0, "active": 0}
    for lo in range(0, n, rows):
        hi = min(n, lo + rows)

        def part(ids, cnt):
            c = xp.minimum(cnt[lo:hi], pw)[:, None]
            return xp.where(cols < c, ids[lo:hi], np.int32(-1))

        new = xp.concatenate([part(new_f, nf), part(new_r, nr)], axis=1)
        both = xp.concatenate([new, part(old_f, nof), part(old_r, nor)], axis=1)
        nn = _distinct(xp, new).astype(np.int64)
        no = _distinct(xp, both).astype(np.int64) - nn
        act = nn > 0
        nb = (nn + 3) // 4
        ob = (no + 3) // 4
        vals = xp.stack([xp.where(act, nn * (nn - 1) // 2 + nn * no, 0), xp.where(act, nb * (nb + 1) // 2 + nb * ob, 0),
                         xp.where(act, nn + no, 0), act.astype(np.int64)]).sum(axis=1)
        vals = [int(v) for v in (vals.get() if hasattr(vals, "get") else vals)]
        for key, v in zip(("pairs", "tiles", "gathered", "active"), vals):
            tot[key] += v
    return tot


# --------------------------------------------------------------------------------------------------
# filling the wide lists


def _sort_keys(xp, d, ids):
    """int64 keys whose order is the lists' (distance, id) order, for non-negative float32 distances
    (squared L2); empty entries (id -1, inf) last."""
    bits = d.astype(np.float32).view(np.int32).astype(np.int64)
    return (bits << 32) | xp.where(ids >= 0, ids, np.int32(0x7FFFFFFF)).astype(np.int64)


_PAIR_KERNEL = {}

#: CUDA source of the GPU's pair distances (one warp per pair, float32 rows): the array code gathers both
#: rows of every pair into temporaries, three times the memory traffic (``--pair-kernel array``)
_PAIR_SRC = r"""
extern "C" __global__ void pair_l2(const float* x, const long long* rows, const long long* ids, float* out,
                                   const long long n, const int d) {
    const long long t = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (t >= n) return;  // the whole warp: t is the warp's
    const float* a = x + rows[t] * (long long)d;
    const float* b = x + ids[t] * (long long)d;
    float acc = 0.0f;
    for (int q = lane; q < d; q += 32) {
        const float e = a[q] - b[q];
        acc += e * e;
    }
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
    if (lane == 0) out[t] = acc;
}
"""


def _pair_distances(engine, x, rows, ids, mode="raw", block=1 << 19):
    """Squared L2 distances of x[rows[i]] to x[ids[i]] (1-D index arrays): numba threads on the CPU; on the
    GPU a small CUDA kernel (``mode`` "raw", float32 rows) or array code in blocks ("array")."""
    xp = engine.xp
    if xp is np:
        if "cpu" not in _PAIR_KERNEL:
            import numba

            @numba.njit(parallel=True, fastmath=True)
            def pairs(x, rows, ids, out):
                for t in numba.prange(rows.shape[0]):
                    u = rows[t]
                    v = ids[t]
                    acc = np.float32(0.0)
                    for q in range(x.shape[1]):
                        e = np.float32(x[u, q]) - np.float32(x[v, q])
                        acc += e * e
                    out[t] = acc

            _PAIR_KERNEL["cpu"] = pairs
        out = np.empty(rows.shape[0], np.float32)
        _PAIR_KERNEL["cpu"](x, rows.astype(np.int64), ids.astype(np.int64), out)
        return out
    out = xp.empty(rows.shape[0], np.float32)
    m = int(rows.shape[0])
    if mode == "raw" and x.dtype == np.float32 and x.flags.c_contiguous:
        if "cuda" not in _PAIR_KERNEL:
            _PAIR_KERNEL["cuda"] = xp.RawKernel(_PAIR_SRC, "pair_l2")
        if m:
            warps = 8
            _PAIR_KERNEL["cuda"](((m + warps - 1) // warps,), (32 * warps,),
                                 (x, xp.ascontiguousarray(rows, dtype=xp.int64),
                                  xp.ascontiguousarray(ids, dtype=xp.int64), out, np.int64(m), np.int32(x.shape[1])))
        return out
    for lo in range(0, m, block):
        diff = x[rows[lo:lo + block]].astype(np.float32) - x[ids[lo:lo + block]].astype(np.float32)
        out[lo:lo + block] = (diff * diff).sum(axis=1)
    return out


def two_hop(engine, x, gd1, gi1, gf1, width, a, b, flags, rows=None, pair_kernel="raw"):
    """(n, width) lists: the ``width`` nearest of each list and of the first ``b`` entries of the lists of its
    first ``a`` entries (neighbours of neighbours; the node itself, duplicates and ids already listed are
    dropped before any distance is computed). Listed entries keep their flags; new ones are NEW (``flags``
    "new"), OLD ("old"), or NEW among the first width / 2 and OLD behind ("mix").
    Squared L2 only. Returns (gd, gi, gf, {"candidates": 2-hop ids gathered, "computed": distances
    computed, i.e. distinct new candidates})."""
    xp = engine.xp
    n, k = gd1.shape
    rows = rows or (2048 if xp is np else 1 << 15)  # nodes per block of array code
    gd, gi, gf = engine.new_graph(n, width)
    candidates = 0
    computed = 0
    m = k + a * b
    col = xp.arange(m, dtype=np.int64)[None, :]
    for lo in range(0, n, rows):
        hi = min(n, lo + rows)
        h = hi - lo
        li, ld, lf = gi1[lo:hi], gd1[lo:hi], gf1[lo:hi]
        first = li[:, :a]
        hop = gi1[xp.maximum(first, 0)][:, :, :b]
        hop = xp.where((first >= 0)[:, :, None], hop, np.int32(-1)).reshape(h, a * b)
        own = xp.arange(lo, hi, dtype=np.int32)[:, None]
        hop = xp.where(hop == own, np.int32(-1), hop)
        candidates += int((hop >= 0).sum())
        all_i = xp.concatenate([li, hop], axis=1)
        all_d = xp.concatenate([ld, xp.full((h, a * b), np.inf, np.float32)], axis=1)
        all_f = xp.concatenate([lf, xp.full((h, a * b), OLD if flags == "old" else NEW, np.uint8)], axis=1)
        # by id, the listed copy (lower column) first: later copies are duplicates
        key = xp.where(all_i >= 0, all_i.astype(np.int64), np.int64(1 << 40)) * m + col
        order = xp.argsort(key, axis=1)
        si = xp.take_along_axis(all_i, order, 1)
        sd = xp.take_along_axis(all_d, order, 1)
        sf = xp.take_along_axis(all_f, order, 1)
        dup = xp.concatenate([xp.zeros((h, 1), bool), si[:, 1:] == si[:, :-1]], axis=1) | (si < 0)
        need = ~dup & (order >= k)
        origin = order  # column of origin: < k for listed entries
        r, c = xp.nonzero(need)
        computed += int(r.shape[0])
        sd[r, c] = _pair_distances(engine, x, r.astype(np.int64) + lo, si[r, c], pair_kernel)
        si = xp.where(dup, np.int32(-1), si)
        sd = xp.where(dup, np.float32(np.inf), sd)
        order = xp.argsort(_sort_keys(xp, sd, si), axis=1)[:, :width]
        oi = xp.take_along_axis(si, order, 1)
        gi[lo:hi] = oi
        gd[lo:hi] = xp.take_along_axis(sd, order, 1)
        of = xp.take_along_axis(sf, order, 1)
        if flags == "mix":
            listed = xp.take_along_axis(origin, order, 1) < k
            of = xp.where(listed | (xp.arange(width)[None, :] < width // 2), of, np.uint8(OLD))
        gf[lo:hi] = xp.where(oi >= 0, of, np.uint8(OLD))
    return gd, gi, gf, {"candidates": candidates, "computed": computed}


def widen(engine, x, inv, kind, gd1, gi1, gf1, width, fill, seed, pair_kernel="raw"):
    """(gd, gi, gf, {"candidates": ids gathered, "computed": distances computed}): the phase-1 lists in a graph
    of ``width`` columns (see the module doc)."""
    n, k = gd1.shape
    if fill.startswith("2hop"):
        spec = fill[4:].partition("/")[0]
        flags = "old" if spec.endswith("old") else "mix" if spec.endswith("mix") else "new"
        a, b = (int(v) for v in spec.removesuffix("old").removesuffix("mix").split("x"))
        return two_hop(engine, x, gd1, gi1, gf1, width, a, b, flags, pair_kernel=pair_kernel)
    gd, gi, gf = engine.new_graph(n, width)
    gd[:, :k] = gd1
    gi[:, :k] = gi1
    if fill == "random":
        engine.init(x, inv, kind, gd, gi, gf, k, 0, seed + 1)
        return gd, gi, gf, {"candidates": n * (width - k), "computed": n * (width - k)}
    if fill == "empty":
        gf[:, :k] = gf1
        gd[:, k:] = np.float32(np.inf)
        gi[:, k:] = np.int32(-1)
        gf[:, k:] = np.uint8(OLD)
        return gd, gi, gf, {"candidates": 0, "computed": 0}
    raise ValueError(f"unknown fill {fill!r}: random, empty, 2hopAxB or 2hopAxBold")


# --------------------------------------------------------------------------------------------------
# iterations


def _copy(engine, *arrays):
    return tuple(engine.xp.array(a, copy=True) for a in arrays)


def iterate(engine, x, inv, kind, gd, gi, gf, *, p, seed, it0, threshold, max_iterations, truth, k, phase,
            on_iteration=None):
    """Iterations until one inserts fewer than threshold x n x width entries; per-iteration records."""
    n, width = gd.shape
    t0 = time.perf_counter()
    st = engine.start_refine(x, inv, kind, gd, gi, gf, p=p, seed=seed, split=0, selective=True)
    engine.synchronize()
    setup = time.perf_counter() - t0
    recs = []
    for j in range(max_iterations):
        t0 = time.perf_counter()
        inserted = engine.iterate(st, it0 + j)
        engine.synchronize()
        sec = time.perf_counter() - t0 + (setup if j == 0 else 0.0)
        work = join_work(engine, st, p)
        rec = {"phase": phase, "width": width, "p": p, "inserted": int(inserted), "share": inserted / (n * width),
               "seconds": sec, **work, "recall@10": truth.recall(gi[:, :k], 10),
               f"recall@{k}": truth.recall(gi[:, :k], k)}
        recs.append(rec)
        if on_iteration is not None:
            on_iteration(j, rec)
        if inserted < threshold * n * width:
            break
    return recs


def _snapshot_due(spec: str, j: int, rec: dict) -> bool:
    if spec.startswith("i"):
        return j + 1 == int(spec[1:])
    if spec.startswith("u"):
        return rec["share"] < float(spec[1:])
    raise ValueError(f"switch {spec!r}: uSHARE (update share) or iN (iterations)")


#: a rough GPU time model (seconds per iteration at 1M rows): fixed + per sample vector gathered per node +
#: per 4 x 4 tile per node, fitted by hand to three points of the H200 curve of the library's build at 1M
#: rows (iterations 1-3: 0.22 s, 10: 0.14 s, 13-17: 0.064 s each) against this study's CPU counts at 200k
#: rows (whose recall per iteration follows the GPU's within about one iteration); it reproduces that
#: build's 2.38 s (measured 2.42 s) and the lists of 32's 1.36 s (measured 1.23 s). Only for ranking CPU runs.
GPU_MODEL = (0.032, 0.0024, 0.00024)


def model_seconds(recs, n) -> float:
    a, b, c = GPU_MODEL
    return sum(a + b * r["gathered"] / n + c * r["tiles"] / n for r in recs)


def prefix(recs, i, n, k, base_s, base_pairs) -> dict:
    """Totals of the first i + 1 iterations of a run."""
    head = recs[:i + 1]
    r = recs[i]
    return {"iterations": i + 1, "seconds": base_s + sum(h["seconds"] for h in head),
            "pairs": base_pairs + sum(h["pairs"] for h in head), "tiles": sum(h["tiles"] for h in head),
            "gathered": sum(h["gathered"] for h in head), "model_s_1M": model_seconds(head, n),
            "recall@10": r["recall@10"], f"recall@{k}": r[f"recall@{k}"]}


def summarize(name, n, k, recs, base_s, base_pairs, cut_shares, targets) -> dict:
    """Totals of a run's records (all of them), cut at looser stops (the first iteration of the last phase
    that inserts fewer than each share x n x width) and where recall@k first reaches each target (an
    oracle, not a stop rule: the work a schedule needs for a given quality)."""
    out = {"variant": name, **prefix(recs, len(recs) - 1, n, k, base_s, base_pairs)}
    last = recs[-1]["phase"]
    out["cuts"] = []
    for share in cut_shares:
        i = next((i for i, r in enumerate(recs) if r["phase"] == last and r["inserted"] < share * n * r["width"]),
                 None)
        if i is not None:
            out["cuts"].append({"stop_share": share, **prefix(recs, i, n, k, base_s, base_pairs)})
    out["reach"] = []
    for target in targets:
        i = next((i for i, r in enumerate(recs) if r[f"recall@{k}"] >= target), None)
        if i is not None:
            out["reach"].append({"target": target, **prefix(recs, i, n, k, base_s, base_pairs)})
    return out


def run_all(engine, data, k, args, truth, log=None, common=None):
    """Every schedule on ``data``; returns the summary rows."""
    from knngraph.primitives.distances import distance_kind

    kind = distance_kind("sqeuclidean")
    xp = engine.xp
    x, inv = engine.prepare(data, kind)
    n = x.shape[0]
    width = 2 * k
    seed = args.seed
    cut_shares = [float(s) for s in args.cuts.split(",") if s]
    targets = [float(s) for s in args.targets.split(",") if s]
    rows = []

    def record(name, recs, init_s, init_pairs, extra=None, widen_s=0.0, widen_pairs=0, head=None):
        allrecs = (head or []) + recs
        s = summarize(name, n, k, allrecs, init_s + widen_s, init_pairs + widen_pairs, cut_shares, targets)
        s.update(extra or {})
        rows.append(s)
        if log is not None:
            log.write(**common, **s, init_s=init_s, init_pairs=init_pairs, widen_s=widen_s, widen_pairs=widen_pairs,
                      per_iteration=allrecs)
        return s

    def random_lists(x, inv, columns):
        """(gd, gi, gf, seconds) of a new graph of random lists of ``columns`` entries of ``x``."""
        t0 = time.perf_counter()
        lists = engine.new_graph(n, columns)
        engine.init(x, inv, kind, *lists, 0, 0, seed)
        engine.synchronize()
        return (*lists, time.perf_counter() - t0)

    # --- baseline: lists of 2k from the start
    for p in args.p_list:
        gd, gi, gf, init_s = random_lists(x, inv, width)
        recs = iterate(engine, x, inv, kind, gd, gi, gf, p=p, seed=seed, it0=0, threshold=args.threshold,
                       max_iterations=args.max_iterations, truth=truth, k=k, phase="wide")
        record(f"wide{width} p{p}", recs, init_s, n * width, {"schedule": "wide", "p1": p})
        del gd, gi, gf

    # --- phase 1 on lists of k, to the threshold (the 'short' reference), snapshots at the switch points
    switches = [s for s in args.switch.split(",") if s]
    for p1 in args.p1_list:
        gd1, gi1, gf1, init_s = random_lists(x, inv, k)
        snaps = {}
        history = []

        def on_iteration(j, rec):
            history.append(rec)
            for spec in switches:
                if spec not in snaps and _snapshot_due(spec, j, rec):
                    snaps[spec] = (j + 1, list(history), _copy(engine, gd1, gi1, gf1))

        recs = iterate(engine, x, inv, kind, gd1, gi1, gf1, p=p1, seed=seed, it0=0, threshold=args.threshold,
                       max_iterations=args.max_iterations, truth=truth, k=k, phase="short",
                       on_iteration=on_iteration)
        record(f"short{k} p{p1}", recs, init_s, n * k, {"schedule": "short", "p1": p1})
        for spec in switches:
            if spec not in snaps:
                print(f"# switch {spec} never reached (p1={p1})", flush=True)
                continue
            its, head, (sd, si, sf) = snaps[spec]
            for fill_spec in (f for f in args.fills.split(",") if f):
                fill, _, only = fill_spec.partition("@")
                for p2 in ([int(only)] if only else args.tail_p_list):
                    engine.synchronize()
                    t0 = time.perf_counter()
                    gd, gi, gf, fill_work = widen(engine, x, inv, kind, sd, si, sf, width, fill, seed,
                                                  args.pair_kernel)
                    engine.synchronize()
                    widen_s = time.perf_counter() - t0
                    wp = fill_work["computed"]
                    filled = {"fill_candidates": fill_work["candidates"], "fill_recall@10": truth.recall(gi[:, :k], 10),
                              f"fill_recall@{k}": truth.recall(gi[:, :k], k)}
                    refill = int(fill.partition("/r")[2] or 0)
                    recs = iterate(engine, x, inv, kind, gd, gi, gf, p=p2, seed=seed + 1, it0=its,
                                   threshold=args.threshold, max_iterations=refill or args.max_iterations,
                                   truth=truth, k=k, phase="wide")
                    if refill and len(recs) == refill:
                        # '/rN': the same 2-hop pass again on the wide lists after N wide iterations
                        engine.synchronize()
                        t0 = time.perf_counter()
                        gd, gi, gf, again = widen(engine, x, inv, kind, gd, gi, gf, width, fill, seed,
                                                  args.pair_kernel)
                        engine.synchronize()
                        widen_s += time.perf_counter() - t0
                        wp += again["computed"]
                        filled.update(refill_candidates=again["candidates"],
                                      refill_recall10=truth.recall(gi[:, :k], 10),
                                      refill_recall=truth.recall(gi[:, :k], k))
                        recs += iterate(engine, x, inv, kind, gd, gi, gf, p=p2, seed=seed + 2, it0=its + refill,
                                        threshold=args.threshold, max_iterations=args.max_iterations - refill,
                                        truth=truth, k=k, phase="wide2")
                    record(f"short{k} p{p1} >{spec} {fill} wide{width} p{p2}", recs, init_s, n * k,
                           {"schedule": "short>wide", "p1": p1, "switch": spec, "switch_iterations": its,
                            "fill": fill, "p2": p2,
                            "switch_recall@10": head[-1]["recall@10"], f"switch_recall@{k}": head[-1][f"recall@{k}"],
                            **filled},
                           widen_s=widen_s, widen_pairs=wp, head=head)
                    del gd, gi, gf
        snaps.clear()  # (the phase-1 lists stay bound: on_iteration refers to them)
    del x, inv
    if xp is not np:
        xp.get_default_memory_pool().free_all_blocks()
    return rows


def _fmt(t, n, k) -> str:
    return (f"{t['iterations']} / {t['seconds']:.1f} / {t['pairs'] / n:.0f} / {t['gathered'] / n:.0f} / "
            f"{t['model_s_1M']:.2f} / {t['recall@10']:.4f} / {t[f'recall@{k}']:.4f}")


def table(rows, n, k) -> str:
    """Markdown: each run at its stop, at the looser cuts and where it first reaches the recall targets;
    cells: iterations / CPU s / pairs per node / gathered per node / model GPU s at 1M / recall@10 / @k."""
    shares = sorted({c["stop_share"] for r in rows for c in r["cuts"]})
    targets = sorted({c["target"] for r in rows for c in r["reach"]})
    head = ["variant", "stop"] + [f"cut {s}" for s in shares] + [f"reach r@{k} {t}" for t in targets]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cuts = {c["stop_share"]: c for c in r["cuts"]}
        got = {c["target"]: c for c in r["reach"]}
        cells = [r["variant"], _fmt(r, n, k)] + [_fmt(cuts[s], n, k) if s in cuts else "-" for s in shares]
        cells += [_fmt(got[t], n, k) if t in got else "-" for t in targets]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def report(path, cut_shares, targets):
    """The tables of a results file (summaries recomputed from its per-iteration records)."""
    import json

    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    for key in sorted({(r["device"], r["n"], r["clusters"], r["k"]) for r in rows}):
        device, n, _, k = key
        group = [r for r in rows if (r["device"], r["n"], r["clusters"], r["k"]) == key]
        summ = [summarize(r["variant"], n, k, r["per_iteration"], r["init_s"] + r["widen_s"],
                          r["init_pairs"] + r["widen_pairs"], cut_shares, targets) for r in group]
        print(f"\n{device}, n={n}, clusters={group[0]['clusters']}, k={k}; cells: iterations / CPU s / pairs per "
              f"node / gathered per node / model GPU s at 1M / recall@10 / recall@{k}\n")
        print(table(summ, n, k), flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--sizes", default="200000")
    ap.add_argument("--clusters", type=int, default=0,
                    help="overlapping clusters (0: n / --rows-per-cluster; the GPU study: 1000 at 1M)")
    ap.add_argument("--rows-per-cluster", type=int, default=1000)
    ap.add_argument("--k", type=int, default=32)
    ap.add_argument("--p", default="32,16", help="sample sizes of the baseline (comma-separated)")
    ap.add_argument("--p1", default="32", help="sample sizes of phase 1 (comma-separated)")
    ap.add_argument("--tail-p", default="32,16", help="sample sizes of the wide phase (comma-separated)")
    ap.add_argument("--switch", default="u0.1,i4", help="phase-1 switch points: uSHARE or iN")
    ap.add_argument("--fills", default="empty,random@32,2hop8x8@16,2hop16x16old@16,2hop32x16old@16,2hop32x32old@16,"
                                       "2hop32x16mix@16,2hop32x32mix@16",
                    help="fills of the wide lists; FILL@P: only with tail sample size P")
    ap.add_argument("--threshold", type=float, default=0.001, help="stop share of n x width (library default)")
    ap.add_argument("--cuts", default="0.003,0.005,0.01", help="looser stop shares evaluated on the curves")
    ap.add_argument("--targets", default="0.98,0.99", help="recall@k levels whose cost is reported")
    ap.add_argument("--max-iterations", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sample", type=int, default=1000)
    ap.add_argument("--warmup-rows", type=int, default=20000)
    ap.add_argument("--pair-kernel", default="raw", choices=("raw", "array"),
                    help="GPU: the 2-hop fill's distances by a small CUDA kernel or by CuPy array code")
    ap.add_argument("--out", default="out")
    ap.add_argument("--report", default="", help="print the tables of this results file and exit")
    args = ap.parse_args(argv)
    if args.report:
        report(args.report, [float(s) for s in args.cuts.split(",") if s],
               [float(s) for s in args.targets.split(",") if s])
        return
    args.p_list = [int(v) for v in args.p.split(",") if v]
    args.p1_list = [int(v) for v in args.p1.split(",") if v]
    args.tail_p_list = [int(v) for v in args.tail_p.split(",") if v]

    from knngraph._device import Device
    from knngraph.nndescent import _build

    engine = _build.make_engine(Device(args.device))
    k = args.k
    if args.device == "cuda":
        import cupy as cp

        def make(n, seed, clusters):
            return clustered(n, 128, seed=seed, overlapping=True, xp=cp, n_centers=clusters, on_device=True)
        threads = None
    else:
        import numba

        def make(n, seed, clusters):
            return clustered(n, 128, seed=seed, overlapping=True, xp=np, n_centers=clusters)
        threads = numba.get_num_threads()
    log = JsonLines(Path(args.out) / "nndescent_wide_tail.jsonl")
    with engine:
        if args.warmup_rows:
            warm = make(args.warmup_rows, args.seed + 1, max(1, args.warmup_rows // args.rows_per_cluster))
            # every kernel and array path of the schedules: a switch after 1 iteration, 3 iterations at most
            wargs = argparse.Namespace(**{**vars(args), "max_iterations": 3, "switch": "i1"})
            run_all(engine, warm, k, wargs, GraphTruth(warm, "sqeuclidean", k, sample=50, device=args.device))
            del warm
        for n in (int(s) for s in args.sizes.split(",")):
            clusters = args.clusters or max(1, n // args.rows_per_cluster)
            base = make(n, args.seed, clusters)
            truth = GraphTruth(base, "sqeuclidean", k, sample=args.sample, device=args.device)
            common = {"device": args.device, "n": n, "d": 128, "clusters": clusters, "k": k, "threads": threads,
                      "pair_kernel": args.pair_kernel if args.device == "cuda" else None,
                      "threshold": args.threshold, "sample_nodes": args.sample}
            rows = run_all(engine, base, k, args, truth, log, common)
            print(f"# n={n} clusters={clusters} device={args.device}")
            print(table(rows, n, k), flush=True)
            del base, truth


if __name__ == "__main__":
    main()
