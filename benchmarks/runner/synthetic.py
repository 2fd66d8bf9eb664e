"""Seeded Gaussian-mixture vectors of any size and dimension, for scale runs.

The mixture has ``n_clusters`` components with equal weights. Component ``c`` is the Gaussian
``N(mu_c, B^T B + noise^2 I)``: its centre ``mu_c`` is drawn from ``N(0, spread^2 I)`` and every component
shares the covariance of a random ``latent_dim``-dimensional subspace ``B`` plus a little isotropic noise.
Points therefore have a low intrinsic dimension, as real descriptors and embeddings do; an isotropic
128-d mixture would make every neighbour nearly equidistant, which says little about real data.

Generation is deterministic: the mixture comes from ``seed``; rows are produced in fixed blocks of
:data:`BLOCK_ROWS`, block ``b`` of stream ``s`` from its own generator ``default_rng([seed, s, b])``, so the
values do not depend on how many threads run. ``sample(n, stream=0)`` is the base set; queries come from
another stream of the same mixture.

Not evidence of quality on its own: the real datasets are; this set is for scaling.
"""

from __future__ import annotations

import concurrent.futures
import math
import os

import numpy as np

__all__ = ["GaussianMixture", "BLOCK_ROWS"]

#: rows per independently seeded block
BLOCK_ROWS = 1 << 16


class GaussianMixture:
    """A seeded Gaussian mixture in ``d`` dimensions (see the module docs).

    Parameters
    ----------
    d : int
        Dimension.
    n_clusters : int
        Number of components.
    seed : int, default=0
    latent_dim : int, default=12
        Rank of the shared component covariance (capped at ``d``).
    spread : float, default=3.0
        Standard deviation of the component centres.
    noise : float, default=0.05
        Standard deviation of the isotropic part of each component.
    """

    def __init__(self, d: int, n_clusters: int, *, seed: int = 0, latent_dim: int = 12, spread: float = 3.0,
                 noise: float = 0.05):
        if d < 1 or n_clusters < 1:
            raise ValueError(f"d and n_clusters must be >= 1, got d={d}, n_clusters={n_clusters}")
        self.d = int(d)
        self.n_clusters = int(n_clusters)
        self.seed = int(seed)
        self.latent_dim = int(min(latent_dim, d))
        self.noise = float(noise)
        rng = np.random.default_rng([self.seed, 0])
        self.centres = (rng.standard_normal((self.n_clusters, self.d)) * spread).astype(np.float32)
        self.basis = (rng.standard_normal((self.latent_dim, self.d)) / math.sqrt(self.latent_dim)).astype(np.float32)

    @staticmethod
    def default_clusters(n: int) -> int:
        """About 2,000 points per component, at least 100 components."""
        return max(100, n // 2000)

    def _block(self, out: np.ndarray, stream: int, block: int) -> None:
        """Fill ``out`` with the first rows of block ``block`` (a whole block is drawn, then cut)."""
        if out.shape[0] < BLOCK_ROWS:
            full = np.empty((BLOCK_ROWS, self.d), np.float32)
            self._block(full, stream, block)
            out[:] = full[:out.shape[0]]
            return
        rng = np.random.default_rng([self.seed, 1 + stream, block])
        m = out.shape[0]
        labels = rng.integers(0, self.n_clusters, m)
        z = rng.standard_normal((m, self.latent_dim), dtype=np.float32)
        eps = rng.standard_normal((m, self.d), dtype=np.float32)
        eps *= np.float32(self.noise)
        eps += self.centres[labels]
        eps += z @ self.basis
        out[:] = eps

    def sample(self, n: int, *, stream: int = 0, threads: int | None = None) -> np.ndarray:
        """``n`` float32 points of stream ``stream`` (0: base, 1: queries), shape (n, d).

        Rows of a stream are one fixed sequence: ``sample(m)`` equals ``sample(n)[:m]`` for ``m <= n``.
        """
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        out = np.empty((n, self.d), np.float32)
        starts = range(0, n, BLOCK_ROWS)
        threads = threads or min(len(starts), os.cpu_count() or 1)
        if threads <= 1:
            for b, s in enumerate(starts):
                self._block(out[s:s + BLOCK_ROWS], stream, b)
            return out
        # numpy's generators release the GIL while filling arrays, so blocks run in parallel
        with concurrent.futures.ThreadPoolExecutor(threads) as pool:
            list(pool.map(lambda bs: self._block(out[bs[1]:bs[1] + BLOCK_ROWS], stream, bs[0]), enumerate(starts)))
        return out
