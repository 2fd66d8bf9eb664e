"""The host-side fold of one cluster piece into the running lists of the clustered out-of-core NN-Descent
build, the NumPy way the build did it before against the compiled kernel it uses now
(:func:`knngraph.nndescent._merge_host.fold_piece_lists`); CPU only.

    NUMBA_NUM_THREADS=2 python benchmarks/studies/clustered_fold.py --out out/
    python benchmarks/studies/clustered_fold.py --n 10000000 --rows 1000000 --out out/   # all cores

Running lists of ``--n`` x ``--k`` (float32 distances, int32 ids; a 10M-row build's), every row already
written; each piece is ``--rows`` random sorted rows of which ``--seen`` were folded by an earlier piece
(the rest are fresh), its lists sorted by distance with ids local to the piece. A seen row's running list
holds half of its piece list's entries (the same ids at the same distances, as overlapping pieces find
the same neighbours) and half others. One line per piece and way, ``--pieces`` pieces:

* ``numpy``: the ids made global and the rows gathered and scattered with NumPy fancy indexing (on the
  GPU the mapping ran on the device, and the merge of the seen rows there after an upload), the seen rows
  merged by :func:`knngraph.graphops.cpu.merge_sorted_lists` (numba's threads): seconds by step;
* ``kernel``: the fold kernel on the same input (checked equal to the NumPy way's lists).

Writes ``clustered_fold.jsonl`` under --out.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a script: python benchmarks/studies/NAME.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.runner.measure import JsonLines  # noqa: E402


def sorted_lists(rng, m, k, id_high):
    """m lists of k random (distance, id) entries sorted by distance."""
    d = np.sort(rng.random((m, k), dtype=np.float32), axis=1)
    ids = rng.integers(0, id_high, (m, k), dtype=np.int32)
    return d, ids


def make_piece(rng, n, m, k, seen_share, res_d, res_i, done):
    """A piece of m sorted rows, ``seen_share`` of them done (their running lists rewritten to share half of
    the piece's entries), the others not; returns (rows, piece distances, piece local ids)."""
    rows = np.sort(rng.choice(n, m, replace=False))
    piece_d, piece_i = sorted_lists(rng, m, k, m)
    seen = rng.random(m) < seen_share
    done[rows] = seen
    at = np.flatnonzero(seen)
    old_d, old_i = sorted_lists(rng, len(at), k, n)
    half = slice(0, k, 2)
    old_d[:, half] = piece_d[at, half]
    old_i[:, half] = rows[piece_i[at, half]]
    order = np.argsort(old_d, axis=1, kind="stable")
    res_d[rows[at]] = np.take_along_axis(old_d, order, 1)
    res_i[rows[at]] = np.take_along_axis(old_i, order, 1)
    return rows, piece_d, piece_i


def fold_numpy(rows, piece_d, piece_i, res_d, res_i, done, merge):
    """The fold as the build did it before, on the host: seconds by step."""
    k = res_d.shape[1]
    t0 = time.perf_counter()
    glob = np.where(piece_i >= 0, rows[np.maximum(piece_i, 0)], -1).astype(np.int32)
    t1 = time.perf_counter()
    seen = done[rows]
    fresh = ~seen
    res_d[rows[fresh]] = piece_d[fresh]
    res_i[rows[fresh]] = glob[fresh]
    old = rows[seen]
    ad, ai, bd, bi = res_d[old], res_i[old], piece_d[seen], glob[seen]
    t2 = time.perf_counter()
    md, mi = merge(ad, ai, bd, bi, k)
    t3 = time.perf_counter()
    res_d[old] = md
    res_i[old] = mi
    done[rows] = True
    t4 = time.perf_counter()
    return {"map_ids_s": t1 - t0, "gather_scatter_s": (t2 - t1) + (t4 - t3), "merge_s": t3 - t2,
            "total_s": t4 - t0}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=10_000_000)
    ap.add_argument("--k", type=int, default=32)
    ap.add_argument("--rows", type=int, default=1_000_000, help="rows per piece")
    ap.add_argument("--seen", type=float, default=0.5, help="share of a piece's rows folded before")
    ap.add_argument("--pieces", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="out")
    args = ap.parse_args()
    import numba

    from knngraph.graphops.cpu import merge_sorted_lists
    from knngraph.nndescent._merge_host import fold_piece_lists

    log = JsonLines(Path(args.out) / "clustered_fold.jsonl")
    rng = np.random.default_rng(args.seed)
    n, k = args.n, args.k
    # every page written once (a fold of a long build writes into lists already touched)
    res_d, res_i = sorted_lists(rng, n, k, n)
    done = np.zeros(n, bool)
    # compile (or load) both kernels
    small = make_piece(rng, n, 1000, k, args.seen, res_d, res_i, done)
    fold_numpy(*small, res_d.copy(), res_i.copy(), done.copy(), merge_sorted_lists)
    fold_piece_lists(*small, res_d.copy(), res_i.copy(), done.copy())
    common = dict(n=n, k=k, rows=args.rows, seen=args.seen, threads=numba.get_num_threads())
    for p in range(args.pieces):
        piece = make_piece(rng, n, args.rows, k, args.seen, res_d, res_i, done)
        ref = (res_d.copy(), res_i.copy(), done.copy())
        steps = fold_numpy(*piece, *ref, merge_sorted_lists)
        log.write(way="numpy", piece=p, **common, **steps)
        t0 = time.perf_counter()
        fold_piece_lists(*piece, res_d, res_i, done)
        log.write(way="kernel", piece=p, **common, total_s=time.perf_counter() - t0)
        same = all(np.array_equal(a[piece[0]], b[piece[0]]) for a, b in zip((res_d, res_i, done), ref))
        if not same:
            raise SystemExit("the kernel's lists differ from the NumPy fold's")
        del ref


if __name__ == "__main__":
    main()
