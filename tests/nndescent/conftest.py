"""Simulator support for the GNND kernels: cache-hinted loads/stores and nanosleep (numba-cuda has them
on the GPU; its simulator does not). Plain loads and stores are exact there: the simulator has no caches."""

import os

if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
    import time

    from numba.cuda.simulator import kernelapi

    def _ldcg(self, array, index):
        return array[index]

    def _stcg(self, array, index, value):
        array[index] = value

    def _nanosleep(self, ns):
        time.sleep(5e-4)  # back off so the lock holder's 32 threads get the interpreter

    for _name, _fn in (("ldcg", _ldcg), ("stcg", _stcg), ("nanosleep", _nanosleep)):
        if not hasattr(kernelapi.FakeCUDAModule, _name):
            setattr(kernelapi.FakeCUDAModule, _name, _fn)
