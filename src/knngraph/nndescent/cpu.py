"""NN-Descent on the CPU (numba, parallel): the same iteration as the GPU path (GNND, paper 004), with
the update step that suits a CPU.

One iteration (GNND Alg. 1, section 4):

1. **Sample** (section 4.1). Each node takes the first ``p`` NEW and the first ``p`` OLD entries of its
   list (nearest first) as forward samples; the NEW ones it sampled become OLD. Reverse samples: node
   ``s`` is offered to the reverse list of each forward sample ``v``, capped at ``p`` entries by
   reservoir sampling with a seeded hash (the GPU gets its random choice from the race order of atomic
   appends; the CPU needs a reproducible one).
2. **Local join** (section 4.2). For each node, NEW = forward + reverse NEW samples, OLD = forward +
   reverse OLD samples minus NEW, deduplicated; distances of every NEW-NEW and NEW-OLD pair.
3. **Update** (section 4.3). ``update="all"`` offers every pair that beats the current worst entry of
   either end to both lists (classic NN-Descent, GNND's "r1" ablation). ``update="selective"`` is GNND's
   selective update: a NEW sample receives only its nearest NEW and its nearest OLD partner, an OLD sample
   only its nearest NEW partner. On a CPU distance computations dominate, so "all" reaches a given
   recall sooner and is the CPU default; "selective" reproduces the GPU scheme.

Determinism: nodes are joined in blocks; the join of a block only reads the graph and writes each node's
updates into its own slots, then the updates are applied by ``T`` workers, worker ``t`` owning the lists
of nodes ``u % T == t`` and applying their updates in block order. Each list therefore sees the same
updates in the same order whatever the thread count and schedule: same seed, same graph.

Graph merge (GGM, section 5.1) runs the same iteration with ``split > 0``: nodes [0, split) and
[split, n) are two subsets whose graphs are already built, and pairs inside one subset are skipped.

Lists are kept sorted by (distance, id); distances are internal values (squared L2, -dot, 1 - cos).
"""

from __future__ import annotations

import time

import numba
import numpy as np
from numba import prange

from .._device import as_numpy
from .._distances import DIST_COS, cpu_distance, cpu_vectors, inverse_norms
from .._progress import progress
from ._common import NEW, OLD, candidate_range, less, mix, progression

__all__ = ["init_graph", "sample_forward", "sample_reverse", "local_join", "apply_updates", "merge_lists",
           "refine_cpu", "join_capacity", "CpuEngine"]


@numba.njit(inline="always")
def _sort_row(gd, gi, gf, s):
    """Insertion sort of row ``s`` by (distance, id)."""
    k = gd.shape[1]
    for j in range(1, k):
        d = gd[s, j]
        v = gi[s, j]
        f = gf[s, j]
        t = j
        while t > 0 and less(d, v, gd[s, t - 1], gi[s, t - 1]):
            gd[s, t] = gd[s, t - 1]
            gi[s, t] = gi[s, t - 1]
            gf[s, t] = gf[s, t - 1]
            t -= 1
        gd[s, t] = d
        gi[s, t] = v
        gf[s, t] = f


def init_graph(x, inv, kind, gd, gi, gf, keep, split, seed):
    """Random initial lists (GNND Alg. 1 l.1-5): entries [keep, k) of each row get distinct random ids
    from the node's candidate range (:func:`candidate_range`) and are NEW; entries [0, keep) are kept as
    given (GGM: the first half of the subset's own list) and are OLD. Rows end up sorted."""
    n, k = gd.shape
    for s in prange(n):
        lo, m, skip = candidate_range(s, n, split)
        fill = min(k - keep, m)
        start, step = progression(seed, s, m)
        for j in range(fill):
            v = lo + (start + j * step) % m
            if skip >= 0 and v >= skip:
                v += 1
            gi[s, keep + j] = v
            gd[s, keep + j] = cpu_distance(kind, x, s, x, v, inv, inv)
            gf[s, keep + j] = NEW
        for j in range(keep + fill, k):
            gi[s, j] = -1
            gd[s, j] = np.inf
            gf[s, j] = OLD
        for j in range(keep):
            gf[s, j] = OLD
        _sort_row(gd, gi, gf, s)


