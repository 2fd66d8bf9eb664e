"""Stage-by-stage CPU vs GPU comparison of the GRNND and GGNN builds on sift-photos (integer data: exact
distances, so both paths must agree entry for entry). Each step runs on the CPU and, from the same input
state, on the GPU; the first mismatching rows are printed and the build continues from the CPU's state.

    KNNGRAPH_DEVICE_DATA=.data python scripts/compare_builders.py [grnnd] [ggnn]

This is how the GPU-only bugs of both builders were found (a GRNND batch's redirects applied from the
wrong lane; GGNN's linking pushing points outside its sphere): run it after changing either's kernels.
"""
import os, sys, time
import numpy as np
import cupy as cp
from pathlib import Path
from knngraph import io, grnnd, ggnn
from knngraph.grnnd import cpu as gc, cuda as gg
from knngraph.grnnd._index import run_rounds, _prepare
from knngraph.grnnd._params import IndexParams as GP
from knngraph._device import Device
from knngraph.primitives.distances import distance_kind

D = Path(os.environ["KNNGRAPH_DEVICE_DATA"])
base = np.ascontiguousarray(io.read(D / "sift450k-base.u8bin"))
which = sys.argv[1:] or ["grnnd", "ggnn"]

def cmp(name, a, b, mask=None):
    b = cp.asnumpy(b)
    eq = (a == b) if mask is None else ((a == b) | ~mask)
    bad = int((~eq).sum())
    if bad:
        rows = np.nonzero(~eq.reshape(eq.shape[0], -1).all(axis=1))[0] if eq.ndim > 1 else np.nonzero(~eq)[0]
        r = rows[0]
        print(f"  MISMATCH {name}: {bad} entries, {len(rows)} rows; row {r}:\n    cpu {a[r][:16]}\n    gpu {b[r][:16]}", flush=True)
    return bad

class CheckGRNND:
    def __init__(self, xg, invg):
        self.xg, self.invg, self.log = xg, invg, {}
    def note(self, step, bad):
        self.log.setdefault(step, []).append(bad)
    def random_rows(self, n, s, seed, lo, out):
        gc.random_rows(n, s, seed, lo, out); g = cp.empty(out.shape, cp.int32); gg.random_rows(n, s, seed, lo, g)
        self.note("random_rows", cmp("random_rows", out, g))
    def row_proposals(self, x, inv, kind, rows, lo, pt, pc, pd):
        gc.row_proposals(x, inv, kind, rows, lo, pt, pc, pd)
        t, c, d = (cp.empty(pt.shape, a.dtype) for a in (pt, pc, pd))
        gg.row_proposals(self.xg, self.invg, kind, cp.asarray(rows), lo, t, c, d)
        m = pt >= 0
        self.note("row_proposals", cmp("rp.pt", pt, t) + cmp("rp.pc", pc, c, m) + cmp("rp.pd", pd, d, m))
    def propose(self, x, inv, kind, seed, rnd, pool_c, pool_d, cnt, pt, pc, pd, factor=1.0):
        P = [cp.asarray(a) for a in (pool_c, pool_d, cnt)]
        r = gc.propose(x, inv, kind, seed, rnd, pool_c, pool_d, cnt, pt, pc, pd, factor)
        t, c, d = (cp.empty(pt.shape, a.dtype) for a in (pt, pc, pd))
        rg = int(gg.propose(self.xg, self.invg, kind, seed, rnd, *P, t, c, d, factor))
        m = pt >= 0
        bad = cmp(f"propose{rnd}.pt", pt, t) + cmp(f"propose{rnd}.pc", pc, c, m) + cmp(f"propose{rnd}.pd", pd, d, m)
        if r != rg: print(f"  redirects cpu {r} gpu {rg}")
        self.note("propose", bad)
        return r
    def reverse(self, rho, pool_c, pool_d, cnt, pt, pc, pd):
        P = [cp.asarray(a) for a in (pool_c, pool_d, cnt)]
        r = gc.reverse(rho, pool_c, pool_d, cnt, pt, pc, pd)
        t, c, d = (cp.empty(pt.shape, a.dtype) for a in (pt, pc, pd))
        gg.reverse(rho, *P, t, c, d)
        m = pt >= 0
        self.note("reverse", cmp("rev.pt", pt, t) + cmp("rev.pc", pc, c, m) + cmp("rev.pd", pd, d, m))
        return r
    def group(self, pt, pc, pd, n):
        return (gc.group(pt, pc, pd, n), (pt.copy(), pc.copy(), pd.copy(), n))
    def merge(self, G, pool_c, pool_d, cnt):
        cg, (pt, pc, pd, n) = G
        P = [cp.asarray(a) for a in (pool_c, pool_d, cnt)]
        gc.merge(cg, pool_c, pool_d, cnt)
        gg.merge(gg.group(cp.asarray(pt), cp.asarray(pc), cp.asarray(pd), n), *P)
        bad = cmp("merge.cnt", cnt, P[2]) + cmp("merge.c", pool_c, P[0]) + cmp("merge.d", pool_d, P[1])
        self.note("merge", bad)

