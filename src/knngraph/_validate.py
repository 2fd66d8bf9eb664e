"""Input checks shared by every public entry point.

Rules: ``TypeError`` for unsupported types and dtypes, ``ValueError`` for bad
shapes and values, each message naming the argument, what was expected and what was given.
"""

from __future__ import annotations

import functools

import numpy as np

from ._device import _is_cupy, as_cupy, as_numpy, is_device_array

__all__ = ["SUPPORTED_DTYPES", "check_vectors", "check_k", "check_int", "check_same_dim", "check_finite"]

SUPPORTED_DTYPES = (np.dtype(np.float32), np.dtype(np.float16), np.dtype(np.uint8), np.dtype(np.int8))
_DTYPE_NAMES = ", ".join(str(d) for d in SUPPORTED_DTYPES)

# rows checked for NaN/inf at a time on the host (keeps memory-mapped inputs streaming)
_FINITE_CHUNK_ROWS = 1 << 16
# up to this many values, check_finite counts the finite ones instead of reducing (faster below it, slower above)
_COUNT_FINITE_MAX = 1 << 13


def _dtype_of(x):
    dt = getattr(x, "dtype", None)
    if dt is None:
        return None
    if type(dt).__module__.split(".")[0] == "torch":
        import torch

        mapping = {torch.float32: np.float32, torch.float16: np.float16, torch.uint8: np.uint8,
                   torch.int8: np.int8, torch.float64: np.float64, torch.int32: np.int32,
                   torch.int64: np.int64, torch.bfloat16: None, torch.bool: np.bool_}
        t = mapping.get(dt, None)
        return np.dtype(t) if t is not None else str(dt)
    try:
        return np.dtype(dt)
    except TypeError:
        return str(dt)


def check_vectors(x, name: str, *, on_gpu: bool, allow_float64: bool = True):
    """Validate a 2-D array of vectors and return it as a C-contiguous NumPy or CuPy array.

    * ``TypeError`` for objects that are not arrays and for dtypes outside float32/float16/uint8/int8
      (float64 is accepted and cast to float32 when ``allow_float64``, as users pass it constantly).
    * ``ValueError`` for ndim != 2 and for empty arrays (no rows or no columns).
    * Non-contiguous and negative-stride inputs are made contiguous (a copy), never rejected.

    Host inputs stay on the host unless ``on_gpu``; device inputs are moved only when ``on_gpu`` is
    False (the CPU path was asked for).
    """
    # what nearly every call passes, answered first (it is returned as it is below too): a C-contiguous 2-D
    # NumPy array for the host, or a CuPy one for the GPU, of a supported dtype, neither empty
    if (not on_gpu if type(x) is np.ndarray else on_gpu and _is_cupy(x)) and x.ndim == 2 \
            and x.dtype in SUPPORTED_DTYPES and x.shape[0] and x.shape[1] and x.flags.c_contiguous:
        return x
    x = _array_like(x, name)
    dt = _dtype_of(x)
    if isinstance(dt, np.dtype) and dt == np.float64 and allow_float64:
        pass
    elif dt not in SUPPORTED_DTYPES:
        raise TypeError(f"{name} has dtype {dt}; supported vector dtypes are {_DTYPE_NAMES} (float64 is cast)")
    shape = tuple(int(s) for s in x.shape)
    if len(shape) != 2:
        raise ValueError(f"{name} must be a 2-D array of shape (n_vectors, dim), got {len(shape)}-D shape {shape}")
    if shape[0] == 0 or shape[1] == 0:
        raise ValueError(f"{name} is empty (shape {shape}); it needs at least one vector of at least one dimension")

    if on_gpu:
        import cupy

        arr = as_cupy(x)
        if arr.dtype == np.float64:
            arr = _to_float32(arr, name, cupy)
        if not arr.flags.c_contiguous:
            arr = cupy.ascontiguousarray(arr)
        return arr
    arr = as_numpy(x)
    if arr.dtype == np.float64:
        arr = _to_float32(arr, name, np)
    if not arr.flags.c_contiguous:
        arr = np.ascontiguousarray(arr)
    return arr


