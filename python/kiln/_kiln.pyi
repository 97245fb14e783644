"""Type stubs of kiln._kiln, the C++ bindings (python/src/module.cpp).

Private: use the kiln package (kiln/__init__.py), which validates arguments
and converts results. Errors are raised as kiln._errors classes.
"""

from typing import Any, Dict, List, Optional, Sequence, Tuple

# (name, dtype name, dims with -1 for symbolic dims, symbol names ("" for static dims))
_Info = Tuple[str, str, List[int], List[str]]

class HostTensor:
    """A run output in host memory; numpy views it through __array_interface__."""

    @property
    def dtype(self) -> str: ...
    @property
    def shape(self) -> Tuple[int, ...]: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def __array_interface__(self) -> Dict[str, Any]: ...

class DeviceArray:
    """A run output in GPU memory that kiln allocated (freed with its last reference)."""

    @property
    def dtype(self) -> str: ...
    @property
    def shape(self) -> Tuple[int, ...]: ...
    @property
    def device(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def data_ptr(self) -> int: ...
    def capsule(self, versioned: bool) -> Any:
        """A DLPack capsule ("dltensor_versioned" or "dltensor") sharing the memory."""
    def copy(self) -> "DeviceArray":
        """A copy in new device memory."""
    def to_host(self) -> HostTensor:
        """A copy in host memory."""

class Binding:
    """A device request imported once (Session.bind); run() waits for its stream, then runs."""

    def run(self) -> None: ...
    def outputs(self) -> Dict[str, Optional[DeviceArray]]:
        """Every output by name: the DeviceArray kiln allocated, or None where given."""

class Session:
    @staticmethod
    def create(model: str, options: Dict[str, Any]) -> "Session":
        """kiln::Session(model, options): compile, or load from the cache. GIL released."""
    @staticmethod
    def load(path: str, options: Dict[str, Any]) -> "Session":
        """kiln::Session::load(path, options): an explicit artifact. GIL released."""
    def run_host(self, inputs: Sequence[Tuple[str, str, Sequence[int], int]]) -> Dict[str, HostTensor]:
        """inputs: (name, kiln dtype name, shape, address of C-contiguous data alive
        for the call). Returns every output in model order. GIL released while running."""
    def run_device(self, inputs: Sequence[Tuple[str, Any]], outputs: Sequence[Tuple[str, Any]],
                   stream: int) -> Dict[str, Optional[DeviceArray]]:
        """inputs/outputs: (name, DLPack capsule). Outputs not given are allocated
        (returned); given ones map to None. Waits for `stream`, then runs."""
    def bind(self, inputs: Sequence[Tuple[str, Any]], outputs: Sequence[Tuple[str, Any]], stream: int) -> Binding:
        """run_device's import and checks once; Binding.run() runs it."""
    def inputs(self) -> List[_Info]: ...
    def outputs(self) -> List[_Info]: ...
    def stats(self) -> Dict[str, Any]: ...
    def buckets(self) -> Dict[str, Any]: ...
    @property
    def target(self) -> str: ...
    @property
    def device(self) -> int: ...

def compile(model: str, out: str, options: Dict[str, Any]) -> Dict[str, Any]: ...
def inspect(path: str) -> str:
    """JSON text, as `kiln inspect --json`."""
def check(path: str, target: str) -> str:
    """JSON text, as `kiln check --json` (plus "reason")."""
def version() -> str: ...
def has_cuda() -> bool: ...
def default_cache_dir() -> str: ...
def dtype_size(name: str) -> int: ...
def _raise(code: int, message: str) -> None:
    """Raises the class of error category `code` with `message` (tests)."""
