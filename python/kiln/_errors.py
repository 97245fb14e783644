"""kiln's exceptions: one class per error category of the C++ API
(include/kiln/errors.h). The message is kiln's own: a complete sentence naming
what is wrong and where (file, node, input, option or artifact field).

Every class derives from :class:`kiln.Error`; some also derive from the
built-in exception a Python caller would expect (``ValueError`` for bad
options and inputs, ``OSError`` for I/O), so ``except ValueError`` works too.
"""

from __future__ import annotations


class Error(Exception):
    """Base class of every kiln error.

    Attributes (class-level):
        code: the category's number, which is also the ``kiln`` command line's
            exit code for it (docs/cli.md).
        category: the category's name as kiln prints it ("invalid_input", ...).
    """

    code: int = 1
    category: str = "internal"


class InternalError(Error):
    """A bug in kiln (category ``internal``, exit code 1)."""

    code = 1
    category = "internal"


class InvalidOption(Error, ValueError):
    """A Session/compile option is invalid: the message names the option (``invalid_option``, 2)."""

    code = 2
    category = "invalid_option"


class IncompatibleArtifact(Error):
    """A valid artifact built for another target, machine, library version or
    model; the message names the field that differs (``incompatible_artifact``, 3)."""

    code = 3
    category = "incompatible_artifact"


class InvalidModel(Error):
    """Not an ONNX model, truncated, or a malformed graph (``invalid_model``, 4)."""

    code = 4
    category = "invalid_model"


class Unsupported(Error):
    """An operator, attribute, dtype or opset kiln does not implement, or a
    feature this build lacks, e.g. CUDA (``unsupported``, 5)."""

    code = 5
    category = "unsupported"


class InvalidInput(Error, ValueError):
    """A missing or unknown input, or one of the wrong dtype, shape or device;
    the message names the input (``invalid_input``, 6)."""

    code = 6
    category = "invalid_input"


class CorruptArtifact(Error):
    """A damaged file: checksum mismatch, truncated, or not a .kiln file (``corrupt_artifact``, 7)."""

    code = 7
    category = "corrupt_artifact"


class IOError(Error, OSError):  # noqa: A001 - kiln.IOError, as the category is named
    """A file could not be read or written (``io``, 8)."""

    code = 8
    category = "io"


#: Class by category number; the C++ module raises through this table.
BY_CODE: dict[int, type[Error]] = {
    cls.code: cls
    for cls in (InternalError, InvalidOption, IncompatibleArtifact, InvalidModel, Unsupported, InvalidInput,
                CorruptArtifact, IOError)
}
