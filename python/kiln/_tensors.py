"""Tensors in and out of kiln: numpy arrays (host) and DLPack device tensors."""

from __future__ import annotations

import sys
from typing import Any, Optional, Tuple

import numpy as np

from ._errors import InvalidInput, InvalidOption, Unsupported

# numpy dtype name (numpy's own, or ml_dtypes' for the types numpy lacks) -> kiln's name.
_KILN_NAME = {n: n for n in ("float32", "float64", "float16", "bfloat16", "int8", "int16", "int32", "int64",
                             "uint8", "uint16", "uint32", "uint64", "bool", "int4", "uint4")}
_KILN_NAME.update({"float8_e4m3fn": "float8e4m3fn", "float8_e4m3fnuz": "float8e4m3fnuz",
                   "float8_e5m2": "float8e5m2", "float8_e5m2fnuz": "float8e5m2fnuz"})
# kiln dtypes numpy lacks -> the ml_dtypes type that holds them.
_ML_DTYPES = {"bfloat16": "bfloat16", "float8e4m3fn": "float8_e4m3fn", "float8e4m3fnuz": "float8_e4m3fnuz",
              "float8e5m2": "float8_e5m2", "float8e5m2fnuz": "float8_e5m2fnuz", "int4": "int4", "uint4": "uint4"}

_DL_CUDA, _DL_CUDA_MANAGED = 2, 13


def _ml_dtype(kiln_name: str, what: str) -> np.dtype:
    try:
        import ml_dtypes
    except ImportError:
        raise Unsupported(f"{what} is {kiln_name}, which numpy has no type for: install ml_dtypes "
                          f"(pip install ml_dtypes) to exchange it") from None
    return np.dtype(getattr(ml_dtypes, _ML_DTYPES[kiln_name]))


def _numpy_dtype(kiln_name: Optional[str]) -> Optional[np.dtype]:
    if kiln_name is None:
        return None
    if kiln_name in _ML_DTYPES:
        try:
            return _ml_dtype(kiln_name, "")
        except Unsupported:
            return None
    try:
        return np.dtype(kiln_name)
    except TypeError:
        return None


def host_input(name: str, x: Any, declared: Optional[str]) -> Tuple[np.ndarray, str]:
    """The array kiln reads for input `name` (C-contiguous, aligned, native
    byte order: used in place when `x` already is, else copied once) and its
    kiln dtype name. Objects with no dtype of their own (lists, Python
    scalars) take the declared dtype; arrays keep theirs (a mismatch is the
    C++ session's kiln.InvalidInput naming the input)."""
    if isinstance(x, np.ndarray):
        a = x
    elif hasattr(x, "__dlpack__") and hasattr(x, "__dlpack_device__"):
        try:
            a = np.from_dlpack(x)  # e.g. a torch CPU tensor, without a copy
        except Exception:
            a = np.asarray(x)
    else:
        try:
            has_own = hasattr(x, "dtype") or hasattr(x, "__array__") or hasattr(x, "__array_interface__")
            want = None if has_own else _numpy_dtype(declared)
            a = np.asarray(x) if want is None else np.asarray(x, dtype=want)
        except (TypeError, ValueError, OverflowError) as e:
            raise InvalidInput(f"input '{name}' ({type(x).__name__}) cannot be made an array"
                               f"{f' of {declared}' if declared else ''}: {e}") from None
    if not a.dtype.isnative:
        a = a.astype(a.dtype.newbyteorder("="))
    kiln_name = _KILN_NAME.get(a.dtype.name) if a.dtype.fields is None else None
    if kiln_name is None:
        raise InvalidInput(f"input '{name}' has dtype {a.dtype}, which kiln does not take"
                           f"{f' (the model expects {declared})' if declared else ''}")
    if not a.flags.aligned:
        a = np.array(a, order="C", copy=True)
    elif not a.flags.c_contiguous:
        a = np.ascontiguousarray(a)
    return a, kiln_name


