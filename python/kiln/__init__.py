"""kiln: an ahead-of-time compiler and runtime for ONNX models.

kiln compiles a model once for a target, saves the compiled program as a
``.kiln`` artifact (in a cache, or a file you name), and loads it in
milliseconds on every later start. It never runs an artifact that no longer
matches the model, the options, the machine or the kiln version.

Quick start::

    import numpy as np, kiln
    s = kiln.Session("model.onnx", shapes={"images": [1, 3, 320, 320]})
    out = s.run({"images": np.zeros((1, 3, 320, 320), np.float32)})
    print(s.stats.cache, s.stats.compile_ms, {k: v.shape for k, v in out.items()})

This package is a thin layer over kiln's C++ API (include/kiln/): the same
options, the same errors (one exception class per category, kiln's message),
the GIL released while compiling and running. docs/python.md documents it.
"""

from __future__ import annotations

import json as _json
import operator as _operator
import os as _os
from dataclasses import dataclass as _dataclass
from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as _np

from ._errors import (
    CorruptArtifact,
    Error,
    IncompatibleArtifact,
    InternalError,
    InvalidInput,
    InvalidModel,
    InvalidOption,
    IOError,
    Unsupported,
)
from . import _kiln
from ._tensors import DeviceArray, host_input, is_device_tensor, stream_handle, to_numpy, export_capsule

# kiln's whole version, "<release>+<build id>" (e.g. "0.1.0+3f9a2c1d0b4e"): the
# build id is a hash of the sources the extension was built from, the value
# artifacts record as kiln_version. A valid PEP 440 version (a local label);
# the distribution's own version (importlib.metadata.version("kiln-onnx")) is
# the release part alone, read from CMakeLists.txt before anything is built.
__version__: str = _kiln.version()

__all__ = [
    "Session", "Binding", "TensorInfo", "SessionStats", "CompileResult", "DeviceArray",
    "compile", "check", "inspect", "has_cuda", "default_cache_dir", "__version__",
    "Error", "InternalError", "InvalidOption", "IncompatibleArtifact", "InvalidModel", "Unsupported",
    "InvalidInput", "CorruptArtifact", "IOError",
]

PathLike = Union[str, "_os.PathLike[str]"]


class TensorInfo(NamedTuple):
    """Declared type of a model input or output.

    Attributes:
        name: the ONNX name.
        dtype: element type as kiln names it: "float32", "float16", "bfloat16",
            "int64", "int32", "uint8", "bool", ... (numpy's names where numpy has the type).
        shape: one entry per axis: an int for a static size, the symbol's name
            (str, e.g. "batch") for a symbolic dim, None for an unnamed dynamic dim.
    """

    name: str
    dtype: str
    shape: Tuple[Union[int, str, None], ...]


@_dataclass(frozen=True)
class SessionStats:
    """How a Session's program was obtained, and what it cost.

    Attributes:
        cache: "hit" (loaded from the cache), "miss" (compiled, then saved in
            the cache) or "none" (explicit artifact, use_cache=False, or the
            cache directory was unusable: see notes).
        compile_ms: wall-clock milliseconds spent compiling (0.0 on a hit).
        load_ms: milliseconds reading and validating the artifact and making it ready.
        artifact_path: the cache entry or explicit artifact; None when compiled in memory.
        notes: what a user should know, e.g. why the cache was not written or
            why an entry was rebuilt.
    """

    cache: str
    compile_ms: float
    load_ms: float
    artifact_path: Optional[str]
    notes: Tuple[str, ...]


@_dataclass(frozen=True)
class CompileResult:
    """What kiln.compile did. Times in milliseconds, sizes in bytes.

    Attributes:
        compile_ms: import + passes + lowering (without writing).
        write_ms: serialising and writing the artifact.
        nodes_imported / nodes_compiled / nodes_folded: ONNX nodes in the main
            graph; left after constant folding and dead-code elimination; folded.
        arena_bytes: intermediate memory one run needs (static plan).
        naive_bytes: what the same intermediates would take without reuse.
        artifact_bytes: size of the written file.
        programs: programs in the artifact (one per shape bucket with dims).
        model_digest: XXH3-128 hex of the graph and weights.
        cache_key: the key this program has in a cache.
    """

    compile_ms: float
    write_ms: float
    nodes_imported: int
    nodes_compiled: int
    nodes_folded: int
    arena_bytes: int
    naive_bytes: int
    artifact_bytes: int
    programs: int
    model_digest: str
    cache_key: str