def sample_forward(gi, gf, p, split, new_f, nf, old_f, nof):
    """First ``p`` NEW and first ``p`` OLD entries of each list; sampled NEW entries become OLD
    (Alg. 1 l.32). In a merge, OLD entries in the other subset are not sampled: all their partners would
    be in the other subset too, so they could only produce skipped pairs."""
    n, k = gi.shape
    for s in prange(n):
        cn = 0
        co = 0
        for j in range(k):
            v = gi[s, j]
            if v < 0:
                continue
            if gf[s, j] == NEW:
                if cn < p:
                    new_f[s, cn] = v
                    cn += 1
                    gf[s, j] = OLD
            elif co < p and (split == 0 or (v < split) == (s < split)):
                old_f[s, co] = v
                co += 1
        nf[s] = cn
        nof[s] = co


@numba.njit(cache=True)
def sample_reverse(fwd, nfwd, p, rev, nrev, seed, salt):
    """Reverse samples: ``s`` joins ``rev[v]`` for each forward sample ``v`` of ``s``, keeping a uniform
    sample of at most ``p`` by reservoir sampling. ``nrev[v]`` ends as the number offered (use
    ``min(nrev[v], p)``). Serial: it is O(n p) and its order makes the sample reproducible."""
    n = fwd.shape[0]
    nrev[:] = 0
    for s in range(n):
        for t in range(nfwd[s]):
            v = fwd[s, t]
            c = nrev[v]
            if c < p:
                rev[v, c] = s
            else:
                r = mix(seed, salt + np.int64(v) * 977, np.int64(c) * 1000003 + s) % (c + 1)
                if r < p:
                    rev[v, r] = s
            nrev[v] = c + 1


def join_capacity(p: int, selective: bool) -> int:
    """Update slots one node's local join may need: every NEW-NEW and NEW-OLD pair, or (selective) two
    per NEW sample and one per OLD sample; NEW and OLD samples number at most 2p each."""
    m = 2 * p
    return 3 * m if selective else m * (m - 1) // 2 + m * m


@numba.njit(inline="always")
def _append_unique(ids, m, v):
    """Append ``v`` to ids[:m] unless it is already there; returns the new length."""
    for t in range(m):
        if ids[t] == v:
            return m
    ids[m] = v
    return m + 1


@numba.njit(inline="always")
def _gather_samples(s, p, new_f, nf, new_r, nr, old_f, nof, old_r, nor, ids):
    """NEW then OLD sample ids of node ``s`` into ``ids``, deduplicated; returns (n_new, n_old)."""
    nn = 0
    for j in range(nf[s] + min(nr[s], p)):
        nn = _append_unique(ids, nn, new_f[s, j] if j < nf[s] else new_r[s, j - nf[s]])
    m = nn
    for j in range(nof[s] + min(nor[s], p)):
        m = _append_unique(ids, m, old_f[s, j] if j < nof[s] else old_r[s, j - nof[s]])
    return nn, m - nn


