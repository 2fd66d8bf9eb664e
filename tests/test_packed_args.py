"""The packed kernel arguments of the fast searcher's launch (``_cuda_launch.PackedArgs``): rewriting an
array's changing values in place must give the 8-byte values a fresh flattening gives (no GPU needed)."""

import numpy as np
import pytest

from knngraph._cuda_launch import PackedArgs, flat_array


def test_rewritten_slots_match_a_fresh_flattening():
    flat = (flat_array(0x1000, (1, 32), 4) + [np.int64(10), np.int64(-3)] + flat_array(0x2000, (1,), 4)
            + [np.float64(0.5)])
    args = PackedArgs(flat)
    slots = np.array(PackedArgs.array_slots(0) + PackedArgs.array_slots(11), np.intp)
    args.values[slots] = (777 * 32, 0xDEAD00, 777, 777, 0xBEEF00, 777)
    want = (flat_array(0xDEAD00, (777, 32), 4) + [np.int64(10), np.int64(-3)] + flat_array(0xBEEF00, (777,), 4)
            + [np.float64(0.5)])
    assert args.values.tolist() == [int(np.asarray(v).view(np.uint64)) for v in want]
    # the pointer array points at each value in turn
    assert (args.pointers - args.pointers[0]).tolist() == [8 * i for i in range(len(want))]


def test_float32_scalars_are_refused():
    with pytest.raises(TypeError, match="8-byte"):
        PackedArgs([np.int64(1), np.float32(2.0)])
