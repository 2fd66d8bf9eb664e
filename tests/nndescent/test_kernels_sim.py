"""Each GNND kernel in the numba CUDA simulator on tiny inputs, compared with the CPU path.

The CPU references are taken through ``cpu.kernel(name, rows)``, as the CPU engine does: at these sizes
the serial twins, which the CPU builds of the other tests compile for the same dtypes anyway (the
threaded twins are the same code; compiling them for int8 and float32 here only cost JIT time)."""

import numpy as np
import pytest
from numba import cuda

from knngraph.nndescent import _kernels as K
from knngraph.nndescent import cpu
from knngraph.nndescent.cuda import packed_words
from knngraph.primitives.constants import pow2_at_least

pytestmark = pytest.mark.sim

L2, IP, COS = 0, 1, 2


def _data(rng, n, d, dtype=np.uint8, full=False):
    """Integer-valued vectors, so L2 distances and dot products are exact in float32 whatever the order.
    ``full``: the whole 8-bit range, rows 0 and 1 saturated and one apart (for uint8 at d=128,
    |x|^2 + |y|^2 just under 2^24, the largest sums the dp4a path's float32 norms keep exact)."""
    if full:
        lo, hi = (0, 256) if dtype == np.uint8 else (-128, 128)
        x = rng.integers(lo, hi, size=(n, d)).astype(dtype)
        x[0] = hi - 1
        x[1] = hi - 1
        x[1, 0] = hi - 2
        return x
    if dtype == np.uint8:
        return rng.integers(0, 16, size=(n, d)).astype(np.uint8)
    return rng.integers(-8, 8, size=(n, d)).astype(dtype)


def _inv(x, kind):
    from knngraph.primitives.distances import inverse_norms

    return inverse_norms(x) if kind == COS else np.zeros(1, np.float32)


def _cpu_inv(x, kind):
    from knngraph.primitives.distances import inverse_norms

    return inverse_norms(x) if kind == COS else np.empty(0, np.float32)


def _cpu_graph(x, k, kind, seed, keep=0, split=0, prefill=None):
    n = x.shape[0]
    gd = np.empty((n, k), np.float32)
    gi = np.empty((n, k), np.int32)
    gf = np.empty((n, k), np.uint8)
    if prefill is not None:
        gd[:, :keep], gi[:, :keep] = prefill
    cpu.kernel("init_graph", n)(x, _cpu_inv(x, kind), kind, gd, gi, gf, keep, split, np.int64(seed))
    return gd, gi, gf


def _samples_cpu(gi, gf, p, split, seed=3):
    n = gi.shape[0]
    s = {name: np.full((n, p), -1, np.int32) for name in ("new_f", "old_f", "new_r", "old_r")}
    for name in ("nf", "nof", "nr", "nor"):
        s[name] = np.zeros(n, np.int32)
    cpu.kernel("sample_forward", n)(gi, gf, split, s["new_f"], s["nf"], s["old_f"], s["nof"])
    cpu.kernel("sample_reverse", n)(s["new_f"], s["nf"], s["new_r"], s["nr"], np.int64(seed), np.int64(1), 1)
    cpu.kernel("sample_reverse", n)(s["old_f"], s["nof"], s["old_r"], s["nor"], np.int64(seed), np.int64(2), 1)
    return s


def _slot_reduce(n, updates):
    """The candidate slots the join kernel should leave: per (u, v % SLOTS) the least (d, v)."""
    best = {}
    for u, v, d in updates:
        key = (int(u), int(v) % K.SLOTS)
        if key not in best or (d, v) < best[key]:
            best[key] = (float(d), int(v))
    return best


def _decode_slots(cand):
    out = {}
    for u in range(cand.shape[0]):
        for slot in range(cand.shape[1]):
            key = int(cand[u, slot])
            if key == int(K.EMPTY):
                continue
            hi, v = key >> 32, key & 0x7FFFFFFF
            bits = hi - 0x80000000 if hi >= 0x80000000 else 0xFFFFFFFF - hi
            out[(u, slot)] = (float(np.array([bits], np.uint32).view(np.float32)[0]), v)
    return out