def local_join(x, inv, kind, gd, new_f, nf, new_r, nr, old_f, nof, old_r, nor, p, split, selective,
               lo, hi, cap, upd_u, upd_v, upd_d, upd_n):
    """Local join of nodes [lo, hi): node ``s = lo + t`` writes its updates (u, v, d) into slots
    [t * cap, t * cap + upd_n[t]). ``selective``: (u, v) offers v to u only, else to both ends."""
    k = gd.shape[1]
    dim = x.shape[1]
    for t in prange(hi - lo):
        s = lo + t
        ids = np.empty(4 * p, np.int32)
        nn, no = _gather_samples(s, p, new_f, nf, new_r, nr, old_f, nof, old_r, nor, ids)
        m = nn + no
        base = t * cap
        c = 0
        if nn == 0:
            upd_n[t] = 0
            continue
        # gather the sample vectors once (contiguous float32 rows, cache friendly)
        buf = np.empty((m, dim), np.float32)
        binv = np.empty(m, np.float32)
        worst = np.empty(m, np.float32)
        for r in range(m):
            v = ids[r]
            for q in range(dim):
                buf[r, q] = np.float32(x[v, q])
            binv[r] = inv[v] if inv.shape[0] > 0 else np.float32(0)
            worst[r] = gd[v, k - 1]
        if not selective:
            # an update names the ends it may improve: an id stored as -1 - id is not offered that pair
            for i in range(nn):
                u = ids[i]
                for j in range(i + 1, m):
                    v = ids[j]
                    if split > 0 and (u < split) == (v < split):
                        continue
                    d = cpu_distance(kind, buf, i, buf, j, binv, binv)
                    to_u = d < worst[i]
                    to_v = d < worst[j]
                    if to_u or to_v:
                        upd_u[base + c] = u if to_u else -1 - u
                        upd_v[base + c] = v if to_v else -1 - v
                        upd_d[base + c] = d
                        c += 1
        else:
            dm = np.full((m, m), np.inf, np.float32)
            for i in range(nn):
                u = ids[i]
                for j in range(i + 1, m):
                    v = ids[j]
                    if split > 0 and (u < split) == (v < split):
                        continue
                    d = cpu_distance(kind, buf, i, buf, j, binv, binv)
                    dm[i, j] = d
                    dm[j, i] = d
            # GNND Alg. 2 GetNearestObject: nearest NEW and nearest OLD partner of a NEW sample,
            # nearest NEW partner of an OLD sample; ties to the lower id
            for r in range(m):
                u = ids[r]
                wu = worst[r]
                for part in range(2):
                    if r >= nn and part == 1:
                        break
                    a0 = 0 if part == 0 else nn
                    a1 = nn if part == 0 else m
                    bd = np.float32(np.inf)
                    bv = -1
                    for j in range(a0, a1):
                        if j != r and less(dm[r, j], ids[j], bd, bv):
                            bd = dm[r, j]
                            bv = ids[j]
                    if bv >= 0 and bd < wu:
                        upd_u[base + c] = u
                        upd_v[base + c] = bv
                        upd_d[base + c] = bd
                        c += 1
        upd_n[t] = c


@numba.njit(inline="always")
def _insert(gd, gi, gf, u, v, d):
    """Insert (d, v) into u's sorted list unless it is not better than the last entry or already there."""
    k = gd.shape[1]
    if not less(d, v, gd[u, k - 1], gi[u, k - 1]):
        return 0
    for j in range(k):
        if gi[u, j] == v:
            return 0
    j = k - 1
    while j > 0 and less(d, v, gd[u, j - 1], gi[u, j - 1]):
        gd[u, j] = gd[u, j - 1]
        gi[u, j] = gi[u, j - 1]
        gf[u, j] = gf[u, j - 1]
        j -= 1
    gd[u, j] = d
    gi[u, j] = v
    gf[u, j] = NEW
    return 1


def apply_updates(gd, gi, gf, n_nodes, cap, upd_u, upd_v, upd_d, upd_n, symmetric, n_workers):
    """Apply a block's updates; worker w owns the lists of the w-th of n_workers id ranges (see module
    doc). (u, v, d) offers v to u when u >= 0 and, if ``symmetric``, u to v when v >= 0 (an end stored
    as -1 - id is not offered). Returns how many entries were inserted."""
    n = gd.shape[0]
    counts = np.zeros(n_workers, np.int64)
    for w in prange(n_workers):
        lo = w * n // n_workers
        hi = (w + 1) * n // n_workers
        for t in range(n_nodes):
            base = t * cap
            for e in range(upd_n[t]):
                u = upd_u[base + e]
                v = upd_v[base + e]
                if lo <= u < hi:
                    counts[w] += _insert(gd, gi, gf, u, v if v >= 0 else -1 - v, upd_d[base + e])
                if symmetric and lo <= v < hi:
                    counts[w] += _insert(gd, gi, gf, v, u if u >= 0 else -1 - u, upd_d[base + e])
    return counts.sum()