# ---------------------------------------------------------------- option checks


def _path(value: Any, what: str) -> str:
    if isinstance(value, (str, _os.PathLike)):
        p = _os.fspath(value)
        if isinstance(p, bytes):
            p = _os.fsdecode(p)
        return p
    raise InvalidOption(f"{what} must be a path (str or os.PathLike), not {type(value).__name__}")


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool):
        raise InvalidOption(f"{what} must be an integer, not bool")
    try:
        return _operator.index(value)
    except TypeError:
        raise InvalidOption(f"{what} must be an integer, not {type(value).__name__} ({value!r})") from None


def _shapes(shapes: Optional[Mapping[str, Sequence[int]]]) -> Optional[Dict[str, List[int]]]:
    if shapes is None:
        return None
    if not isinstance(shapes, Mapping):
        raise InvalidOption(f"shapes must be a dict of input name -> sequence of ints, not {type(shapes).__name__}")
    out = {}
    for name, dims in shapes.items():
        if not isinstance(name, str):
            raise InvalidOption(f"shapes: the key {name!r} is not an input name (str)")
        if isinstance(dims, (str, bytes)) or not isinstance(dims, (Sequence, _np.ndarray)):
            raise InvalidOption(f"shapes[{name!r}] must be a sequence of ints, not {dims!r}")
        out[name] = [_int(d, f"shapes[{name!r}] entry") for d in dims]
    return out


def _dims(dims: Optional[Mapping[str, Union[str, Sequence[int]]]]) -> Optional[Dict[str, str]]:
    if dims is None:
        return None
    if not isinstance(dims, Mapping):
        raise InvalidOption(f"dims must be a dict of dim name -> bucket spec, not {type(dims).__name__}")
    out = {}
    for name, spec in dims.items():
        if not isinstance(name, str):
            raise InvalidOption(f"dims: the key {name!r} is not a dim name (str)")
        if isinstance(spec, str):
            out[name] = spec
        elif isinstance(spec, (Sequence, _np.ndarray)):
            out[name] = ",".join(str(_int(v, f"dims[{name!r}] entry")) for v in spec)
        else:
            raise InvalidOption(f"dims[{name!r}] must be a spec string ('1..64', '1,2,4,8') or a list of sizes, "
                                f"not {spec!r}")
    return out


def _str(value: Any, what: str) -> Optional[str]:
    if value is None or isinstance(value, str):
        return value
    raise InvalidOption(f"{what} must be a str, not {type(value).__name__} ({value!r})")


def _bool(value: Any, what: str) -> bool:
    if isinstance(value, (bool, _np.bool_)):
        return bool(value)
    raise InvalidOption(f"{what} must be True or False, not {value!r}")


def _options(**kw: Any) -> Dict[str, Any]:
    """The option dict the C++ module reads (None: the C++ default)."""
    o: Dict[str, Any] = {}
    for key in ("target", "precision", "precision_check", "tuning", "arch", "fallback", "out_of_bucket",
                "cache_mismatch"):
        if key in kw:
            o[key] = _str(kw[key], key)
    if kw.get("cache_dir") is not None:
        o["cache_dir"] = _path(kw["cache_dir"], "cache_dir")
    if "shapes" in kw:
        o["shapes"] = _shapes(kw["shapes"])
    if "dims" in kw:
        o["dims"] = _dims(kw["dims"])
    for key in ("use_cache", "allow_tf32", "trust_cache_dir"):
        if key in kw:
            o[key] = _bool(kw[key], key)
    if kw.get("threads") is not None:
        o["threads"] = _int(kw["threads"], "threads")
        if o["threads"] < 0:
            raise InvalidOption(f"threads must be >= 0 (0: all cores), not {o['threads']}")
    if kw.get("cache_max_bytes") is not None:
        o["cache_max_bytes"] = _int(kw["cache_max_bytes"], "cache_max_bytes")
        if o["cache_max_bytes"] < 0:
            raise InvalidOption(f"cache_max_bytes must be >= 0 (0: no cap), not {o['cache_max_bytes']}")
    if kw.get("cache_lock_timeout_s") is not None:
        try:
            o["cache_lock_timeout_s"] = float(kw["cache_lock_timeout_s"])
        except (TypeError, ValueError):
            raise InvalidOption(f"cache_lock_timeout_s must be a number of seconds, "
                                f"not {kw['cache_lock_timeout_s']!r}") from None
    if kw.get("on_note") is not None:
        if not callable(kw["on_note"]):
            raise InvalidOption(f"on_note must be callable (str) -> None, not {kw['on_note']!r}")
        o["on_note"] = kw["on_note"]
    return o


