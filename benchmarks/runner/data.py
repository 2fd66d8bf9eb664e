"""Datasets for the runner and the studies, named by a spec string ``NAME[:key=value,...]``.

=======================  ==========================================================================
spec                     data
=======================  ==========================================================================
``sample``               the bundled sample: 20k SIFT descriptors (uint8), 1k queries, exact top-100
``sift-photos-100k``     ``../shared/datasets/sift-photos`` with the first N base rows, N in 20k, 100k,
                         450k, 770k (``sift-photos-770k`` = all 770,533); 10k queries. On a GPU
                         machine without the shared folder the rows come from ``.data/`` (or
                         ``$KNNGRAPH_DEVICE_DATA``, cut by ``scripts/prepare_device_data.py``): the 450k
                         base, its prefixes, and the whole base where the rest was unpacked beside it.
``minilm-words``         minilm-words: 60k x 384 float16, cosine, 5k queries, from
                         ``$KNNGRAPH_MINILM_DIR`` (a folder with ``base.npy``, ``query.npy`` and
                         ``gt100-cosine.ibin``) when set, else ``../shared/datasets/minilm-words``
``hdf5:PATH``            an ann-benchmarks HDF5 file (train / test / neighbors, metric attribute)
``bigann:base=P,query=Q,gt=G[,metric=M]``  big-ann-benchmarks binary files (``.u8bin``, ``.fbin``, ...;
                         ground truth ``.ibin``); metric default sqeuclidean
``synth:n=N,d=D``        a seeded Gaussian mixture (:mod:`benchmarks.runner.synthetic`); options
                         ``seed`` (0), ``nq`` (1000 queries from another stream), ``clusters``
=======================  ==========================================================================

Options for every spec: ``nq=`` keeps the first nq queries; ``n=`` keeps the first n base rows (the
ground truth is then recomputed). Where a dataset has no ground truth (``synth``, ``n=``), it is computed
when a search run first needs it, by knngraph's own exact k-NN (:func:`knngraph.knn`), on the GPU when
one is usable. :func:`sift_photos` names the spec of any number of sift-photos rows.

Returned distances are never trusted from files: :func:`exact_distances` recomputes the distance of every
true and every returned id in float64 under the dataset's metric, so ties are judged the same way for
every method (:mod:`knngraph.evaluate`: an id at the true k-th distance counts as correct; scoring is
:mod:`benchmarks.runner.quality`).
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

import numpy as np

__all__ = ["Dataset", "load", "parse_spec", "exact_distances", "host", "sift_photos", "device_data_dir", "GT_K",
           "SIFT_ROWS"]

#: neighbours per query kept in the ground truth the runner computes itself
GT_K = 100

#: rows of the whole sift-photos base
SIFT_ROWS = 770_533
_SIFT_SIZES = {"20k": 20_000, "100k": 100_000, "450k": 450_000, "770k": SIFT_ROWS}


@dataclasses.dataclass
class Dataset:
    """Vectors with ground truth.

    Attributes
    ----------
    name : str
        The spec it was loaded from (used as the ``dataset`` field of each JSON line).
    base, queries : numpy.ndarray
        (n, d) and (nq, d), same dtype (uint8, int8, float16 or float32).
    metric : str
        knngraph metric name.
    source : str
        Where the data came from, for the report.
    gt_ids : numpy.ndarray or None
        int64 (nq, >= k) true nearest base ids of each query, nearest first; None until :meth:`truth`
        computes it (datasets without ground truth files).
    """

    name: str
    base: np.ndarray
    queries: np.ndarray
    metric: str
    source: str
    gt_ids: np.ndarray | None = None
    _gt_dist: np.ndarray | None = dataclasses.field(default=None, repr=False)

    @property
    def n(self) -> int:
        return int(self.base.shape[0])

    @property
    def d(self) -> int:
        return int(self.base.shape[1])

    @property
    def nq(self) -> int:
        return int(self.queries.shape[0])

    @property
    def dtype(self) -> str:
        return str(self.base.dtype)

    def truth(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(ids int64, distances float64) of each query's true top ``k`` (computed on first use when the
        dataset has no ground truth, by knngraph's exact k-NN)."""
        if self.gt_ids is None or self.gt_ids.shape[1] < k:
            self.gt_ids = _truth(self.base, self.queries, self.metric, max(k, GT_K))
            self._gt_dist = None
            self.source += "; ground truth by knngraph.knn"
        if self._gt_dist is None or self._gt_dist.shape[1] < k:
            self._gt_dist = exact_distances(self.base, self.queries, self.gt_ids, self.metric)
        return self.gt_ids[:, :k], self._gt_dist[:, :k]

    def describe(self) -> dict:
        """Fields of the JSON line that describe the data."""
        return {"dataset": self.name, "n": self.n, "d": self.d, "nq": self.nq, "dtype": self.dtype,
                "metric": self.metric}