_FLOAT32_MAX = float(np.finfo(np.float32).max)


def _to_float32(arr, name: str, xp):
    """float64 vectors as float32; ValueError when finite values lie beyond float32's range (they would
    turn into inf and be reported as non-finite input)."""
    big = xp.abs(arr) > _FLOAT32_MAX
    if bool(xp.any(big & xp.isfinite(arr))):
        row = int(xp.argmax(big.any(axis=1)))
        raise ValueError(f"{name} row {row} has values beyond the float32 range (|x| > {_FLOAT32_MAX:.3g}); knngraph "
                         "computes in float32: scale the data down")
    return arr.astype(np.float32)


def _array_like(x, name: str):
    """``x`` as something with ``shape`` and ``dtype``: lists of lists, np.matrix and pandas DataFrames are
    converted (as scikit-learn accepts them); anything else must already be an array."""
    if x is None:
        raise TypeError(f"{name} must be a 2-D array of vectors, got None")
    if isinstance(x, np.matrix):
        return np.asarray(x)
    if type(x).__module__.split(".")[0] == "pandas" and hasattr(x, "to_numpy"):
        arr = x.to_numpy()
        if arr.dtype == object:
            raise TypeError(f"{name} is a DataFrame with non-numeric columns; vectors need numbers in every column")
        return arr
    if isinstance(x, (list, tuple)):
        try:
            arr = np.asarray(x)
        except ValueError:
            raise ValueError(f"{name} is a ragged list: its rows have different lengths; vectors must all have the "
                             "same dimension") from None
        if arr.dtype == object or arr.dtype.kind in "USVb":
            raise TypeError(f"{name} must hold numbers, got a list of {type(x[0]).__name__ if len(x) else 'nothing'} "
                            f"(dtype {arr.dtype})")
        return arr
    if not (hasattr(x, "shape") and hasattr(x, "dtype")):
        raise TypeError(f"{name} must be an array (NumPy, CuPy, PyTorch or DLPack), got {type(x).__name__}")
    return x


def check_finite(x, name: str) -> None:
    """ValueError naming the first row that holds NaN or inf (float inputs only)."""
    if x.dtype.kind != "f":
        return
    if _is_cupy(x):
        import cupy

        # the common case in one launch (flag_nonfinite) and one transfer; the rows only to name the bad one
        flag = cupy.zeros(1, cupy.int32)
        flag_nonfinite(cupy.ascontiguousarray(x), flag, 0)
        if not flag.get()[0]:
            return
        row = int(cupy.argmax(~cupy.isfinite(x).all(axis=1)))
        raise ValueError(f"{name} row {row} contains NaN or inf; remove or fix non-finite vectors")
    n = x.shape[0]
    whole = n <= _FINITE_CHUNK_ROWS and type(x) is np.ndarray
    for start in range(0, n, _FINITE_CHUNK_ROWS):
        block = x if whole else np.asarray(x[start:start + _FINITE_CHUNK_ROWS])
        finite = np.isfinite(block)
        # the common case in one pass; the rows' reduction only to name the first bad one. A few rows (a small
        # search's queries) are counted: a ufunc reduction costs microseconds of setup, more than the count
        if (np.count_nonzero(finite) == finite.size) if finite.size <= _COUNT_FINITE_MAX else finite.all():
            continue
        row = start + int(np.argmin(finite.all(axis=1)))
        raise ValueError(f"{name} row {row} contains NaN or inf; remove or fix non-finite vectors")


