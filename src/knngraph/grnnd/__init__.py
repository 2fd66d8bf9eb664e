"""GRNND: sparse RNG-pruned search graphs by relative NN-Descent (Li, Li, Chang, Miyazaki, "GRNND: A
GPU-Parallel Relative NN-Descent Algorithm for Efficient Approximate Nearest Neighbor Graph
Construction"), on the GPU and, with the same algorithm, on the CPU.

The module contract (:mod:`knngraph.index`)::

    from knngraph import grnnd, song

    index = grnnd.build(grnnd.IndexParams(graph_degree=32), base)   # index.graph: a search graph
    d, i = song.search(song.from_graph(index.graph, base), queries, k=10)
    index = grnnd.extend(index, more_vectors)
    grnnd.save("g.grnnd", index); index = grnnd.load("g.grnnd")

GRNND builds graphs; it does not search. Its graph is a *search* graph, not a k-NN graph: rows hold up
to ``graph_degree`` neighbours that pass the relative-neighbourhood test, -1 padded, so hand it to a
graph searcher (``from_graph``) as it is, without :func:`knngraph.optimize_graph`.

**The algorithm** (section 3, Alg. 3). Every vertex starts with S random neighbours. Then T1 outer
iterations of T2 rounds; in a round every vertex v tests the pairs (n_i, n_j) of its pool in a random
order (*disordered* propagation, 3.3) and, when d(n_i, n_j) < max(d(v, n_i), d(v, n_j)) (Eq. 2), drops
the farther of the two from v and hands it to the closer one's pool; what survives stays in v's pool.
Pools hold at most R = ``graph_degree`` entries, nearest first. After every outer iteration but the last,
each vertex offers itself as a reverse edge to its nearest round(rho * count) pool entries (3.6).

**Decisions where the paper is silent** (the numbers only label the points it leaves open):

* (1) Defaults: S = min(R, 20) (the RNN-Descent authors' benchmark script), R = 32 (one warp of a
  graph search), T1 = 3, T2 = 6 (measured on sift-photos 20k: better search recall than T1 = 2, T2 = 10
  in fewer rounds; the paper's section 4.4 found 1 to 2 outer iterations enough on SIFT1M), rho = 0.6
  (Fig. 8). ``benchmarks/studies/grnnd_cpu.py`` / ``grnnd_gpu.py`` measure the choice.
* (2) Pairs per round: all pairs of the pool, each once, in a random order drawn from the hash of
  (seed, round, vertex) (a random progression over the m x m grid of slot pairs); CPU and GPU draw the
  same order.
* (3) A pair with a member already dropped this round is skipped: a dropped entry is no longer v's
  neighbour and prunes nothing (as Alg. 2 tests only against kept entries).
* (4), (12) Distances are stored with the pool entries, and each entry carries a NEW flag as in the
  RNN-Descent reference code: a pair of two entries that both survived the previous round was tested
  then, with the same outcome, so it is skipped. This is exact, not an approximation.
* (5), (6), (10) The write buffer: instead of concurrent WARP_INSERTs with atomics into other vertices'
  pools (whose duplicate and replacement races the paper leaves open), each vertex writes one proposal
  per pool slot into its own R slots (redirect: (closer, farther); survivor: (v, entry)); the proposals
  are grouped by target and each target keeps the R nearest distinct ids. The result is deterministic
  on the CPU and the GPU, no proposal is lost to a race, and a redirected id competes with the target's
  own survivors by distance to the target, as in Alg. 6's replacement of the farthest entry.
  (7) Redirects go to the closer vertex's write pool, as Alg. 4 l.7 says.
* (8) Strict ``<`` as Eq. (2) and the CPU reference; ties in distance are ordered by id.
* (11) "Top rho * k": pools are kept sorted, so the nearest round(rho * count) entries (halves up);
  reverse edges enter the targets' pools through the same merge (the nearest R distinct ids win).
* (13) Final graph: the last round's redirected entries were not tested in their new pools, so each
  final row is RNG-pruned once more in ascending order (:func:`knngraph.optimize_graph`'s rule with
  the build's ``prune_alpha`` and no fill); every row then has the RNG property: for kept n1 nearer
  than n2, f * d(n1, n2) >= d(v, n2) (f = 1 at the default alpha = 1). Rows are sorted; out-degree
  varies (-1 padding).

**Beyond the paper: ``prune_alpha``.** The RNG test can be relaxed as Vamana's (DiskANN's) is: v drops
the farther member of a pair only when f * d(n_i, n_j) < max(d(v, n_i), d(v, n_j)), f = alpha^2 on the
squared L2 distances kept internally, alpha for cosine, 1 for inner product
(:func:`knngraph.graphops.prune.occlusion_factor`), in the rounds and in the final prune. The redirects
keep the paper's Eq. (2): an entry occluded by the plain test but not by the relaxed one stays in v's
pool *and* is offered to the closer member's pool (its own proposal column, R + slot), so the rounds
explore as the paper's do. (Relaxing the redirects too starves the propagation: on sift-photos 100k,
alpha = 1.1 that way needed SONG queue 192 for recall@10 0.99, 2,200 distances per query, against 64 and
900 this way and 128 and 990 at alpha = 1; at 1.2 that way 0.99 was not reached by queue 256;
``benchmarks/studies/grnnd_alpha_cpu.py --ablation-alphas``.)
alpha = 1 (default) is Eq. (2) exactly; alpha > 1 keeps more, longer edges per row.

The GPU path (:mod:`knngraph.grnnd.cuda`, :mod:`knngraph.grnnd._kernels`) runs one warp per vertex for the
pair tests and for the merge; the CPU path (:mod:`knngraph.grnnd.cpu`) one thread per vertex. Every vector
dtype (float32, float16, uint8, int8) and metric (L2, inner product, cosine) is taken; n < 2**30.
"""

from ._index import Index, build, extend, load, save
from ._params import MAX_GRAPH_DEGREE, IndexParams

__all__ = ["IndexParams", "Index", "build", "extend", "save", "load", "MAX_GRAPH_DEGREE"]