@cuda.jit
def _pack_kernel(d, v, out):
    i = cuda.grid(1)
    if i < d.shape[0]:
        out[i] = K.pack(d[i], v[i])


@cuda.jit
def _unpack_kernel(keys, d, v):
    i = cuda.grid(1)
    if i < keys.shape[0]:
        d[i], v[i] = K.unpack(keys[i])


def test_pack_preserves_order_and_round_trips(rng):
    d = np.array([-3.5, -1e-30, 0.0, 1e-30, 2.0, 2.0, 7.25, 3e38], np.float32)
    v = np.array([5, 1, 9, 0, 4, 3, 2, 7], np.int32)
    keys = np.zeros(d.size, np.uint64)
    _pack_kernel[1, 32](d, v, keys)
    order = sorted(range(d.size), key=lambda i: (d[i], v[i]))
    assert list(np.argsort(keys, kind="stable")) == order
    d2 = np.zeros_like(d)
    v2 = np.zeros_like(v)
    _unpack_kernel[1, 32](keys, d2, v2)
    np.testing.assert_array_equal(d2, d)
    np.testing.assert_array_equal(v2, v)


@pytest.mark.parametrize("kind", [L2, IP, COS])
def test_init_kernel_matches_cpu(rng, kind):
    # 12 nodes on 2 blocks of 4 warps: the warps of block 0 take a second node (grid-stride loop)
    n, d, k, seed = 12, 11, 6, 5
    x = _data(rng, n, d, np.int8 if kind != L2 else np.uint8)
    cd, ci, cf = _cpu_graph(x, k, kind, seed)
    gd = np.empty((n, k), np.float32)
    gi = np.empty((n, k), np.int32)
    gf = np.empty((n, k), np.uint8)
    K.init_kernel(pow2_at_least(k, 32))[2, K.WPB * 32](x, _inv(x, kind), kind, gd, gi, gf, 0, 0, np.int64(seed))
    np.testing.assert_array_equal(gi, ci)
    np.testing.assert_allclose(gd, cd, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(gf, cf)
    assert (gf == 1).all() and not (gi == np.arange(n)[:, None]).any()


def test_init_kernel_merge_mode_matches_cpu(rng):
    """GGM init: first half kept (OLD), the rest random ids of the other subset (NEW)."""
    n, n1, d, k, keep = 30, 13, 7, 6, 3
    x = _data(rng, n, d)
    kept_i = np.stack([rng.choice(np.arange(n1) if u < n1 else np.arange(n1, n), keep, replace=False)
                       for u in range(n)]).astype(np.int32)
    kept_d = np.sort(rng.random((n, keep)).astype(np.float32), axis=1)
    cd, ci, cf = _cpu_graph(x, k, L2, 9, keep=keep, split=n1, prefill=(kept_d, kept_i))
    gd = np.empty((n, k), np.float32)
    gi = np.empty((n, k), np.int32)
    gf = np.empty((n, k), np.uint8)
    gd[:, :keep], gi[:, :keep] = kept_d, kept_i
    K.init_kernel(pow2_at_least(k, 32))[2, K.WPB * 32](x, _inv(x, L2), L2, gd, gi, gf, keep, n1, np.int64(9))
    np.testing.assert_array_equal(gi, ci)
    np.testing.assert_array_equal(gf, cf)
    other = (gi >= n1) != (np.arange(n)[:, None] >= n1)
    assert (gf[other] == 1).all() and (gf[~other] == 0).all() and other.sum(axis=1).tolist() == [k - keep] * n


@pytest.mark.parametrize("split", [0, 11])
def test_sample_kernel_matches_cpu(rng, split):
    n, d, k, p = 26, 5, 8, 3
    x = _data(rng, n, d)
    gd, gi, gf = _cpu_graph(x, k, L2, 1)
    gf[rng.random((n, k)) < 0.5] = 0  # a mix of NEW and OLD entries
    ref = _samples_cpu(gi, gf.copy(), p, split)
    ref_flags = gf.copy()
    cpu.kernel("sample_forward", n)(gi, ref_flags, split, np.empty((n, p), np.int32), np.empty(n, np.int32),
                                    np.empty((n, p), np.int32), np.empty(n, np.int32))
    got = {name: np.full((n, p), -1, np.int32) for name in ("new_f", "old_f", "new_r", "old_r")}
    for name in ("nf", "nof", "nr", "nor"):
        got[name] = np.zeros(n, np.int32)
    flags = gf.copy()
    K.sample_kernel[2, 64](gi, flags, p, split, got["new_f"], got["nf"], got["old_f"], got["nof"], got["new_r"],
                           got["nr"], got["old_r"], got["nor"])
    np.testing.assert_array_equal(flags, ref_flags)
    for name in ("nf", "nof"):
        np.testing.assert_array_equal(got[name], ref[name])
    for name, cnt in (("new_f", "nf"), ("old_f", "nof")):
        for s in range(n):
            np.testing.assert_array_equal(got[name][s, :got[cnt][s]], ref[name][s, :ref[cnt][s]])
    # reverse lists: the atomic race picks which p; check counts and membership
    for fwd, nfw, rev, nrev in (("new_f", "nf", "new_r", "nr"), ("old_f", "nof", "old_r", "nor")):
        offered = {v: set() for v in range(n)}
        for s in range(n):
            for v in got[fwd][s, :got[nfw][s]]:
                offered[int(v)].add(s)
        for v in range(n):
            assert got[nrev][v] == len(offered[v]) == ref[nrev][v]
            chosen = got[rev][v, :min(p, got[nrev][v])].tolist()
            assert len(set(chosen)) == len(chosen) and set(chosen) <= offered[v]


def _join_inputs(rng, kind, split, *, n, d, k=6, p=3, dtype=np.uint8, full=False):
    x = _data(rng, n, d, dtype, full)
    xc = x.astype(np.float32) if dtype == np.float16 else x  # numba's CPU target has no float16
    if split:
        keep = k // 2
        kept = []
        for u in range(n):
            own = np.arange(split) if u < split else np.arange(split, n)
            own = own[own != u]
            kept.append(rng.choice(own, keep, replace=False))
        kept_i = np.array(kept, np.int32)
        kept_d = np.zeros((n, keep), np.float32)
        xf = x.astype(np.float64)
        for u in range(n):
            for t, v in enumerate(kept_i[u]):
                kept_d[u, t] = ((xf[u] - xf[v]) ** 2).sum()
        o = np.argsort(kept_d, axis=1, kind="stable")
        gd, gi, gf = _cpu_graph(xc, k, kind, 2, keep=keep, split=split,
                                prefill=(np.take_along_axis(kept_d, o, 1), np.take_along_axis(kept_i, o, 1)))
    else:
        gd, gi, gf = _cpu_graph(xc, k, kind, 2)
        gf[rng.random((n, k)) < 0.4] = 0
    s = _samples_cpu(gi, gf, p, split)
    return x, gd, gi, gf, s, p


def _cpu_selective_updates(x, gd, s, p, kind, split):
    n = gd.shape[0]
    xc = x.astype(np.float32) if x.dtype == np.float16 else x
    cap = cpu.join_capacity(p, True)
    upd_u = np.zeros(n * cap, np.int32)
    upd_v = np.zeros(n * cap, np.int32)
    upd_d = np.zeros(n * cap, np.float32)
    upd_n = np.zeros(n, np.int32)
    cpu.kernel("local_join", n)(xc, _cpu_inv(xc, kind), kind, gd, np.full(gd.shape, -1, np.int32), s["new_f"],
                                s["nf"], s["new_r"], s["nr"], s["old_f"], s["nof"], s["old_r"], s["nor"], split, True,
                                0, n, cap, upd_u, upd_v, upd_d, upd_n, np.zeros(n, np.int64))
    return cap, upd_u, upd_v, upd_d, upd_n


def _run_join(x, gd, gi, gf, s, p, kind, split, insert, threads=32, dc=K.DC):
    n = gd.shape[0]
    xc = x.astype(np.float32) if x.dtype == np.float16 else x
    cand = np.full((n if insert == "slots" else 1, K.SLOTS), K.EMPTY, np.uint64)
    locks = np.zeros(n if insert == "lock" else 1, np.int32)
    counter = np.zeros(1, np.int64)
    inv = _inv(xc, kind)
    packed = packed_words(x, kind)  # uint8 / int8 with d % 4 == 0: the dp4a path, as the engine picks it
    xw, sqn = packed[1:] if packed else (x, inv)
    K.join_kernel(p, insert, packed=packed[0] if packed else 0, dc=dc)[2, threads](
        x, inv, kind, gd, gi, gf, s["new_f"], s["nf"], s["new_r"], s["nr"], s["old_f"], s["nof"], s["old_r"], s["nor"],
        p, split, cand, locks, counter, xw, sqn)
    return cand, locks, counter


# the kernel branches on the dtype only between float staging and the dp4a path (8-bit, d % 4 == 0)
@pytest.mark.parametrize("kind,split,dtype,d,p,k,n,full", [
    (L2, 0, np.uint8, 37, 3, 6, 14, False), (COS, 0, np.float16, 9, 3, 6, 14, False),
    (L2, 6, np.uint8, 9, 3, 6, 14, False),
    pytest.param(IP, 0, np.int8, 5, 12, 24, 40, False, marks=pytest.mark.slow),  # about 12 s on 2 cores
    (L2, 0, np.uint8, 8, 3, 6, 14, False), (COS, 0, np.int8, 12, 3, 6, 14, False),
    (IP, 6, np.int8, 132, 3, 6, 14, False), (L2, 0, np.uint8, 128, 3, 6, 14, True),
    (L2, 0, np.int8, 132, 3, 6, 14, True)])
def test_join_kernel_locked_insert_matches_cpu(rng, kind, split, dtype, d, p, k, n, full):
    """Lock mode: the lists after the join = the CPU selective local join's updates applied on the CPU
    (d=37 stages two dimension chunks, the second one partial; p=12 needs two rounds of 4 x 4 tiles for
    the simulator's 32 threads; d=8, 12, 128, 132 with 8-bit data take the dp4a path, 132 in two
    chunks; the full-range cases check that its L2 is exact up to the bound packed_words allows: uint8
    d=128 puts |x|^2 + |y|^2 just under 2^24)."""
    x, gd, gi, gf, s, p = _join_inputs(rng, kind, split, dtype=dtype, n=n, d=d, k=k, p=p, full=full)
    cap, upd_u, upd_v, upd_d, upd_n = _cpu_selective_updates(x, gd, s, p, kind, split)
    assert upd_n.sum() > 0, "the test data should produce updates"
    ref = [a.copy() for a in (gd, gi, gf)]
    cpu.kernel("apply_updates", len(upd_n))(*ref, len(upd_n), cap, upd_u, upd_v, upd_d, upd_n, False, 1)
    before = [set(row.tolist()) for row in gi]
    # two warps per block (they contend for list locks) in one case; one warp elsewhere (simulator time)
    _, locks, counter = _run_join(x, gd, gi, gf, s, p, kind, split, "lock", threads=64 if d == 37 else 32)
    np.testing.assert_array_equal(gi, ref[1])
    np.testing.assert_allclose(gd, ref[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(gf, ref[2])
    assert (locks == 0).all()
    assert counter[0] >= sum(len(set(row.tolist()) - before[r]) for r, row in enumerate(gi)) > 0


@pytest.mark.parametrize("kind,dtype", [(IP, np.int8)])
def test_join_kernel_slots_match_cpu_selective_join(rng, kind, dtype):
    """Slot mode: the candidate slots = the CPU selective local join's updates reduced per slot."""
    x, gd, gi, gf, s, p = _join_inputs(rng, kind, 0, dtype=dtype, n=14, d=9)
    cap, upd_u, upd_v, upd_d, upd_n = _cpu_selective_updates(x, gd, s, p, kind, 0)
    updates = [(upd_u[t * cap + e], upd_v[t * cap + e], upd_d[t * cap + e]) for t in range(len(upd_n))
               for e in range(upd_n[t])]
    cand, _, _ = _run_join(x, gd, gi.copy(), gf.copy(), s, p, kind, 0, "slots")
    got = _decode_slots(cand)
    want = _slot_reduce(len(upd_n), updates)
    assert got.keys() == want.keys() and want
    for key in want:
        assert got[key][1] == want[key][1]
        assert got[key][0] == pytest.approx(want[key][0], rel=1e-5, abs=1e-5)


def _packed(d, v):
    bits = int(np.array([d], np.float32).view(np.uint32)[0])
    hi = 0xFFFFFFFF - bits if bits >= 0x80000000 else bits + 0x80000000
    return np.uint64((hi << 32) | int(v))


def test_merge_kernel_matches_cpu_insert(rng):
    """Merging candidate slots = inserting the same candidates one by one on the CPU."""
    n, k = 9, 37
    gd = np.sort(rng.integers(0, 50, size=(n, k)).astype(np.float32), axis=1)
    gi = np.stack([rng.permutation(200)[:k] for _ in range(n)]).astype(np.int32)
    o = np.stack([np.lexsort((gi[r], gd[r])) for r in range(n)])
    gd = np.take_along_axis(gd, o, 1)
    gi = np.take_along_axis(gi, o, 1)
    gf = rng.integers(0, 2, size=(n, k)).astype(np.uint8)
    gi[2, -3:] = -1
    gd[2, -3:] = np.inf
    cand = np.full((n, K.SLOTS), K.EMPTY, np.uint64)
    chosen = {}
    for u in range(n):
        if u == 4:
            continue  # a node without candidates is left alone
        for slot in range(K.SLOTS):
            if rng.random() < 0.6:
                chosen[(u, slot)] = (int(rng.integers(7, 14)) * K.SLOTS + slot, float(rng.integers(0, 60)))  # not listed
        j = int(rng.integers(0, k))  # an id the list already holds (offered at its own distance)
        if gi[u, j] >= 0:
            chosen[(u, int(gi[u, j]) % K.SLOTS)] = (int(gi[u, j]), float(gd[u, j]))
    updates = []
    for (u, slot), (v, d) in chosen.items():
        cand[u, slot] = _packed(d, v)
        updates.append((u, v, np.float32(d)))
    ref_d, ref_i, ref_f = gd.copy(), gi.copy(), gf.copy()
    m = len(updates)
    uu = np.array([u for u, _, _ in updates], np.int32)
    vv = np.array([v for _, v, _ in updates], np.int32)
    dd = np.array([d for _, _, d in updates], np.float32)
    inserted = cpu.kernel("apply_updates", n)(ref_d, ref_i, ref_f, 1, m, uu, vv, dd, np.array([m], np.int32), False,
                                              1)
    before = [set(row.tolist()) for row in gi]
    counter = np.zeros(1, np.int64)
    K.merge_kernel(64)[2, K.WPB * 32](gd, gi, gf, cand, counter)
    np.testing.assert_array_equal(gi, ref_i)
    np.testing.assert_array_equal(gd, ref_d)
    np.testing.assert_array_equal(gf, ref_f)
    # the kernel counts entries that made it into the list (the CPU also counts later-evicted inserts)
    assert counter[0] == sum(len(set(row.tolist()) - before[r]) for r, row in enumerate(gi)) > 0
    assert counter[0] <= inserted
    assert (cand == K.EMPTY).all()


def test_packed_path_only_where_its_l2_is_exact():
    """packed_words picks the dp4a path for 8-bit data with d % 4 == 0, for L2 only while
    2 d max|x|^2 <= 2^24 (float32 norms); the other metrics take it at any such d."""
    u128, u132 = np.zeros((3, 128), np.uint8), np.zeros((3, 132), np.uint8)
    i512, i516 = np.zeros((3, 512), np.int8), np.zeros((3, 516), np.int8)
    assert packed_words(u128, L2)[0] == 1 and packed_words(u132, L2) is None
    assert packed_words(u132, IP)[0] == 1 and packed_words(u132, COS)[0] == 1
    assert packed_words(i512, L2)[0] == 2 and packed_words(i516, L2) is None
    assert packed_words(np.zeros((3, 10), np.uint8), L2) is None, "d % 4 != 0"
    assert packed_words(np.zeros((3, 8), np.float32), L2) is None
    x = np.random.default_rng(0).integers(0, 256, (5, 8)).astype(np.uint8)
    np.testing.assert_array_equal(packed_words(x, L2)[2], (x.astype(np.int64) ** 2).sum(1))


def test_join_kernel_staging_chunk_of_16(rng):
    """The staging chunk used before Hopper (dc=16): the same lists as the CPU join, float and dp4a."""
    for dtype, d in ((np.uint8, 37), (np.int8, 132)):
        x, gd, gi, gf, s, p = _join_inputs(rng, L2, 0, dtype=dtype, n=14, d=d)
        cap, upd_u, upd_v, upd_d, upd_n = _cpu_selective_updates(x, gd, s, p, L2, 0)
        ref = [a.copy() for a in (gd, gi, gf)]
        cpu.kernel("apply_updates", len(upd_n))(*ref, len(upd_n), cap, upd_u, upd_v, upd_d, upd_n, False, 1)
        _run_join(x, gd, gi, gf, s, p, L2, 0, "lock", dc=16)
        np.testing.assert_array_equal(gi, ref[1])
        np.testing.assert_allclose(gd, ref[0], rtol=1e-5, atol=1e-5)


def _short_lists(rng, x, k1, kind, short_rows=1, empty=2):
    """Exact-distance lists of k1 random distinct ids per node, sorted by (distance, id), random flags; the
    lists of the last ``short_rows`` nodes end in ``empty`` empty entries (-1, inf)."""
    from knngraph.metrics import pairwise_distances

    n = x.shape[0]
    full = pairwise_distances(x.astype(np.float64), x.astype(np.float64), "sqeuclidean" if kind == L2 else
                              "inner_product").astype(np.float32)
    gi = np.stack([rng.choice(np.delete(np.arange(n), s), k1, replace=False) for s in range(n)]).astype(np.int32)
    gd = np.take_along_axis(full, gi, 1)
    order = np.lexsort((gi, gd), axis=1)
    gi, gd = np.take_along_axis(gi, order, 1), np.take_along_axis(gd, order, 1)
    gi[-short_rows:, -empty:], gd[-short_rows:, -empty:] = -1, np.inf
    gf = rng.integers(0, 2, size=gi.shape).astype(np.uint8)
    gf[gi < 0] = 0
    return gd, gi, gf, full


def _widened_by_rule(gd1, gi1, gf1, full, width, hops):
    """The two-hop fill's rule, row by row: the width nearest of the list and of the first ``hops`` entries
    of the lists of its first ``hops`` entries, by (distance, id); listed entries keep their flags, new
    ones are NEW within the first k1 entries and OLD behind; (inf, -1, OLD) pads."""
    n, k1 = gi1.shape
    out = (np.full((n, width), np.inf, np.float32), np.full((n, width), -1, np.int32), np.zeros((n, width), np.uint8))
    for s in range(n):
        own = {int(v): int(f) for v, f in zip(gi1[s], gf1[s]) if v >= 0}
        cand = set(own)
        for u in gi1[s, :hops]:
            if u >= 0:
                cand |= {int(v) for v in gi1[u, :hops] if v >= 0}
        cand.discard(s)
        best = sorted(cand, key=lambda v: (full[s, v], v))[:width]
        for j, v in enumerate(best):
            out[0][s, j], out[1][s, j] = full[s, v], v
            out[2][s, j] = own[v] if v in own else (1 if j < k1 else 0)
    return out


@pytest.mark.parametrize("kind,d", [(L2, 7), (IP, 7), (L2, 40)])
def test_widen_kernel_matches_cpu_and_the_two_hop_rule(rng, kind, d):
    """The two-hop fill (GPU kernel on the simulator, CPU kernel) against the rule computed in Python: 12
    nodes on 2 blocks of 4 warps (grid-stride loop), lists of 6 read 4 hops deep, widened to 10."""
    n, k1, width, hops = 12, 6, 10, 4
    x = _data(rng, n, d, np.int8 if kind != L2 else np.uint8)
    gd1, gi1, gf1, full = _short_lists(rng, x, k1, kind)
    want = _widened_by_rule(gd1, gi1, gf1, full, width, hops)
    got_cpu = tuple(np.empty((n, width), t) for t in (np.float32, np.int32, np.uint8))
    cpu.kernel("widen_lists", n)(x, _cpu_inv(x, kind), kind, gd1, gi1, gf1, *got_cpu, hops)
    got = [got_cpu]
    for chunks in (0, -(-d // 32)):  # the loop over dimensions as written, and unrolled
        got.append(tuple(np.empty((n, width), t) for t in (np.float32, np.int32, np.uint8)))
        K.widen_kernel(pow2_at_least(width + 64, 32), pow2_at_least(k1, 32), K.WPB, chunks)[2, K.WPB * 32](
            x, _inv(x, kind), kind, gd1, gi1, gf1, *got[-1], hops)
    for got in got:
        np.testing.assert_array_equal(got[1], want[1])
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[2], want[2])
    new = np.array([[v >= 0 and v not in gi1[s] for v in row] for s, row in enumerate(want[1])])
    assert (want[1][:, k1:] >= 0).any() and (new & (want[2] == 1)).any() and (new & (want[2] == 0)).any()


def test_widen_kernel_full_reach_with_empty_entries(rng):
    """The library's reach (32 neighbours' lists, 32 entries each): many candidates per node, so the
    working list is sorted and cut several times while staging; a third of the lists end in 5 empty
    entries, within the 32 read (a node's walk stops there; a neighbour's list is read up to there)."""
    n, d, k1, width, hops = 90, 5, 32, 40, 32
    x = _data(rng, n, d)
    gd1, gi1, gf1, full = _short_lists(rng, x, k1, L2, short_rows=30, empty=5)
    # more than 32 new ids staged for some node: a sort and cut before the walk's end
    fresh = [len({int(v) for u in gi1[s, :hops] if u >= 0 for v in gi1[u, :hops] if v >= 0} - set(gi1[s].tolist())
                 - {s}) for s in range(n)]
    assert max(fresh) > 32
    want = _widened_by_rule(gd1, gi1, gf1, full, width, hops)
    got_cpu = tuple(np.empty((n, width), t) for t in (np.float32, np.int32, np.uint8))
    cpu.kernel("widen_lists", n)(x, _cpu_inv(x, L2), L2, gd1, gi1, gf1, *got_cpu, hops)
    got_gpu = tuple(np.empty((n, width), t) for t in (np.float32, np.int32, np.uint8))
    K.widen_kernel(pow2_at_least(width + 64, 32), pow2_at_least(k1, 32), K.WPB, 1)[2, K.WPB * 32](
        x, _inv(x, L2), L2, gd1, gi1, gf1, *got_gpu, hops)
    for got in (got_cpu, got_gpu):
        np.testing.assert_array_equal(got[1], want[1])
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[2], want[2])
    assert (want[1] >= 0).all()  # every list filled to 40 from its neighbours' 32 x 32 entries


def test_widen_limits_are_checked():
    from knngraph.nndescent._common import check_widen

    check_widen(128, 256, 32)
    for k1, width, hops in ((129, 256, 32), (64, 257, 32), (64, 128, 33), (64, 32, 32)):
        with pytest.raises(ValueError, match="a two-hop fill widens lists of 1 to 128 entries to at most 256"):
            check_widen(k1, width, hops)
