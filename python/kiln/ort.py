"""kiln inside ONNX Runtime: the plugin execution provider (``libkiln_ort_ep.so``).

The plugin (ort_ep/ in the repository) ships in this distribution, in
``kiln/lib/``. These are the plugin convention's helpers; kiln does not depend
on onnxruntime (any onnxruntime >= 1.24 loads the library)::

    import onnxruntime as ort
    import kiln.ort

    ort.register_execution_provider_library("kiln", kiln.ort.get_library_path())
    devices = [d for d in ort.get_ep_devices() if d.ep_name in kiln.ort.get_ep_names()]
    so = ort.SessionOptions()
    so.add_provider_for_devices(devices, {"cache_dir": "/var/cache/app/kiln"})
    session = ort.InferenceSession("model.onnx", so)

The EP options (``precision``, ``cache_dir``, ``tuning``, ``device_id``,
``fallback``, ``shapes``, ``dims``, ``load_model_path``, ``save_model_path``,
``reference_nodes``, ``use_cache``) are described in docs/ort_ep.md.
"""

from __future__ import annotations

from pathlib import Path

from ._errors import Unsupported

_LIB = Path(__file__).resolve().parent / "lib" / "libkiln_ort_ep.so"

#: The execution provider names the plugin registers (one factory: the CPU device).
EP_NAMES = ("KilnExecutionProvider",)


def get_library_path() -> str:
    """Path of the ONNX Runtime plugin library shipped with this kiln, for
    ``onnxruntime.register_execution_provider_library(name, path)``.

    Raises:
        kiln.Unsupported: this distribution was built without the plugin.
    """
    if _LIB.is_file():
        return str(_LIB)
    raise Unsupported(f"this kiln distribution has no ONNX Runtime plugin ({_LIB} does not exist)")


def get_ep_names() -> list[str]:
    """Names of the execution providers the plugin offers (``OrtEpDevice.ep_name``)."""
    return list(EP_NAMES)