def _is_artifact(path: str) -> bool:
    if path.endswith(".kiln"):
        return True
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"KILN"
    except OSError:
        return False


def _info(t: Tuple[str, str, List[int], List[str]]) -> TensorInfo:
    name, dtype, dims, symbols = t
    shape = tuple(d if d >= 0 else (symbols[i] or None) for i, d in enumerate(dims))
    return TensorInfo(name, dtype, shape)


# ---------------------------------------------------------------- Session


class Session:
    """A compiled model ready to run (kiln::Session).

    ``Session(model.onnx, ...)`` compiles the model for `target`, or loads the
    matching program from the cache when one exists (a second process, or a
    second Session, with the same model, options and machine is a cache hit).
    ``Session.load(path.kiln)`` loads an explicit artifact and never compiles.

    Args:
        model: path of the ONNX model (.onnx).
        target: "cpu" (default; x86-64 with oneDNN), "ref" (reference kernels)
            or "cuda" / "cuda:N" (NVIDIA GPU N; needs static shapes).
        precision: "fp32" (default), or on cuda "fp16" / "bf16" (16-bit inside
            the program; inputs and outputs keep their dtypes).
        cache_dir: cache directory; None: $XDG_CACHE_HOME/kiln, else ~/.cache/kiln.
        shapes: fixed input shapes, e.g. {"images": [1, 3, 320, 320]}; inputs
            not named keep the model's dims (symbolic dims stay symbolic).
        dims: shape buckets per symbolic dim, e.g. {"batch": "1..64"},
            {"seq": "1..512:16,64,128,512/pad=sequence"} or {"batch": [1, 2, 4, 8]}
            (text forms of ``kiln --dim``, docs/cli.md).
        tuning: cuda only: "heuristic", "fast" (the default there) or "exhaustive".
        threads: threads one run uses (0: all cores).
        use_cache: False compiles in memory and never reads or writes the cache.
        allow_tf32: cuda fp32 only: TF32 tensor cores for matmuls and convolutions.
        precision_check: fp16 / bf16 on cuda: "on" (default) checks the 16-bit
            program against fp32 on random sample inputs at compile time and
            keeps in fp32 the nodes whose error grows (the notes name them);
            "off" skips it (docs/cuda.md, "Precision check").
        arch: cuda only: GPU architecture to compile for ("sm_90"); needs
            tuning="heuristic" when it is not the device's.
        fallback: cuda only: "host" (default) runs the nodes the cuda target
            cannot lower in host segments of the same program (a note names
            them); "error" refuses the compile naming each such node
            (docs/cuda.md, "Host fallback").
        out_of_bucket: "compile" (default) or "error" for requests outside every bucket.
        cache_mismatch: "recompile" (default) or "error" when the cache entry is damaged or stale.
        trust_cache_dir: use a cache directory writable by others (off: kiln
            compiles in memory and a note says why).
        cache_max_bytes: cache size cap in bytes (LRU eviction; 0: no cap; default 2 GiB).
        cache_lock_timeout_s: longest wait, in seconds, for another process compiling the same model.
        on_note: called with each note (str) as it is made, e.g. "waiting for
            another process compiling this model".

    Raises:
        kiln.InvalidOption (the message names the option), kiln.InvalidModel,
        kiln.Unsupported (names the node and operator), kiln.IOError.

    Thread safety: ``run`` may be called from several threads at once on one
    Session (each run has its own scratch memory); the GIL is released while
    it runs.
    """

    __slots__ = ("_s", "_inputs", "_outputs", "__weakref__")

    def __init__(self, model: PathLike, target: str = "cpu", precision: str = "fp32",
                 cache_dir: Optional[PathLike] = None, shapes: Optional[Mapping[str, Sequence[int]]] = None,
                 dims: Optional[Mapping[str, Union[str, Sequence[int]]]] = None, tuning: Optional[str] = None,
                 threads: int = 0, *, use_cache: bool = True, allow_tf32: bool = False, arch: Optional[str] = None,
                 precision_check: str = "on", fallback: str = "host", out_of_bucket: str = "compile",
                 cache_mismatch: str = "recompile",
                 trust_cache_dir: bool = False, cache_max_bytes: Optional[int] = None,
                 cache_lock_timeout_s: Optional[float] = None,
                 on_note: Optional[Callable[[str], None]] = None) -> None:
        path = _path(model, "model")
        if _is_artifact(path):
            raise InvalidOption(f"model '{path}' is a compiled .kiln artifact: load it with kiln.Session.load(path) "
                                f"(an explicit artifact is never recompiled)")
        opts = _options(target=target, precision=precision, cache_dir=cache_dir, shapes=shapes, dims=dims,
                        tuning=tuning, threads=threads, use_cache=use_cache, allow_tf32=allow_tf32, arch=arch,
                        precision_check=precision_check, fallback=fallback, out_of_bucket=out_of_bucket,
                        cache_mismatch=cache_mismatch,
                        trust_cache_dir=trust_cache_dir, cache_max_bytes=cache_max_bytes,
                        cache_lock_timeout_s=cache_lock_timeout_s, on_note=on_note)
        self._attach(_kiln.Session.create(path, opts))

    @classmethod
    def load(cls, path: PathLike, target: Optional[str] = None, threads: int = 0) -> "Session":
        """Loads an explicit artifact (.kiln); never compiles.

        Args:
            path: the artifact.
            target: the target it must run on; None: the artifact's own
                ("cuda" artifacts run on GPU 0; pass "cuda:N" for another).
            threads: threads one run uses (0: all cores).

        A loaded artifact never compiles: a request outside its shape buckets
        is kiln.InvalidInput naming the dim.

        Raises:
            kiln.CorruptArtifact (damaged file), kiln.IncompatibleArtifact
            (built for another target, machine, library or kiln version; the
            message names every field that differs), kiln.IOError.
        """
        p = _path(path, "path")
        if target is None:
            target = _json.loads(_kiln.check(p, ""))["target"]
        opts = _options(target=target, threads=threads)
        self = cls.__new__(cls)
        self._attach(_kiln.Session.load(p, opts))
        return self

    def _attach(self, s: Any) -> None:
        self._s = s
        self._inputs = [_info(t) for t in s.inputs()]
        self._outputs = [_info(t) for t in s.outputs()]

    @property
    def inputs(self) -> List[TensorInfo]:
        """The model's inputs in order (name, dtype, shape: ints, or symbol names for symbolic dims)."""
        return list(self._inputs)

    @property
    def outputs(self) -> List[TensorInfo]:
        """The model's outputs in order (as ``inputs``)."""
        return list(self._outputs)

    @property
    def stats(self) -> SessionStats:
        """How the program was obtained: cache "hit"/"miss"/"none", compile_ms, load_ms, notes."""
        d = self._s.stats()
        return SessionStats(cache=d["cache"], compile_ms=float(d["compile_ms"]), load_ms=float(d["load_ms"]),
                            artifact_path=d["artifact_path"] or None, notes=tuple(d["notes"]))

    @property
    def buckets(self) -> Dict[str, Any]:
        """Shape buckets: {"dims": [names], "programs": [[size per dim], ...] (held now),
        "compiled_by_run": count, "compile_ms": ms spent compiling buckets in run()}."""
        return dict(self._s.buckets())

    @property
    def target(self) -> str:
        """"cpu", "ref" or "cuda"."""
        return self._s.target

    def run(self, inputs: Mapping[str, Any], *, outputs: Optional[Mapping[str, Any]] = None,
            stream: Any = None) -> Dict[str, Any]:
        """Runs the model on one request; returns every output by name, in model order.

        Host inputs (numpy arrays, or anything numpy takes: lists, CPU tensors
        through DLPack) give numpy outputs. Each array must have the declared
        dtype exactly (no casting) and a shape matching the static dims;
        C-contiguous arrays are used in place, others are copied once.

        Device inputs (cuda sessions): objects implementing ``__dlpack__`` /
        ``__dlpack_device__`` on the session's GPU (a torch or CuPy tensor)
        go in without a host copy: dense row-major, the declared dtype and the
        compiled (static) shape. Outputs are then kiln.DeviceArray objects
        (DLPack producers: ``torch.from_dlpack(out)`` takes them without a
        copy), or written into `outputs` when given (name -> device tensor).

        Args:
            inputs: every graph input by name.
            outputs: device runs only: preallocated output tensors by name
                (those not named are allocated); they are returned as given.
            stream: device runs only: the caller's CUDA stream (an int handle,
                a torch.cuda.Stream or a cupy Stream). Each producer is asked
                (DLPack's ``stream`` argument) to order its pending writes on it,
                and kiln waits for it before running; None: the legacy default
                stream. The run is synchronous: the outputs are complete when it
                returns, on every stream.

        Raises:
            kiln.InvalidInput: a missing or unknown input, or a wrong dtype,
                shape or device; the message names the input.
        """
        if not isinstance(inputs, Mapping):
            raise InvalidInput(f"inputs must be a dict of input name -> array, not {type(inputs).__name__}")
        host, device = [], []
        for name, x in inputs.items():
            if not isinstance(name, str):
                raise InvalidInput(f"input names must be str, not {name!r}")
            (device if is_device_tensor(x) else host).append((name, x))
        if device:
            if host:
                raise InvalidInput(f"input '{host[0][0]}' is a host array but input '{device[0][0]}' is a device "
                                   f"tensor: pass every input on the session's device")
            return self._run_device(device, outputs, stream)
        if outputs is not None:
            raise InvalidOption("outputs= takes device tensors; it is for cuda sessions run on device inputs")
        declared = {i.name: i.dtype for i in self._inputs}
        arrays = [(name, host_input(name, x, declared.get(name))) for name, x in host]
        res = self._s.run_host([(name, dt, a.shape, a.__array_interface__["data"][0]) for name, (a, dt) in arrays])
        del arrays  # the inputs had to live until here
        return {name: to_numpy(name, t) for name, t in res.items()}

    def _device_capsules(self, items: List[Tuple[str, Any]], outputs: Optional[Mapping[str, Any]],
                         stream: Any) -> Tuple[int, List[Tuple[str, Any]], List[Tuple[str, Any]]]:
        """(stream handle, input capsules, output capsules): each producer asked (DLPack's
        `stream` argument) to order its pending writes on the caller's stream."""
        s = stream_handle(stream)
        caps = [(name, export_capsule(x, s, f"input '{name}'")) for name, x in items]
        outs = []
        if outputs is not None:
            if not isinstance(outputs, Mapping):
                raise InvalidOption(f"outputs must be a dict of output name -> device tensor, "
                                    f"not {type(outputs).__name__}")
            outs = [(name, export_capsule(x, s, f"output '{name}'")) for name, x in outputs.items()]
        return s, caps, outs

    def _run_device(self, items: List[Tuple[str, Any]], outputs: Optional[Mapping[str, Any]],
                    stream: Any) -> Dict[str, Any]:
        s, caps, outs = self._device_capsules(items, outputs, stream)
        res = self._s.run_device(caps, outs, s)
        return {name: (DeviceArray(v) if v is not None else outputs[name]) for name, v in res.items()}

    def bind(self, inputs: Mapping[str, Any], *, outputs: Optional[Mapping[str, Any]] = None,
             stream: Any = None) -> "Binding":
        """Binds device tensors to this (cuda) Session once, for many runs:
        ``b = s.bind({"x": x}, outputs={"y": y}, stream=st)``, then ``b.run()``
        runs on whatever `x` holds then and writes `y`, with none of run()'s
        per-call DLPack exchange and checks (ONNX Runtime's IOBinding, in short).

        Args and errors as run() on device tensors; the outputs not given are
        allocated once (kiln.DeviceArray, in ``b.outputs``). The tensors are
        held (kept alive) by the binding. `stream`: each b.run() first waits for
        the work queued on it so far, so write new inputs on that stream (or
        order them before it); the run is synchronous, as run() is.
        """
        if not isinstance(inputs, Mapping):
            raise InvalidInput(f"inputs must be a dict of input name -> device tensor, not {type(inputs).__name__}")
        items = list(inputs.items())
        for name, x in items:
            if not isinstance(name, str):
                raise InvalidInput(f"input names must be str, not {name!r}")
            if not is_device_tensor(x):
                raise InvalidInput(f"input '{name}' is not a device tensor ({type(x).__name__}): Session.bind takes "
                                   f"CUDA tensors (DLPack); use run() for host arrays")
        s, caps, outs = self._device_capsules(items, outputs, stream)
        return Binding(self._s.bind(caps, outs, s), outputs)

    def __repr__(self) -> str:
        st = self._s.stats()
        return (f"<kiln.Session target={self.target} inputs={[i.name for i in self._inputs]} "
                f"outputs={[o.name for o in self._outputs]} cache={st['cache']}>")