def to_numpy(name: str, t: Any) -> np.ndarray:
    """A numpy array viewing run output `t` (an _kiln.HostTensor) without a copy."""
    if t.nbytes == 0:
        a = np.empty(t.shape, dtype=np.dtype(t.__array_interface__["typestr"]))
    else:
        a = np.asarray(t)
    if t.dtype in _ML_DTYPES:
        a = a.view(_ml_dtype(t.dtype, f"output '{name}'"))
    return a


# torch's C-level DLPack exporter and current-stream query, found once torch is
# imported (kiln never imports torch itself): (torch.Tensor, to_dlpack,
# current raw stream of a device), False when this torch lacks either.
_torch_fast: Any = None


def _torch_api() -> Any:
    global _torch_fast
    if _torch_fast is None:
        torch = sys.modules.get("torch")
        if torch is None:
            return None  # not cached: torch may be imported later
        c = getattr(torch, "_C", None)
        to = getattr(c, "_to_dlpack", None)
        raw = getattr(c, "_cuda_getCurrentRawStream", None)
        _torch_fast = (torch.Tensor, to, raw) if to is not None and raw is not None else False
    return _torch_fast or None


def torch_capsule(x: Any, stream: int) -> Any:
    """A DLPack capsule of torch CUDA tensor `x` from torch's C exporter, or
    None where the general ``x.__dlpack__(stream=stream)`` exchange is needed.

    Why: torch's ``Tensor.__dlpack__(stream=...)`` is Python code that looks
    up the default and current streams to decide whether to make `stream`
    wait for an event; it costs ~25 us per tensor (H200 machine, torch 2.11),
    more than kiln's whole per-run overhead budget at batch 1. When torch's
    current stream on the tensor's device already *is* `stream` (the usual
    case: both the legacy default stream, or ``s.run(..., stream=st)`` inside
    ``with torch.cuda.stream(st)``), that exchange does nothing, and the C
    exporter (~1 us) gives the same capsule. Tensors __dlpack__ would refuse
    (requires_grad, conjugate or negative bit) take the general path, which
    raises its error."""
    api = _torch_api()
    if api is None or type(x) is not api[0] or not x.is_cuda:
        return None
    if x.requires_grad or x.is_conj() or x.is_neg():
        return None
    current = api[2](x.get_device())
    if (current or 1) != stream:  # raw handle 0 is the legacy default stream, DLPack's 1
        return None
    return api[1](x)


def is_device_tensor(x: Any) -> bool:
    """True for a DLPack producer whose memory is on a CUDA device."""
    if isinstance(x, np.ndarray):
        return False
    if isinstance(x, DeviceArray):
        return True
    api = _torch_api()
    if api is not None and type(x) is api[0]:
        return bool(x.is_cuda)
    f = getattr(x, "__dlpack_device__", None)
    if f is None:
        return False
    try:
        kind, _ = f()
    except Exception:
        return False
    return int(kind) in (_DL_CUDA, _DL_CUDA_MANAGED)


def stream_handle(stream: Any) -> int:
    """The CUDA stream handle for `stream`: an int, a torch.cuda.Stream
    (.cuda_stream) or a CuPy stream (.ptr). None and 0 (the null stream) are 1,
    DLPack's name for the legacy default stream."""
    if stream is None:
        return 1
    if isinstance(stream, bool):
        raise InvalidOption(f"stream must be a CUDA stream, not {stream!r}")
    if isinstance(stream, int):
        h = stream
    elif hasattr(stream, "cuda_stream"):
        h = int(stream.cuda_stream)
    elif hasattr(stream, "ptr"):
        h = int(stream.ptr)
    else:
        raise InvalidOption(f"stream must be a CUDA stream handle (int), a torch.cuda.Stream or a CuPy stream, "
                            f"not {type(stream).__name__}")
    if h < 0:
        raise InvalidOption(f"stream must be a stream handle >= 0, not {h}")
    return 1 if h == 0 else h


