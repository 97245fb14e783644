"""kiln inside ONNX Runtime: the plugin execution provider (``libkiln_ort_ep.so``).

The plugin (ort_ep/ in the repository, DESIGN.md "Front doors") ships in this
distribution, next to this file in ``kiln/lib/``, once it is built; this
version of kiln does not build it yet. Its API here will be
``get_library_path()`` (for ``onnxruntime.register_execution_provider_library``)
and helpers around it.
"""

from __future__ import annotations

from pathlib import Path

from ._errors import Unsupported

_LIB = Path(__file__).resolve().parent / "lib" / "libkiln_ort_ep.so"


def get_library_path() -> str:
    """Path of the ONNX Runtime plugin library shipped with this kiln.

    Raises:
        kiln.Unsupported: this distribution has no plugin (not built yet).
    """
    if _LIB.is_file():
        return str(_LIB)
    raise Unsupported(f"this kiln distribution has no ONNX Runtime plugin ({_LIB} does not exist): "
                      f"the plugin execution provider is not built yet")