class Binding:
    """Device tensors bound to a cuda Session (Session.bind): ``run()`` runs the
    model on what the bound inputs hold now and writes the bound outputs.

    Attributes:
        outputs: every output by name, in model order: the tensors given to
            bind(), or the kiln.DeviceArray it allocated (the same objects
            every run; each run overwrites them).
    """

    __slots__ = ("_b", "outputs")

    def __init__(self, b: Any, given: Optional[Mapping[str, Any]]) -> None:
        self._b = b
        self.outputs: Dict[str, Any] = {name: (DeviceArray(v) if v is not None else given[name])  # type: ignore[index]
                                        for name, v in b.outputs().items()}

    def run(self) -> Dict[str, Any]:
        """Waits for the bound stream, runs (GIL released), returns ``outputs``.
        Safe from several threads (runs of one Session are serialized)."""
        self._b.run()
        return self.outputs

    def __repr__(self) -> str:
        return f"<kiln.Binding outputs={list(self.outputs)}>"


# ---------------------------------------------------------------- functions


def compile(model: PathLike, out: PathLike, target: str = "cpu", precision: str = "fp32",
            shapes: Optional[Mapping[str, Sequence[int]]] = None,
            dims: Optional[Mapping[str, Union[str, Sequence[int]]]] = None, tuning: Optional[str] = None, *,
            allow_tf32: bool = False, arch: Optional[str] = None, precision_check: str = "on",
            fallback: str = "host") -> CompileResult:
    """Compiles an ONNX model to an explicit artifact file (``kiln compile``).

    The file is written atomically (no partial file on any error). Options as
    for Session; with `dims`, every bucket is compiled (one program each, the
    constants stored once). Load it with ``kiln.Session.load(out)``.

    Raises:
        kiln.InvalidOption, kiln.InvalidModel, kiln.Unsupported, kiln.IOError.
    """
    opts = _options(target=target, precision=precision, shapes=shapes, dims=dims, tuning=tuning,
                    allow_tf32=allow_tf32, arch=arch, precision_check=precision_check, fallback=fallback)
    d = _kiln.compile(_path(model, "model"), _path(out, "out"), opts)
    return CompileResult(**d)


