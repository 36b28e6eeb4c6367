"""
A stand-in ``torch`` for the Spark twins' engine images, which have no torch, GPU or NCCL.
Only what the link test (files/spark-link-test) uses: one-dimensional tensors of float32
or float64 held in host memory ("cuda" is a name), ``torch.cuda``'s device calls, and
``torch.distributed`` whose "nccl" backend really moves the bytes between the ranks over TCP
(distributed.py), so a bandwidth measured with it is the twins' network's own.

The docker stand-in puts the folder holding this package on the PYTHONPATH of a container
of an engine image; production code never sees it.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

__version__ = "2.14.1+spark.twin"
__all__ = ["Tensor", "cuda", "distributed", "empty", "float32", "float64", "full", "ones"]


class dtype:  # noqa: N801 -- torch's name
    def __init__(self, name: str, code: str) -> None:
        self.name = name
        self.code = code  # struct / array typecode
        self.itemsize = struct.calcsize(code)

    def __repr__(self) -> str:
        return f"torch.{self.name}"


float32 = dtype("float32", "f")
float64 = dtype("float64", "d")


class Tensor:
    """A one-dimensional tensor: ``data`` holds its elements, packed as ``dtype`` says."""

    def __init__(self, data: bytearray, dtype: dtype, device: str = "cuda") -> None:
        self.data = data
        self.dtype = dtype
        self.device = device

    def numel(self) -> int:
        return len(self.data) // self.dtype.itemsize

    def element_size(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        return len(self.data)

    @property
    def shape(self) -> tuple[int]:
        return (self.numel(),)

    def values(self) -> memoryview:
        return memoryview(self.data).cast(self.dtype.code)  # type: ignore[call-overload]

    def __len__(self) -> int:
        return self.numel()

    def __getitem__(self, index: int) -> Tensor:
        value = self.values()[index]
        return Tensor(bytearray(struct.pack(self.dtype.code, value)), self.dtype, self.device)

    def item(self) -> float:
        if self.numel() != 1:
            raise RuntimeError(
                f"a Tensor with {self.numel()} elements cannot be converted to Scalar"
            )
        return float(self.values()[0])

    def tolist(self) -> list[float]:
        return list(self.values())

    def fill_(self, value: float) -> Tensor:
        self.data[:] = struct.pack(self.dtype.code, value) * self.numel()
        return self


def _count(size: int | Iterable[int]) -> int:
    dims = (size,) if isinstance(size, int) else tuple(size)
    if len(dims) != 1:
        raise NotImplementedError("the stand-in torch has one-dimensional tensors only")
    return int(dims[0])


def empty(size: int | Iterable[int], *, dtype: dtype = float32, device: str = "cuda") -> Tensor:
    return Tensor(bytearray(_count(size) * dtype.itemsize), dtype, str(device))


def full(
    size: int | Iterable[int], fill_value: float, *, dtype: dtype = float32, device: str = "cuda"
) -> Tensor:
    return empty(size, dtype=dtype, device=device).fill_(fill_value)


def ones(size: int | Iterable[int], *, dtype: dtype = float32, device: str = "cuda") -> Tensor:
    return full(size, 1.0, dtype=dtype, device=device)


def zeros(size: int | Iterable[int], *, dtype: dtype = float32, device: str = "cuda") -> Tensor:
    return empty(size, dtype=dtype, device=device)


def tensor(values: Iterable[float], *, dtype: dtype = float32, device: str = "cuda") -> Tensor:
    items = list(values)
    return Tensor(bytearray(struct.pack(f"{len(items)}{dtype.code}", *items)), dtype, str(device))


# Last: both submodules import this one.
from . import cuda, distributed  # noqa: E402
