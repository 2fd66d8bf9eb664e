"""Device helpers written once and shared by every algorithm (CPU and GPU).

What lives where:

==================  ==================================================================================
``constants``       warp width, full lane mask, the "no id" sentinel that sorts last, power-of-two sizes
``compile``         the one idiom for "written once, compiled for CPU and GPU" (below), and the
                    threaded / serial twins of parallel CPU kernels
``distances``       distance kinds, inverse norms, reported distances (host code)
``pair_distance``   accumulator -> distance (:func:`~.pair_distance.finish_distance`), single-pair
                    distances on the CPU
``cpu_inputs``      the arrays CPU kernels take: float16 widened, read-only inputs as writable views
``filters``         allowed ids of filtered searches and deleted rows, as bitsets (host code);
                    ``bitset``: the test of one id, in kernels
``components``      reachability and connected components of fixed-degree graphs (compiled passes in
                    ``_component_kernels``)
``lists``           (distance, id) order, short sorted lists, binary max-heaps and the symmetric
                    min-max heap (a bounded double-ended priority queue)
``visited``         visited sets of graph searches: open-addressing hash table with deletion, Bloom filter
``stamps``          (CPU) the generation-stamped visited sets of the CPU graph walks and their workers
``rows``            (CPU) row helpers of the CPU graph walks: base-row distances in any dtype (float16 as
                    its bits, 1-bit codes), query rows, cache-line prefetches, output rows
``random``          the integer hash that is the only source of randomness of the kernels, and random
                    arithmetic progressions (distinct random ids without a duplicate check)
``warp``            (CUDA) warp reductions, warp distances, warp bitonic sort
``kselect``         per-row k-selection of matrix tiles on the GPU (quick multi-select, warp filter)
``rescore``         exact distances of chosen neighbour ids (L2 without cancellation), re-sorted
==================  ==================================================================================

**Written once, compiled for CPU and GPU.** A helper is a plain Python function decorated with
:func:`~knngraph.primitives.compile.host_and_device`. That gives a ``numba.njit`` dispatcher, which CPU code
calls directly and CUDA kernels may call too (numba-cuda compiles a called ``njit`` function for the device).
Kernels that want the helper forced inline get its CUDA build with
:func:`~knngraph.primitives.compile.cuda_version` (a :func:`~knngraph.primitives.compile.device_function` of
the same source: compiled once, inlined by NVVM), bound once at the top of the kernel module. Nothing here
allocates: every structure lives in a slice of an array the caller owns (per-thread scratch on the CPU, shared
memory on the GPU).

Modules without ``cuda`` / ``warp`` / ``kernels`` in their purpose import only NumPy and numba's CPU
target, so ``import knngraph`` stays free of numba.cuda and CuPy; the CUDA modules are imported on first
GPU use. Host code of the GPU paths imports numba not at all: the host pieces (``constants``,
``distances``, ``cpu_inputs``, ``filters``, ``components``) are kept apart from the compiled helpers
(``pair_distance``, ``bitset``, ``_component_kernels``), so that a process whose GPU kernels are all in
the disk cache (loaded by name, :func:`knngraph._cuda_launch.kernel_module`) never starts numba.
"""