def merge_lists(ad, ai, bd, bi, out_d, out_i):
    """Per row: the first k (= out width) distinct ids of the (distance, id)-sorted rows a and b, merged;
    -1 entries are skipped and missing ones padded with (inf, -1). Used to re-add GGM's removed halves
    (Alg. 3 l.12) and to fold shard-pair results into the global lists (section 5)."""
    n = ad.shape[0]
    ka = ad.shape[1]
    kb = bd.shape[1]
    k = out_d.shape[1]
    for r in prange(n):
        i = 0
        j = 0
        c = 0
        while c < k and (i < ka or j < kb):
            take_a = j >= kb or (i < ka and less(ad[r, i], ai[r, i], bd[r, j], bi[r, j]))
            if take_a:
                d = ad[r, i]
                v = ai[r, i]
                i += 1
            else:
                d = bd[r, j]
                v = bi[r, j]
                j += 1
            if v < 0:
                continue
            dup = False
            for t in range(c):
                if out_i[r, t] == v:
                    dup = True
                    break
            if not dup:
                out_d[r, c] = d
                out_i[r, c] = v
                c += 1
        for t in range(c, k):
            out_d[r, t] = np.inf
            out_i[r, t] = -1


# --------------------------------------------------------------------------------------------------
# Every parallel kernel is compiled twice: with threads, and serial for small inputs. A parallel call
# costs a thread wake-up (milliseconds on a busy machine), which dominates the many small calls of
# shard-pair merges.

SERIAL_BELOW = 8192


def _compile_both(fn, fastmath):
    import types

    par = numba.njit(parallel=True, fastmath=fastmath, cache=True)(fn)
    twin = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__ + "_serial", fn.__defaults__, fn.__closure__)
    twin.__qualname__ = fn.__qualname__ + "_serial"
    twin.__doc__ = fn.__doc__
    ser = numba.njit(parallel=False, fastmath=fastmath, cache=True)(twin)
    return par, ser


_PARALLEL = {}
for _fn, _fast in ((init_graph, True), (sample_forward, False), (local_join, True), (apply_updates, False),
                   (merge_lists, False)):
    _PARALLEL[_fn.__name__] = _compile_both(_fn, _fast)


init_graph, sample_forward, local_join, apply_updates, merge_lists = (
    _PARALLEL[name][0] for name in ("init_graph", "sample_forward", "local_join", "apply_updates", "merge_lists"))


def kernel(name: str, rows: int):
    """The compiled kernel ``name``: threaded for at least SERIAL_BELOW rows of work, else serial."""
    par, ser = _PARALLEL[name]
    return par if rows >= SERIAL_BELOW else ser


