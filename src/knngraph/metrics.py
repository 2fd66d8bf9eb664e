"""Distance definitions shared by every algorithm.

All searchers return *distances*, smaller = closer, in float32:

=============  ============================================  =========================================
metric         distance reported                             selection key (per query, same order)
=============  ============================================  =========================================
sqeuclidean    ||q - x||^2                                   ||x||^2 - 2 <q, x>   (||q||^2 added back)
euclidean      ||q - x||                                     same key as sqeuclidean, sqrt at the end
inner_product  -<q, x>   (negated so that smaller = closer)  -<q, x>
cosine         1 - <q, x> / (||q|| ||x||)                    -<q/||q||, x/||x||>; a zero vector has
                                                             cosine distance 1 to everything
=============  ============================================  =========================================

The key column is the observation of Komarov, Dashti, D'Souza ("Fast k-NNG Construction with GPU-Based
Quick Multi-Select", section "Distance Calculation"): for a fixed
query the ||q||^2 term is common to every candidate, so ranking needs only ||x||^2 - 2<q, x>, which
costs one GEMM plus one vector of base norms.
"""

from __future__ import annotations

import numpy as np

__all__ = ["METRICS", "canonical_metric", "expanded_key_kind", "distance_from_key_np", "pairwise_distances"]

#: metric names and accepted aliases
METRICS = ("sqeuclidean", "euclidean", "inner_product", "cosine")
_ALIASES = {
    "sqeuclidean": "sqeuclidean", "l2sq": "sqeuclidean", "squared_euclidean": "sqeuclidean",
    "euclidean": "euclidean", "l2": "euclidean",
    "inner_product": "inner_product", "ip": "inner_product", "dot": "inner_product",
    "cosine": "cosine", "angular": "cosine",
}


def canonical_metric(metric: object) -> str:
    """The canonical name for ``metric``; ValueError listing valid names otherwise."""
    if isinstance(metric, str):
        name = _ALIASES.get(metric.strip().lower())
        if name is not None:
            return name
    raise ValueError(f"unknown metric {metric!r}; valid metrics are {', '.join(METRICS)} "
                     f"(aliases: {', '.join(sorted(k for k in _ALIASES if k not in METRICS))})")


# Which selection key a metric uses (the integer is what the kernels receive).
KEY_L2 = 0      # key = ||x||^2 - 2<q,x>
KEY_DOT = 1     # key = -<q,x>  (cosine: on unit vectors)


def expanded_key_kind(metric: str) -> int:
    return KEY_L2 if metric in ("sqeuclidean", "euclidean") else KEY_DOT


def normalize_rows(x: np.ndarray) -> np.ndarray:
    """Unit-normalise rows in float32; zero rows stay zero (cosine distance 1 to everything)."""
    x = np.asarray(x, dtype=np.float32)
    norms = np.sqrt(np.einsum("ij,ij->i", x, x, dtype=np.float32))
    norms[norms == 0] = 1.0
    return x / norms[:, None]


def distance_from_key_np(keys: np.ndarray, qnorm2: np.ndarray | None, metric: str) -> np.ndarray:
    """Turn selection keys [nq, k] into reported distances (host arrays)."""
    keys = np.asarray(keys, dtype=np.float32)
    if metric in ("sqeuclidean", "euclidean"):
        d = np.maximum(keys + qnorm2[:, None].astype(np.float32), np.float32(0))
        return np.sqrt(d) if metric == "euclidean" else d
    if metric == "inner_product":
        return keys
    return np.float32(1) + keys  # cosine


def pairwise_distances(q: np.ndarray, x: np.ndarray, metric: str = "sqeuclidean") -> np.ndarray:
    """Exact distances between every row of ``q`` and every row of ``x`` in float64 (reference code).

    Used by tests and evaluation, not on hot paths.
    """
    metric = canonical_metric(metric)
    q = np.asarray(q, dtype=np.float64)
    x = np.asarray(x, dtype=np.float64)
    if metric in ("sqeuclidean", "euclidean"):
        d = (q * q).sum(1)[:, None] + (x * x).sum(1)[None, :] - 2.0 * (q @ x.T)
        d = np.maximum(d, 0.0)
        return np.sqrt(d) if metric == "euclidean" else d
    if metric == "inner_product":
        return -(q @ x.T)
    qn = np.linalg.norm(q, axis=1)
    xn = np.linalg.norm(x, axis=1)
    qn[qn == 0] = 1.0
    xn[xn == 0] = 1.0
    return 1.0 - (q / qn[:, None]) @ (x / xn[:, None]).T
