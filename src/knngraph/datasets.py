"""Real vectors with exact ground truth: a bundled sample and the shared benchmark datasets.

* :func:`load_sample` -- 20,000 SIFT descriptors (uint8, 128-d), 1,000 queries
  and their exact top-100 neighbours by squared L2, shipped with the package.
* :func:`load_sift_photos` -- the full sift-photos set (770,533 base vectors,
  10,000 queries), ground truth for base prefixes of 20k, 100k, 450k and all rows.
* :func:`load_minilm_words` -- 60,000 MiniLM word embeddings (float16, 384-d),
  5,000 queries, ground truth by cosine distance.

The shared datasets are looked up with :func:`shared_datasets_dir`; set the
``KNNGRAPH_DATASETS`` environment variable to the directory that holds
``sift-photos/`` and ``minilm-words/`` to use a copy elsewhere.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

import numpy as np

from knngraph import io

__all__ = [
    "SIFT_PHOTOS_BASE_SIZES",
    "Sample",
    "load_minilm_words",
    "load_sample",
    "load_sift_photos",
    "shared_datasets_dir",
]

ENV_VAR = "KNNGRAPH_DATASETS"

#: Base prefix sizes of sift-photos that have ground truth files.
SIFT_PHOTOS_BASE_SIZES = (20_000, 100_000, 450_000, 770_533)

_DATA_DIR = Path(__file__).resolve().parent / "data"


class Sample(NamedTuple):
    """Base vectors, queries, and each query's exact nearest neighbours in the base.

    Attributes
    ----------
    base : numpy.ndarray
        Shape ``(n_base, dim)``; may be a read-only :class:`numpy.memmap`.
    queries : numpy.ndarray
        Shape ``(n_queries, dim)``, same dtype as ``base``.
    gt_indices : numpy.ndarray
        int32, shape ``(n_queries, 100)``: row ids in ``base`` of each query's
        100 nearest neighbours, nearest first.
    gt_distances : numpy.ndarray
        float32, shape ``(n_queries, 100)``: their distances under ``metric``.
    metric : str
        ``"sqeuclidean"`` or ``"cosine"``.
    """

    base: np.ndarray
    queries: np.ndarray
    gt_indices: np.ndarray
    gt_distances: np.ndarray
    metric: str


def load_sample() -> Sample:
    """Load the small SIFT sample bundled with knngraph.

    The first 20,000 base vectors and first 1,000 queries of sift-photos, with
    their exact top-100 neighbours by squared L2 distance (see
    ``knngraph/data/README.md``). Distances are integers stored as float32,
    so ties are common: count a result correct when its distance is at most
    the true k-th distance.

    Returns
    -------
    Sample
        ``base`` uint8 ``(20000, 128)``, ``queries`` uint8 ``(1000, 128)``,
        ``gt_indices`` int32 ``(1000, 100)``, ``gt_distances`` float32
        ``(1000, 100)``, ``metric`` ``"sqeuclidean"``. All arrays are loaded
        into memory (about 2.8 MB) and writeable.

    Examples
    --------
    >>> from knngraph.datasets import load_sample
    >>> s = load_sample()
    >>> s.base.shape, s.queries.shape, s.gt_indices.shape, s.metric
    ((20000, 128), (1000, 128), (1000, 100), 'sqeuclidean')
    """
    return Sample(
        base=io.read(_DATA_DIR / "sift20k-base.u8bin", mmap=False),
        queries=io.read(_DATA_DIR / "sift20k-query.u8bin", mmap=False),
        gt_indices=io.read(_DATA_DIR / "sift20k-gt100.ibin", mmap=False),
        gt_distances=io.read(_DATA_DIR / "sift20k-gt100.fbin", mmap=False),
        metric="sqeuclidean",
    )


def _repo_root() -> Path | None:
    for parent in Path(__file__).resolve().parents:
        if (parent / "pyproject.toml").is_file():
            return parent
    return None


def _candidate_dirs() -> list[tuple[Path, str]]:
    """Where shared datasets are looked for, in order, with where each came from."""
    env = os.environ.get(ENV_VAR)
    if env:
        return [(Path(env).expanduser(), f"${ENV_VAR}")]
    candidates = []
    root = _repo_root()
    if root is not None:
        candidates.append((root.parent / "shared" / "datasets", "next to the repository"))
    cwd = Path.cwd()
    candidates.append((cwd.parent / "shared" / "datasets", "next to the working directory"))
    candidates.append((cwd / "shared" / "datasets", "in the working directory"))
    return candidates


def shared_datasets_dir() -> Path | None:
    """Find the directory holding the shared benchmark datasets.

    Returns
    -------
    pathlib.Path or None
        ``$KNNGRAPH_DATASETS`` if that environment variable is set (returned
        even if it does not exist, so that loaders report it), else the first
        existing directory of ``<repo root>/../shared/datasets`` (the repo
        root is the nearest parent of this file holding ``pyproject.toml``),
        ``<cwd>/../shared/datasets`` and ``<cwd>/shared/datasets``; ``None``
        if none exists.

    Examples
    --------
    >>> from knngraph.datasets import shared_datasets_dir
    >>> d = shared_datasets_dir()
    >>> d is None or (d / "sift-photos").name == "sift-photos"
    True
    """
    candidates = _candidate_dirs()
    if os.environ.get(ENV_VAR):
        return candidates[0][0]
    for path, _ in candidates:
        if path.is_dir():
            return path
    return None


def _dataset_file(dataset: str, name: str) -> Path:
    """Path of ``<shared>/<dataset>/<name>``; FileNotFoundError saying where we looked."""
    root = shared_datasets_dir()
    if root is not None and (root / dataset / name).is_file():
        return root / dataset / name
    if root is not None and os.environ.get(ENV_VAR):
        looked = f"{root / dataset / name} (from ${ENV_VAR})"
    elif root is not None:
        looked = str(root / dataset / name)
    else:
        looked = "; ".join(f"{path} ({why})" for path, why in _candidate_dirs())
    raise FileNotFoundError(
        f"{dataset}/{name} not found; looked in {looked}. Set the {ENV_VAR} environment "
        f"variable to the directory that holds {dataset}/ (e.g. export "
        f"{ENV_VAR}=/path/to/shared/datasets)."
    )


def _check_n_queries(n_queries, available: int) -> int:
    if n_queries is None:
        return available
    if isinstance(n_queries, bool) or not isinstance(n_queries, (int, np.integer)):
        raise TypeError(f"n_queries must be an integer or None, got {n_queries!r}")
    if not 1 <= n_queries <= available:
        raise ValueError(f"n_queries must be in [1, {available}] or None, got {n_queries}")
    return int(n_queries)


def load_sift_photos(n_base: int, n_queries: int | None = None) -> Sample:
    """Load a prefix of the sift-photos dataset (L2, 128-d, uint8).

    Parameters
    ----------
    n_base : {20000, 100000, 450000, 770533}
        Number of base rows (a prefix of ``base.u8bin``); only these sizes
        have ground truth.
    n_queries : int, default=None
        Use the first ``n_queries`` queries; ``None`` means all (10,000).

    Returns
    -------
    Sample
        ``base``: read-only :class:`numpy.memmap` of the first ``n_base`` rows;
        ``queries`` uint8, ``gt_indices`` int32 and ``gt_distances`` float32
        (squared L2, exact integers) loaded in memory; ``metric``
        ``"sqeuclidean"``.

    Raises
    ------
    TypeError
        If ``n_base`` or ``n_queries`` is not an integer.
    ValueError
        If ``n_base`` has no ground truth or ``n_queries`` is out of range.
    FileNotFoundError
        If the dataset is not found; the message says where it looked and how
        to set ``KNNGRAPH_DATASETS``.

    Examples
    --------
    >>> from knngraph.datasets import load_sift_photos
    >>> s = load_sift_photos(20000, n_queries=100)  # doctest: +SKIP
    >>> s.base.shape, s.queries.shape, s.gt_indices.shape  # doctest: +SKIP
    ((20000, 128), (100, 128), (100, 100))
    """
    if isinstance(n_base, bool) or not isinstance(n_base, (int, np.integer)):
        raise TypeError(f"n_base must be an integer, got {n_base!r}")
    if n_base not in SIFT_PHOTOS_BASE_SIZES:
        raise ValueError(
            f"n_base must be one of {', '.join(map(str, SIFT_PHOTOS_BASE_SIZES))} "
            f"(the sizes with ground truth), got {n_base!r}"
        )
    n_base = int(n_base)
    base_path = _dataset_file("sift-photos", "base.u8bin")
    query_path = _dataset_file("sift-photos", "query.u8bin")
    gt_i_path = _dataset_file("sift-photos", f"gt100-base{n_base}.ibin")
    gt_d_path = _dataset_file("sift-photos", f"gt100-base{n_base}.fbin")
    nq = _check_n_queries(n_queries, io.read_header(query_path)[0])
    return Sample(
        base=io.read(base_path, rows=(0, n_base), mmap=True),
        queries=io.read(query_path, rows=(0, nq), mmap=False),
        gt_indices=io.read(gt_i_path, rows=(0, nq), mmap=False),
        gt_distances=io.read(gt_d_path, rows=(0, nq), mmap=False),
        metric="sqeuclidean",
    )


def load_minilm_words(n_queries: int | None = None) -> Sample:
    """Load the minilm-words dataset (cosine, 384-d, float16).

    Parameters
    ----------
    n_queries : int, default=None
        Use the first ``n_queries`` queries; ``None`` means all (5,000).

    Returns
    -------
    Sample
        ``base``: read-only :class:`numpy.memmap`, float16 ``(60000, 384)``;
        ``queries`` float16, ``gt_indices`` int32 and ``gt_distances`` float32
        (``1 - cos``, computed in float32) loaded in memory; ``metric``
        ``"cosine"``.

    Raises
    ------
    TypeError
        If ``n_queries`` is not an integer.
    ValueError
        If ``n_queries`` is out of range.
    FileNotFoundError
        If the dataset is not found; the message says where it looked and how
        to set ``KNNGRAPH_DATASETS``.

    Examples
    --------
    >>> from knngraph.datasets import load_minilm_words
    >>> s = load_minilm_words(n_queries=10)  # doctest: +SKIP
    >>> s.base.dtype, s.queries.shape, s.metric  # doctest: +SKIP
    (dtype('float16'), (10, 384), 'cosine')
    """
    base_path = _dataset_file("minilm-words", "base.npy")
    query_path = _dataset_file("minilm-words", "query.npy")
    gt_i_path = _dataset_file("minilm-words", "gt100-cosine.ibin")
    gt_d_path = _dataset_file("minilm-words", "gt100-cosine.fbin")
    nq = _check_n_queries(n_queries, io.read_header(query_path)[0])
    return Sample(
        base=io.read(base_path, mmap=True),
        queries=io.read(query_path, rows=(0, nq), mmap=False),
        gt_indices=io.read(gt_i_path, rows=(0, nq), mmap=False),
        gt_distances=io.read(gt_d_path, rows=(0, nq), mmap=False),
        metric="cosine",
    )