def check(path: PathLike, target: Optional[str] = None, *, strict: bool = False) -> Dict[str, Any]:
    """Can this artifact run here? Reads only its header and compatibility block.

    Args:
        path: the .kiln artifact.
        target: the target it must run on; None: the artifact's own.
        strict: raise kiln.IncompatibleArtifact (naming each field) instead of
            returning runnable False.

    Returns:
        {"artifact": path, "runnable": bool, "target": str, "mismatches":
        [{"field", "artifact", "here"}], "notes": [str], "reason": str}, as
        ``kiln check --json`` prints it (plus "reason", the mismatches as one sentence).

    Raises:
        kiln.CorruptArtifact (damaged header or block), kiln.IOError,
        kiln.InvalidOption (an unknown target).
    """
    d = _json.loads(_kiln.check(_path(path, "path"), _str(target, "target") or ""))
    if strict and not d["runnable"]:
        raise IncompatibleArtifact(f"artifact '{d['artifact']}' cannot run here: {d['reason']}")
    return d


def inspect(path: PathLike) -> Dict[str, Any]:
    """What an artifact was built from and for, or what an ONNX model needs.

    For a .kiln file (every checksum validated): "compat" (kiln version,
    target, device, ISA, library versions, precision, digests, input
    signature), "inputs" / "outputs" ([{"name", "dtype", "shape"}], symbolic
    dims by name), "nodes", "operators" ({op: count}), "constants",
    "constant_bytes", "arena_bytes", "buckets", "metadata". For an .onnx file:
    "opset", "inputs", "outputs", "nodes", "operators", "weights",
    "weight_bytes", "symbolic_dims" (fix them with shapes= or dims=). The keys
    are those of ``kiln inspect --json``.

    Raises:
        kiln.IOError, kiln.CorruptArtifact, kiln.InvalidModel, kiln.Unsupported.
    """
    return _json.loads(_kiln.inspect(_path(path, "path")))


def has_cuda() -> bool:
    """True when this kiln was built with the cuda target (a GPU is still needed to run it)."""
    return bool(_kiln.has_cuda())


def default_cache_dir() -> str:
    """The cache directory used when cache_dir is None ($XDG_CACHE_HOME/kiln, else ~/.cache/kiln)."""
    return _kiln.default_cache_dir()