def run_grnnd(n=5000, r=24):
    x = base[:n]
    p = GP(graph_degree=r, seed=2)
    kind = distance_kind(p.metric)
    xf, inv, _ = _prepare(x, p.metric, Device("cpu"))
    xg, invg, _ = _prepare(x, p.metric, Device("cuda"))
    chk = CheckGRNND(xg, invg)
    s = min(r, 20, n - 1)
    run_rounds(chk, np, xf, inv, kind, p, n, s=s)
    print("GRNND stage mismatches:", {k: v for k, v in chk.log.items()}, flush=True)
    bad = sum(sum(v) for v in chk.log.values())
    # full builds: GPU vs CPU
    a = grnnd.build(p, x, device="cuda", verbose=False).graph
    b = grnnd.build(p, x, device="cpu", verbose=False).graph
    rows = int((a.indices != b.indices).any(axis=1).sum())
    print("full build rows differing:", rows, flush=True)
    return bad + rows

def run_ggnn(n=20000):
    """Every step of the device-resident build (device arrays in, device arrays written) against the CPU
    function on host copies of the same input; then the build goes on from the CPU's result."""
    from knngraph.ggnn import cpu as C, cuda as G
    from knngraph.ggnn._build import build_hierarchy

    x = base[:n].astype(np.float32)
    inv = np.zeros(1, np.float32)
    p = ggnn.IndexParams(graph_degree=16, refinements=1)
    kind = distance_kind(p.metric)
    log, rounds = {}, []
    host = lambda a: a.get() if isinstance(a, cp.ndarray) else a

    def step(name, outs):
        def run(*a):
            ha = [host(v) for v in a]
            getattr(C, name)(*ha)
            r = getattr(G, name)(*a, xp=cp)
            if name == "sym_place":
                rounds.append(r)
            if name == "sym_requests":  # candidates compared up to their count
                cn = ha[-1]
                bad = cmp("sym.n", cn, a[-1])
                j = np.arange(ha[-3].shape[2])[None, None, :] < cn[:, :, None]
                bad += cmp("sym.i", np.where(j, ha[-3], -1), cp.where(cp.asarray(j), a[-3], -1))
                bad += cmp("sym.d", np.where(j, ha[-2], 0), cp.where(cp.asarray(j), a[-2], 0))
            else:
                bad = sum(cmp(f"{name}.{o}", ha[o], a[o]) for o in outs)
            for o in outs:
                a[o][...] = cp.asarray(ha[o])
            log.setdefault(name, []).append(bad)
        return staticmethod(run)

    class Chk:
        xp = cp
        sync = staticmethod(lambda: G.sync(cp))
        brute_segments = step("brute_segments", (-2, -1))
        merge_queries = step("merge_queries", (-2, -1))
        sym_requests = step("sym_requests", (-3, -2, -1))
        sym_place = step("sym_place", (6, 7, 8))
        sym_write = step("sym_write", (0, 1))

    build_hierarchy(Chk(), x, inv, kind, p)
    G.release_build_data()
    print("GGNN stage mismatches:", {k: sum(v) for k, v in log.items()}, "steps:", {k: len(v) for k, v in log.items()},
          flush=True)
    print("link placement rounds per wave: max", max(rounds), "mean", float(np.mean(rounds)), flush=True)
    a = ggnn.build(p, base[:n], device="cuda", verbose=False).graph
    b = ggnn.build(p, base[:n], device="cpu", verbose=False).graph
    rows = int((a.indices != b.indices).any(axis=1).sum())
    drows = int((a.distances != b.distances).any(axis=1).sum())
    print("full build rows differing: ids", rows, "distances", drows, flush=True)
    return sum(sum(v) for v in log.values()) + rows + drows

bad = 0
if "grnnd" in which:
    bad += run_grnnd()
if "ggnn" in which:
    bad += run_ggnn()
sys.exit(1 if bad else 0)
