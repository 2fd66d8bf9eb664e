"""Tests for knngraph.datasets: the bundled sample, dataset discovery and the shared-data loaders."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from knngraph import io
from knngraph.datasets import (
    SIFT_PHOTOS_BASE_SIZES,
    Sample,
    load_minilm_words,
    load_sample,
    load_sift_photos,
    shared_datasets_dir,
)

SKIP_REASON = (
    "shared datasets not found (looked via KNNGRAPH_DATASETS, <repo>/../shared/datasets, "
    "<cwd>/../shared/datasets, <cwd>/shared/datasets); set KNNGRAPH_DATASETS to run this test"
)


def _shared(dataset: str) -> Path:
    root = shared_datasets_dir()
    if root is None:
        pytest.skip(f"{dataset}: {SKIP_REASON}")
    if not (root / dataset).is_dir():
        pytest.skip(f"{dataset}: {root / dataset} does not exist; set KNNGRAPH_DATASETS to run this test")
    return root / dataset


def _sqeuclidean(queries: np.ndarray, base: np.ndarray) -> np.ndarray:
    q = queries.astype(np.float64)
    b = base.astype(np.float64)
    d = (q * q).sum(1)[:, None] - 2.0 * q @ b.T + (b * b).sum(1)[None, :]
    return np.rint(d)  # integer inputs: exact integers, rounding removes float64 noise


def _cosine(queries: np.ndarray, base: np.ndarray) -> np.ndarray:
    q = queries.astype(np.float64)
    b = base.astype(np.float64)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    b /= np.linalg.norm(b, axis=1, keepdims=True)
    return 1.0 - q @ b.T


def _check_topk(dist: np.ndarray, gt_indices: np.ndarray, gt_distances: np.ndarray, k: int, atol: float):
    """Ground-truth top-k ids must be a valid top-k of ``dist`` (ties at the k-th distance allowed)."""
    kth = np.sort(dist, axis=1)[:, k - 1]
    ids = gt_indices[:, :k]
    assert ids.min() >= 0 and ids.max() < dist.shape[1]
    assert all(len(set(row)) == k for row in ids.tolist()), "duplicate ids in ground truth"
    got = np.take_along_axis(dist, ids.astype(np.int64), axis=1)
    # every returned id is within the true k-th distance (a tie at the k-th counts)
    assert np.all(got <= kth[:, None] + atol)
    # the stored distances are the real ones, sorted ascending
    np.testing.assert_allclose(gt_distances[:, :k], got, rtol=0, atol=atol)
    assert np.all(np.diff(gt_distances[:, :k], axis=1) >= 0)


# ---------------------------------------------------------------------------
# bundled sample
# ---------------------------------------------------------------------------


def test_sample_shapes_and_dtypes():
    s = load_sample()
    assert isinstance(s, Sample)
    assert s.base.shape == (20_000, 128) and s.base.dtype == np.uint8
    assert s.queries.shape == (1_000, 128) and s.queries.dtype == np.uint8
    assert s.gt_indices.shape == (1_000, 100) and s.gt_indices.dtype == np.int32
    assert s.gt_distances.shape == (1_000, 100) and s.gt_distances.dtype == np.float32
    assert s.metric == "sqeuclidean"
    assert s.gt_indices.min() >= 0 and s.gt_indices.max() < 20_000
    for arr in s[:4]:
        assert not isinstance(arr, np.memmap) and arr.flags.writeable


def test_sample_ground_truth_is_exact():
    s = load_sample()
    n = 50
    dist = _sqeuclidean(s.queries[:n], s.base)
    _check_topk(dist, s.gt_indices[:n], s.gt_distances[:n], k=10, atol=0)


def test_sample_ground_truth_top100_sorted_and_integer():
    s = load_sample()
    assert np.all(np.diff(s.gt_distances, axis=1) >= 0)
    assert np.array_equal(s.gt_distances, np.rint(s.gt_distances))


def test_sample_is_prefix_of_shared_data():
    root = _shared("sift-photos")
    s = load_sample()
    np.testing.assert_array_equal(s.base, io.read(root / "base.u8bin", rows=(0, 20_000)))
    np.testing.assert_array_equal(s.queries, io.read(root / "query.u8bin", rows=(0, 1_000)))
    np.testing.assert_array_equal(s.gt_indices, io.read(root / "gt100-base20000.ibin", rows=(0, 1_000)))
    np.testing.assert_array_equal(s.gt_distances, io.read(root / "gt100-base20000.fbin", rows=(0, 1_000)))


# ---------------------------------------------------------------------------
# discovery
# ---------------------------------------------------------------------------


def test_shared_dir_from_env(tmp_path, monkeypatch):
    monkeypatch.setenv("KNNGRAPH_DATASETS", str(tmp_path))
    assert shared_datasets_dir() == tmp_path


def test_shared_dir_env_returned_even_if_missing(tmp_path, monkeypatch):
    missing = tmp_path / "nowhere"
    monkeypatch.setenv("KNNGRAPH_DATASETS", str(missing))
    assert shared_datasets_dir() == missing


def test_shared_dir_without_env(monkeypatch):
    monkeypatch.delenv("KNNGRAPH_DATASETS", raising=False)
    found = shared_datasets_dir()
    assert found is None or found.is_dir()


def test_shared_dir_cwd_fallback(tmp_path, monkeypatch):
    import knngraph.datasets as ds

    monkeypatch.delenv("KNNGRAPH_DATASETS", raising=False)
    monkeypatch.setattr(ds, "_repo_root", lambda: None)
    (tmp_path / "work" / "shared" / "datasets").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "work")
    assert shared_datasets_dir() == tmp_path / "work" / "shared" / "datasets"
    (tmp_path / "shared" / "datasets").mkdir(parents=True)  # ../shared/datasets wins
    assert shared_datasets_dir() == tmp_path / "shared" / "datasets"


def test_loaders_not_found_message(tmp_path, monkeypatch):
    monkeypatch.setenv("KNNGRAPH_DATASETS", str(tmp_path))
    with pytest.raises(FileNotFoundError, match=r"sift-photos/base\.u8bin not found; looked in .*KNNGRAPH_DATASETS"):
        load_sift_photos(20_000)
    with pytest.raises(FileNotFoundError, match=r"minilm-words/base\.npy not found.*Set the KNNGRAPH_DATASETS"):
        load_minilm_words()


def test_loaders_not_found_lists_candidates(tmp_path, monkeypatch):
    import knngraph.datasets as ds

    monkeypatch.delenv("KNNGRAPH_DATASETS", raising=False)
    monkeypatch.setattr(ds, "_repo_root", lambda: None)
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    assert shared_datasets_dir() is None
    with pytest.raises(FileNotFoundError, match=r"looked in .*shared.datasets \(next to the working directory\)"):
        load_sift_photos(20_000)


@pytest.mark.parametrize("n_base", [0, 1000, 770_534, -20_000])
def test_sift_photos_bad_n_base(n_base):
    with pytest.raises(ValueError, match=rf"n_base must be one of 20000, 100000, 450000, 770533 .*got {n_base}"):
        load_sift_photos(n_base)


@pytest.mark.parametrize("n_base", [20_000.0, "20000", True])
def test_sift_photos_n_base_type(n_base):
    with pytest.raises(TypeError, match="n_base must be an integer"):
        load_sift_photos(n_base)


def _fake_sift_photos(root: Path) -> Sample:
    """A tiny stand-in for sift-photos made from the bundled sample."""
    s = load_sample()
    d = root / "sift-photos"
    d.mkdir(parents=True)
    io.write(d / "base.u8bin", s.base)
    io.write(d / "query.u8bin", s.queries)
    io.write(d / "gt100-base20000.ibin", s.gt_indices)
    io.write(d / "gt100-base20000.fbin", s.gt_distances)
    return s


def test_sift_photos_loader_on_fake_data(tmp_path, monkeypatch):
    s = _fake_sift_photos(tmp_path)
    monkeypatch.setenv("KNNGRAPH_DATASETS", str(tmp_path))
    got = load_sift_photos(20_000)
    assert got.queries.shape == (1_000, 128)  # None means all queries in the file
    assert isinstance(got.base, np.memmap) and not got.base.flags.writeable
    np.testing.assert_array_equal(got.base, s.base)
    got = load_sift_photos(20_000, n_queries=7)
    np.testing.assert_array_equal(got.queries, s.queries[:7])
    np.testing.assert_array_equal(got.gt_indices, s.gt_indices[:7])
    np.testing.assert_array_equal(got.gt_distances, s.gt_distances[:7])
    assert got.metric == "sqeuclidean"
    with pytest.raises(FileNotFoundError, match=r"gt100-base100000\.ibin not found"):
        load_sift_photos(100_000)


@pytest.mark.parametrize("n_queries, exc", [(0, ValueError), (1_001, ValueError), (2.0, TypeError), (True, TypeError)])
def test_sift_photos_bad_n_queries(tmp_path, monkeypatch, n_queries, exc):
    _fake_sift_photos(tmp_path)
    monkeypatch.setenv("KNNGRAPH_DATASETS", str(tmp_path))
    with pytest.raises(exc, match="n_queries must be"):
        load_sift_photos(20_000, n_queries=n_queries)


# ---------------------------------------------------------------------------
# shared datasets (skipped when absent)
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("n_base", SIFT_PHOTOS_BASE_SIZES)
def test_sift_photos_shapes(n_base):
    _shared("sift-photos")
    s = load_sift_photos(n_base, n_queries=20)
    assert s.base.shape == (n_base, 128) and s.base.dtype == np.uint8
    assert isinstance(s.base, np.memmap)
    assert s.queries.shape == (20, 128) and s.queries.dtype == np.uint8
    assert s.gt_indices.shape == (20, 100) and s.gt_indices.dtype == np.int32
    assert s.gt_distances.shape == (20, 100) and s.gt_distances.dtype == np.float32
    assert s.metric == "sqeuclidean"
    assert s.gt_indices.max() < n_base


def test_sift_photos_all_queries():
    _shared("sift-photos")
    s = load_sift_photos(20_000)
    assert s.queries.shape == (10_000, 128)
    assert s.gt_indices.shape == (10_000, 100)


def test_sift_photos_ground_truth():
    _shared("sift-photos")
    s = load_sift_photos(100_000, n_queries=10)
    dist = _sqeuclidean(s.queries, s.base)
    _check_topk(dist, s.gt_indices, s.gt_distances, k=10, atol=0)


def test_minilm_words():
    _shared("minilm-words")
    s = load_minilm_words(n_queries=8)
    assert s.base.shape == (60_000, 384) and s.base.dtype == np.float16
    assert isinstance(s.base, np.memmap)
    assert s.queries.shape == (8, 384) and s.queries.dtype == np.float16
    assert s.gt_indices.shape == (8, 100) and s.gt_indices.dtype == np.int32
    assert s.gt_distances.shape == (8, 100) and s.gt_distances.dtype == np.float32
    assert s.metric == "cosine"
    assert load_minilm_words().queries.shape == (5_000, 384)
    # ground truth was computed in float32; compare in float64 with a matching tolerance
    dist = _cosine(s.queries, s.base)
    _check_topk(dist, s.gt_indices, s.gt_distances, k=10, atol=1e-4)
