"""Type aliases of the public signatures: what the arguments shared by many functions accept.

Arrays are :data:`typing.Any`: the library takes NumPy arrays and whatever :func:`numpy.asarray` takes
(lists of lists, memory maps, pandas frames), CuPy arrays, PyTorch tensors (CPU or CUDA) and any array that
offers DLPack or ``__cuda_array_interface__``; these share no static type. Arguments read on the host only
use :data:`numpy.typing.ArrayLike`, results that are always NumPy :class:`numpy.ndarray`.

The aliases are for reading signatures and for type checkers; nothing checks them at run time (every
function checks its arguments itself and names the argument in its error).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, BinaryIO, TypeAlias, Union

from ._device import Device

__all__ = ["Array", "DeviceLike", "Devices", "MemoryLimit", "PathLike", "FileTarget"]

#: an array on the host or a device: NumPy (or what numpy.asarray takes), CuPy, PyTorch, DLPack,
#: ``__cuda_array_interface__``
Array: TypeAlias = Any
#: the ``device=`` argument, ``"auto"``, ``"cpu"``, ``"cuda"`` or ``"cuda:N"`` (a resolved
#: :class:`~knngraph._device.Device` works too)
DeviceLike: TypeAlias = Union[str, Device]
#: the ``devices=`` argument, GPU ids (``[0, 1]``, ``'cuda:1'``), ``'all'``, or ``'cpu'`` entries
#: (:mod:`knngraph.multidevice`)
Devices: TypeAlias = Union[str, int, Device, Sequence[Union[int, str, Device]]]
#: the ``memory_limit=`` argument, a number of bytes, a size such as ``"8GB"``, or None (free device memory
#: minus a margin on a GPU, a quarter of RAM on the CPU)
MemoryLimit: TypeAlias = Union[int, float, str, None]
#: a file path
PathLike: TypeAlias = Union[str, os.PathLike[str]]
#: where a knngraph file is written or read, a path or a binary file object (writable to save; readable and
#: seekable to load)
FileTarget: TypeAlias = Union[str, os.PathLike[str], BinaryIO]