def _block_size(n: int, cap: int, buffer_bytes: int) -> int:
    """Nodes joined per block: update buffers of about ``buffer_bytes``, at least 64 nodes."""
    return int(max(64, min(n, buffer_bytes // (12 * cap))))


def refine_cpu(x, inv, kind, gd, gi, gf, *, p, max_iterations, threshold, seed, selective, split=0,
               verbose=False, desc="nn-descent (cpu)", stats=None, callback=None, buffer_bytes=48 << 20):
    """NN-Descent iterations on an initialised graph (gd, gi, gf are updated in place).

    Stops after ``max_iterations`` or when an iteration inserts fewer than ``threshold * n * k`` entries.
    Returns the list of per-iteration insert counts.
    """
    n, k = gd.shape
    new_f = np.full((n, p), -1, np.int32)
    old_f = np.full((n, p), -1, np.int32)
    new_r = np.full((n, p), -1, np.int32)
    old_r = np.full((n, p), -1, np.int32)
    nf = np.zeros(n, np.int32)
    nof = np.zeros(n, np.int32)
    nr = np.zeros(n, np.int32)
    nor = np.zeros(n, np.int32)
    cap = join_capacity(p, selective)
    block = _block_size(n, cap, buffer_bytes)
    upd_u = np.empty(block * cap, np.int32)
    upd_v = np.empty(block * cap, np.int32)
    upd_d = np.empty(block * cap, np.float32)
    upd_n = np.zeros(block, np.int32)
    workers = max(1, numba.get_num_threads())
    history = []
    times = []
    paused = 0.0
    t0 = time.perf_counter()
    with progress(max_iterations, desc, disable=not verbose, min_steps=1) as bar:
        for it in range(max_iterations):
            kernel("sample_forward", n)(gi, gf, p, split, new_f, nf, old_f, nof)
            salt = np.int64(it) * 2 + 1
            sample_reverse(new_f, nf, p, new_r, nr, np.int64(seed), salt)
            sample_reverse(old_f, nof, p, old_r, nor, np.int64(seed), salt + 1)
            inserted = 0
            for lo in range(0, n, block):
                hi = min(n, lo + block)
                kernel("local_join", n)(x, inv, kind, gd, new_f, nf, new_r, nr, old_f, nof, old_r, nor, p, split,
                                        selective, lo, hi, cap, upd_u, upd_v, upd_d, upd_n)
                inserted += int(kernel("apply_updates", n)(gd, gi, gf, hi - lo, cap, upd_u, upd_v, upd_d, upd_n,
                                                           not selective, workers if n >= SERIAL_BELOW else 1))
            history.append(inserted)
            times.append(time.perf_counter() - t0 - paused)
            bar.update(1)
            if callback is not None:
                tc = time.perf_counter()
                callback(it, gd, gi)
                paused += time.perf_counter() - tc
            if inserted < threshold * n * k:
                break
    if stats is not None:
        stats["updates_per_iteration"] = history
        stats["seconds_per_iteration"] = times
        stats["iterations"] = len(history)
    return history


class CpuEngine:
    """The engine interface ``_build.py`` drives (``cuda.CudaEngine`` has the same methods)."""

    is_cuda = False
    simulate = False
    xp = np

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    def prepare(self, x, kind):
        """(vectors numba can read, inverse norms or an empty array)."""
        xc = np.asarray(x)
        xc = np.ascontiguousarray(xc.astype(np.float32) if xc.dtype == np.float64 else cpu_vectors(xc))
        inv = inverse_norms(xc) if kind == DIST_COS else np.empty(0, np.float32)
        return xc, inv

    def asarray(self, a):
        return as_numpy(a)

    def to_host(self, a):
        return as_numpy(a)

    def new_graph(self, n, k):
        return np.empty((n, k), np.float32), np.empty((n, k), np.int32), np.empty((n, k), np.uint8)

    def synchronize(self):
        pass

    def memory_per_node(self, d, itemsize, k, p, cosine):
        """Host bytes per node of a build or merge (float32 vectors for float16 input)."""
        return d * (4 if itemsize == 2 else itemsize) + (4 if cosine else 0) + 9 * k + 16 * p + 16 + 8 * k

    def init(self, x, inv, kind, gd, gi, gf, keep, split, seed):
        kernel("init_graph", gd.shape[0])(x, inv, kind, gd, gi, gf, keep, split, np.int64(seed))

    def merge_lists(self, ad, ai, bd, bi, k):
        n = ad.shape[0]
        out_d = np.empty((n, k), np.float32)
        out_i = np.empty((n, k), np.int32)
        kernel("merge_lists", n)(np.ascontiguousarray(ad), np.ascontiguousarray(ai), np.ascontiguousarray(bd),
                                 np.ascontiguousarray(bi), out_d, out_i)
        return out_d, out_i

    def refine(self, x, inv, kind, gd, gi, gf, *, p, max_iterations, threshold, seed, split=0, selective=False,
               verbose=False, desc="nn-descent (cpu)", stats=None, callback=None, buffer_bytes=48 << 20):
        return refine_cpu(x, inv, kind, gd, gi, gf, p=p, max_iterations=max_iterations, threshold=threshold,
                          seed=seed, selective=selective, split=split, verbose=verbose, desc=desc, stats=stats,
                          callback=callback, buffer_bytes=buffer_bytes)
