"""Environment fix for the lent GPU machine only (not library code).

Its numba-cuda 0.30.4 still calls ``np.row_stack``, which NumPy 2.5 removed; scripts/gpu_check.sh puts
this folder on PYTHONPATH so the alias exists before numba-cuda compiles anything.
"""
import numpy

if not hasattr(numpy, "row_stack"):
    numpy.row_stack = numpy.vstack