def flag_nonfinite(x, flags, slot: int) -> bool:
    """Set ``flags[slot]`` (an int32 CuPy array) to 1 on the device when the C-contiguous float CuPy array
    ``x`` holds NaN or inf, without waiting for the answer: a search reads its flags with the one
    transfer it makes at its end (:func:`check_finite` is a reduction and a host sync of its own, a
    tenth of a small search). Returns False, launching nothing, for arrays it does not take (other
    dtypes, not C-contiguous): check those with :func:`check_finite` (which uses this kernel on a
    C-contiguous copy; :func:`nonfinite_flaggable` says which arrays it takes). Each value's exponent bits
    are tested (all ones: inf or NaN), as integers of the value's width."""
    if not nonfinite_flaggable(x):
        return False
    size = x.size
    if size:
        threads = 256
        blocks = min((size + threads - 1) // threads, 1024)
        _nonfinite_flag_kernel(x.dtype.itemsize)((blocks,), (threads,),
                                                 (x, np.int64(size), flags[slot:slot + 1]))
    return True


def nonfinite_flaggable(x) -> bool:
    """Whether :func:`flag_nonfinite` takes the array ``x``: C-contiguous float16, float32 or float64."""
    return x.dtype.kind == "f" and x.dtype.itemsize in (2, 4, 8) and x.flags.c_contiguous


_NONFINITE_FLAG_SOURCE = r"""
extern "C" __global__ void knngraph_flag_nonfinite_NAME(const BITS* __restrict__ x, long long size, int* flag) {
    const BITS exponent = EXPONENT;
    bool bad = false;
    long long step = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < size; i += step)
        bad |= (x[i] & exponent) == exponent;
    if (__any_sync(0xffffffffu, bad) && threadIdx.x % 32 == 0) atomicOr(flag, 1);
}
"""


@functools.lru_cache(maxsize=None)
def _nonfinite_flag_kernel(itemsize: int):
    """The exponent test of :func:`flag_nonfinite` for float16 (2), float32 (4) or float64 (8) values."""
    import cupy

    bits, exponent = {2: ("unsigned short", "0x7c00u"), 4: ("unsigned int", "0x7f800000u"),
                      8: ("unsigned long long", "0x7ff0000000000000ull")}[itemsize]
    source = (_NONFINITE_FLAG_SOURCE.replace("NAME", str(8 * itemsize)).replace("BITS", bits)
              .replace("EXPONENT", exponent))
    return cupy.RawKernel(source, f"knngraph_flag_nonfinite_{8 * itemsize}")


def check_same_dim(base, queries, base_name="base", query_name="queries") -> None:
    if base.shape[1] != queries.shape[1]:
        raise ValueError(f"{query_name} has {queries.shape[1]} dimensions but {base_name} has {base.shape[1]}; "
                         "they must match")


def check_new_vectors(dataset, new_vectors, device):
    """(device, validated new vectors) for adding ``new_vectors`` to an index over ``dataset`` (the
    ``extend`` of every algorithm): same dimension, same dtype, finite."""
    from ._device import resolve_device

    dev = resolve_device(device, dataset, new_vectors)
    new = check_vectors(new_vectors, "new_vectors", on_gpu=dev.is_cuda and is_device_array(new_vectors))
    check_same_dim(dataset, new, "the index's vectors", "new_vectors")
    check_finite(new, "new_vectors")
    if new.dtype != dataset.dtype:
        raise TypeError(f"new_vectors has dtype {new.dtype} but the index holds {dataset.dtype}; convert them first")
    return dev, new


def check_int(value, name: str, *, low: int | None = None, high: int | None = None) -> int:
    """An integer in [low, high] (inclusive), else a message with the allowed range and the value."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    value = int(value)
    if (low is not None and value < low) or (high is not None and value > high):
        lo = "-inf" if low is None else str(low)
        hi = "inf" if high is None else str(high)
        raise ValueError(f"{name} must be in the range [{lo}, {hi}], got {value}")
    return value


def check_k(k, n: int, *, graph: bool = False, name: str = "k") -> int:
    """k >= 1 and k <= n (k < n for a graph, where a node is not its own neighbour); messages call the
    argument ``name`` (a builder's ``graph_degree``)."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {type(k).__name__} {k!r}")
    k = int(k)
    if k < 1:
        raise ValueError(f"{name} must be at least 1, got {k}")
    if graph and k >= n:
        raise ValueError(f"{name} must be smaller than the number of vectors for a k-NN graph (self excluded): "
                         f"{name}={k}, n={n}")
    if k > n:
        raise ValueError(f"{name}={k} is larger than the number of base vectors n={n}")
    return k