def parse_spec(spec: str) -> tuple[str, dict]:
    """``"name:a=1,b=x"`` -> ``("name", {"a": "1", "b": "x"})``; ``hdf5:PATH`` keeps PATH whole."""
    if spec.startswith("hdf5:"):
        rest = spec[5:]
        path, _, opts = rest.partition(",")
        options = _options(opts, spec)
        options["path"] = path
        return "hdf5", options
    name, _, opts = spec.partition(":")
    return name, _options(opts, spec)


def _options(text: str, spec: str) -> dict:
    out = {}
    for part in filter(None, text.split(",")):
        key, eq, value = part.partition("=")
        if not eq or not key:
            raise ValueError(f"dataset spec {spec!r}: expected key=value, got {part!r}")
        out[key.strip()] = value.strip()
    return out


def _int(options: dict, key: str, default=None):
    if key not in options:
        return default
    value = options[key].lower().replace("_", "")
    mult = {"k": 1_000, "m": 1_000_000}.get(value[-1:], 1)
    return int(float(value[:-1] if mult > 1 else value) * mult)


def exact_distances(base, queries, ids, metric: str, chunk: int = 2048) -> np.ndarray:
    """float64 distance of ``queries[r]`` to ``base[ids[r, j]]`` under ``metric`` (inf where id < 0)."""
    base = host(base)
    queries = host(queries)
    ids = host(ids).astype(np.int64, copy=False)
    out = np.full(ids.shape, np.inf)
    for s in range(0, ids.shape[0], chunk):
        e = min(ids.shape[0], s + chunk)
        idx = ids[s:e]
        valid = idx >= 0
        x = base[np.where(valid, idx, 0)].astype(np.float64)
        q = queries[s:e].astype(np.float64)[:, None, :]
        if metric in ("sqeuclidean", "euclidean"):
            d = ((x - q) ** 2).sum(-1)
            if metric == "euclidean":
                d = np.sqrt(d)
        elif metric == "inner_product":
            d = -(x * q).sum(-1)
        elif metric == "cosine":
            nx = np.linalg.norm(x, axis=-1)
            nq = np.linalg.norm(q, axis=-1)
            with np.errstate(invalid="ignore", divide="ignore"):
                d = 1.0 - (x * q).sum(-1) / (nx * nq)
            d = np.where((nx == 0) | (nq == 0), 1.0, d)
        else:
            raise ValueError(f"unknown metric {metric!r}")
        out[s:e] = np.where(valid, d, np.inf)
    return out


def host(a) -> np.ndarray:
    """``a`` (NumPy, CuPy, PyTorch, anything with ``__cuda_array_interface__``) as a NumPy array."""
    if hasattr(a, "__cuda_array_interface__"):
        import cupy

        return cupy.asnumpy(cupy.asarray(a))
    if type(a).__module__.startswith("torch"):
        return a.detach().cpu().numpy()
    return np.asarray(a)


def _truth(base, queries, metric: str, k: int) -> np.ndarray:
    """Exact top-k ids by knngraph's own exact k-NN (GPU when usable)."""
    import knngraph

    _, ids = knngraph.knn(base, queries, min(k, base.shape[0]), metric=metric, device="auto", verbose=False)
    return host(ids).astype(np.int64)


def _finish(name, base, queries, metric, gt_ids, source, options) -> Dataset:
    nq = _int(options, "nq")
    if nq is not None:
        queries = queries[:nq]
        gt_ids = gt_ids[:nq] if gt_ids is not None else None
    n = _int(options, "n")
    if n is not None and n < base.shape[0]:
        base = base[:n]
        gt_ids = None
        source += f"; first {n} base rows"
    gt_ids = None if gt_ids is None else np.asarray(gt_ids).astype(np.int64)
    return Dataset(name, np.ascontiguousarray(base), np.ascontiguousarray(queries), metric, source, gt_ids)


def load(spec: str) -> Dataset:
    """Load the dataset named by ``spec`` (see the module docs)."""
    from knngraph import datasets, io

    name, options = parse_spec(spec)
    if name == "sample":
        s = datasets.load_sample()
        return _finish(spec, s.base, s.queries, s.metric, s.gt_indices, "knngraph.datasets.load_sample()", options)
    m = re.fullmatch(r"sift-photos-(\d+k)", name)
    if m:
        if m.group(1) not in _SIFT_SIZES:
            raise ValueError(f"sift-photos sizes with ground truth: {', '.join(_SIFT_SIZES)}; got {name!r}")
        return _load_sift(spec, _SIFT_SIZES[m.group(1)], options)
    if name == "minilm-words":
        return _load_minilm(spec, options)
    if name == "hdf5":
        d = io.read_ann_benchmarks(options["path"])
        return _finish(spec, d["train"], d["test"], d["metric"], d["neighbors"], f"ann-benchmarks file {options['path']}",
                       options)
    if name == "bigann":
        for key in ("base", "query"):
            if key not in options:
                raise ValueError(f"dataset spec {spec!r}: bigann needs base= and query= (and usually gt=)")
        gt = io.read(options["gt"]) if "gt" in options else None
        return _finish(spec, io.read(options["base"]), io.read(options["query"]), options.get("metric", "sqeuclidean"),
                       gt, f"big-ann-benchmarks files {options['base']}", options)
    if name == "synth":
        return _load_synth(spec, options)
    raise ValueError(f"unknown dataset {spec!r}; known: sample, sift-photos-{{20k,100k,450k,770k}}, minilm-words, "
                     "hdf5:PATH, bigann:base=...,query=...,gt=..., synth:n=N,d=D")


