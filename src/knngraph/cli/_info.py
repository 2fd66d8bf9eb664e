"""``knngraph info``: versions, devices and memory."""

from __future__ import annotations

import importlib
import os
import platform

import numpy as np

import knngraph

from .common import add_common_options, emit

__all__ = ["add_commands", "cmd_info"]


def add_commands(subparsers) -> None:
    """Add ``info`` to the command line's ``subparsers``."""
    p = subparsers.add_parser("info", help="versions, devices and memory")
    add_common_options(p, device=False)
    p.set_defaults(func=cmd_info)


def _gpu_info() -> list[dict]:
    """One entry per GPU (name, memory, compute capability), or one saying why none is usable."""
    from .._device import _gpu_probe

    ok, why = _gpu_probe()
    if not ok:
        return [{"usable": False, "reason": why}]
    import cupy

    out = []
    for i in range(cupy.cuda.runtime.getDeviceCount()):
        with cupy.cuda.Device(i):
            props = cupy.cuda.runtime.getDeviceProperties(i)
            free, total = cupy.cuda.runtime.memGetInfo()
        out.append({"usable": True, "index": i, "name": props["name"].decode(), "memory_total": int(total),
                    "memory_free": int(free), "compute_capability": f"{props['major']}.{props['minor']}",
                    "multiprocessors": int(props["multiProcessorCount"])})
    return out


def cmd_info(args) -> int:
    """Print the versions of knngraph and its dependencies, the CPU, the memory and the usable GPUs."""
    import numba

    versions = {"knngraph": knngraph.__version__, "python": platform.python_version(), "numpy": np.__version__,
                "numba": numba.__version__}
    for mod in ("numba_cuda", "cupy", "dask", "h5py", "torch"):
        try:
            versions[mod] = importlib.import_module(mod).__version__
        except Exception:
            versions[mod] = None
    mem = None
    try:
        mem = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        pass
    payload = {"versions": versions, "cpu_count": os.cpu_count(), "numba_threads": numba.get_num_threads(),
               "host_memory": mem, "gpus": _gpu_info()}
    lines = ["knngraph " + versions["knngraph"]]
    lines += [f"  {k:<10} {v or 'not installed'}" for k, v in versions.items() if k != "knngraph"]
    lines.append(f"  cpu: {os.cpu_count()} cores, numba threads {payload['numba_threads']}"
                 + (f", {mem / 2**30:.1f} GiB RAM" if mem else ""))
    for g in payload["gpus"]:
        if g["usable"]:
            lines.append(f"  gpu {g['index']}: {g['name']} (sm {g['compute_capability']}, {g['multiprocessors']} SMs), "
                         f"{g['memory_free'] / 2**30:.1f} of {g['memory_total'] / 2**30:.1f} GiB free")
        else:
            lines.append(f"  gpu: none usable ({g['reason']})")
    emit(args, payload, lines)
    return 0