def export_capsule(x: Any, stream: int, what: str) -> Any:
    """x.__dlpack__(stream=stream): a DLPack capsule whose producer ordered its
    pending writes on `stream`."""
    if isinstance(x, DeviceArray):
        return x._a.capsule(False)
    cap = torch_capsule(x, stream)
    if cap is not None:
        return cap
    f = getattr(x, "__dlpack__", None)
    if f is None:
        raise InvalidInput(f"{what} ({type(x).__name__}) does not implement __dlpack__")
    try:
        return f(stream=stream)
    except TypeError:
        try:
            return f()  # a producer that predates DLPack's stream argument
        except Exception as e:
            raise InvalidInput(f"{what}: its __dlpack__() failed: {e}") from e
    except Exception as e:
        raise InvalidInput(f"{what}: its __dlpack__(stream={stream}) failed: {e}") from e


class DeviceArray:
    """A run output in GPU memory that kiln allocated (dense, row-major).

    It implements the DLPack protocol (``torch.from_dlpack(a)``,
    ``cupy.from_dlpack(a)`` take it without a copy; the memory is freed when
    the last of them lets go) and ``__cuda_array_interface__``. The data is
    complete when Session.run returns, so any stream may read it at once.

    Attributes:
        shape: tuple of ints.
        dtype: kiln's dtype name ("float32", ...).
        device: the CUDA device index.
        nbytes: size in bytes.
        data_ptr: the device address (int).
    """

    __slots__ = ("_a",)

    def __init__(self, a: Any) -> None:
        self._a = a

    @property
    def shape(self) -> Tuple[int, ...]:
        return tuple(self._a.shape)

    @property
    def dtype(self) -> str:
        return self._a.dtype

    @property
    def device(self) -> int:
        return self._a.device

    @property
    def nbytes(self) -> int:
        return self._a.nbytes

    @property
    def data_ptr(self) -> int:
        return self._a.data_ptr

    def __dlpack_device__(self) -> Tuple[int, int]:
        """(2, device): DLPack's kDLCUDA and the device index."""
        return (_DL_CUDA, self._a.device)

    def __dlpack__(self, *, stream: Any = None, max_version: Optional[Tuple[int, int]] = None,
                   dl_device: Optional[Tuple[int, int]] = None, copy: Optional[bool] = None) -> Any:
        """A DLPack capsule viewing this array ("dltensor_versioned" when the
        consumer asks for max_version >= (1, 0), else "dltensor").

        `stream` is accepted and needs no action: the data is already complete.
        copy=True exports a copy in new device memory; another `dl_device` than
        this one is refused (BufferError: use .numpy() for a host copy)."""
        if dl_device is not None and tuple(int(v) for v in dl_device) != self.__dlpack_device__():
            raise BufferError(f"kiln.DeviceArray lives on cuda:{self.device} and cannot be exported to DLPack device "
                              f"{tuple(dl_device)}; use .numpy() for a host copy")
        a = self._a.copy() if copy else self._a
        versioned = max_version is not None and int(max_version[0]) >= 1
        return a.capsule(versioned)

    @property
    def __cuda_array_interface__(self) -> dict:
        if self.dtype in _ML_DTYPES:
            raise AttributeError(f"__cuda_array_interface__ has no type string for {self.dtype}; use DLPack")
        return {"shape": self.shape, "typestr": np.dtype(self.dtype).str, "data": (self.data_ptr, False),
                "version": 3, "strides": None, "stream": None}

    def numpy(self) -> np.ndarray:
        """A copy in host memory (numpy array of the same dtype and shape)."""
        return to_numpy("DeviceArray", self._a.to_host())

    def __repr__(self) -> str:
        return f"kiln.DeviceArray(shape={self.shape}, dtype={self.dtype}, device=cuda:{self.device})"