def device_data_dir() -> Path | None:
    """Where a GPU run finds the cut real data: ``$KNNGRAPH_DEVICE_DATA``, else the repository's ``.data/``
    (carried to the GPU machine), if either exists."""
    for cand in (os.environ.get("KNNGRAPH_DEVICE_DATA"), Path(__file__).resolve().parents[2] / ".data"):
        if cand and Path(cand).is_dir():
            return Path(cand)
    return None


def sift_photos(n: int, nq: int | None = None) -> str:
    """The spec of the first ``n`` rows of sift-photos (and first ``nq`` queries): a size with ground truth
    files where ``n`` is one, else the next larger one cut to ``n`` rows (ground truth recomputed)."""
    if not 1 <= n <= SIFT_ROWS:
        raise ValueError(f"sift-photos has {SIFT_ROWS} rows, asked for n={n}")
    name, size = next((k, v) for k, v in _SIFT_SIZES.items() if v >= n)
    opts = ([f"n={n}"] if n != size else []) + ([f"nq={nq}"] if nq is not None else [])
    return f"sift-photos-{name}" + (":" + ",".join(opts) if opts else "")


def _load_sift(spec: str, n_base: int, options: dict) -> Dataset:
    from knngraph import datasets, io

    shared = datasets.shared_datasets_dir()
    if shared is not None and (shared / "sift-photos" / "base.u8bin").exists():
        s = datasets.load_sift_photos(n_base)
        return _finish(spec, s.base, s.queries, s.metric, s.gt_indices, "../shared/datasets/sift-photos", options)
    dd = device_data_dir()
    if dd is not None and (dd / "sift450k-base.u8bin").exists():
        queries = io.read(dd / "sift-query.u8bin", mmap=False)
        source = "sift-photos cut into .data/ by scripts/prepare_device_data.py (exact top-32)"
        if n_base == SIFT_ROWS and (dd / "sift770k-rest.u8bin").exists():
            # the rows past 450k and the whole base's ground truth come in a second carry
            # (scripts/prepare_device_data.py --rest770)
            base = np.concatenate([io.read(dd / "sift450k-base.u8bin"), io.read(dd / "sift770k-rest.u8bin")])
            return _finish(spec, base, queries, "sqeuclidean", io.read(dd / "sift770k-gt32.ibin", mmap=False), source,
                           options)
        if n_base <= 450_000:
            base = io.read(dd / "sift450k-base.u8bin", mmap=False, rows=(0, n_base))
            gt = io.read(dd / "sift450k-gt32.ibin", mmap=False) if n_base == 450_000 else None
            return _finish(spec, base, queries, "sqeuclidean", gt,
                           source if gt is not None else f"first {n_base} rows of the 450k cut in .data/", options)
    raise FileNotFoundError(f"{spec}: sift-photos not found in ../shared/datasets (or $KNNGRAPH_DATASETS)"
                            " nor in .data/ (or $KNNGRAPH_DEVICE_DATA)")


def _load_minilm(spec: str, options: dict) -> Dataset:
    from knngraph import datasets, io

    folder = os.environ.get("KNNGRAPH_MINILM_DIR")
    if folder:
        d = Path(folder)
        return _finish(spec, np.load(d / "base.npy"), np.load(d / "query.npy"), "cosine",
                       io.read(d / "gt100-cosine.ibin", mmap=False), "minilm-words from $KNNGRAPH_MINILM_DIR", options)
    s = datasets.load_minilm_words()
    return _finish(spec, s.base, s.queries, s.metric, s.gt_indices, "../shared/datasets/minilm-words", options)


def _load_synth(spec: str, options: dict) -> Dataset:
    from .synthetic import GaussianMixture

    n = _int(options, "n")
    d = _int(options, "d", 128)
    if n is None:
        raise ValueError(f"dataset spec {spec!r}: synth needs n= (and d=, default 128)")
    seed = _int(options, "seed", 0)
    clusters = _int(options, "clusters", GaussianMixture.default_clusters(n))
    nq = _int(options, "nq", 1000)
    mix = GaussianMixture(d, clusters, seed=seed)
    base = mix.sample(n, stream=0)
    queries = mix.sample(nq, stream=1) if nq > 0 else np.empty((0, d), np.float32)
    source = f"Gaussian mixture, {clusters} components, seed {seed} (benchmarks/runner/synthetic.py)"
    options = {k: v for k, v in options.items() if k not in ("n", "nq")}
    return _finish(spec, base, queries, "sqeuclidean", None, source, options)


def dataset_path_exists(spec: str) -> bool:
    """Whether a file-backed spec's files exist (for skipping with a note rather than failing)."""
    name, options = parse_spec(spec)
    if name == "hdf5":
        return Path(options["path"]).exists()
    return True
