"""Helpers for the kiln command-line tests: run kiln, check its errors."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "models"))

KILN_TIMEOUT_S = 120


@dataclass
class Result:
    """One finished kiln process."""

    args: list[str]
    rc: int
    stdout: str
    stderr: str

    def describe(self) -> str:
        return (f"command: kiln {' '.join(self.args)}\nexit code: {self.rc}\n"
                f"stderr: {self.stderr.strip()[-2000:]}\nstdout: {self.stdout.strip()[-2000:]}")

    def json(self) -> dict:
        try:
            obj = json.loads(self.stdout)
        except ValueError as e:
            pytest.fail(f"stdout is not one JSON object ({e})\n{self.describe()}")
        assert isinstance(obj, dict), self.describe()
        return obj

    def error_message(self) -> str:
        """The text after 'kiln: error: ' on stderr (the contract's one error line)."""
        lines = [ln for ln in self.stderr.splitlines() if ln.startswith("kiln: error: ")]
        assert len(lines) == 1, f"expected exactly one 'kiln: error: ' line on stderr\n{self.describe()}"
        return lines[0][len("kiln: error: "):]


class Kiln:
    """Runs the kiln binary with a private XDG_CACHE_HOME unless env overrides it."""

    def __init__(self, binary: Path, default_env: dict[str, str]) -> None:
        self.binary = binary
        self.default_env = default_env

    def __call__(self, *args, env: dict[str, str] | None = None) -> Result:
        str_args = [str(a) for a in args]
        full_env = dict(os.environ)
        full_env.update(self.default_env)
        if env:
            full_env.update(env)
        try:
            p = subprocess.run([str(self.binary), *str_args], capture_output=True, text=True,
                               timeout=KILN_TIMEOUT_S, env=full_env, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            pytest.fail(f"kiln {' '.join(str_args)} did not finish within {KILN_TIMEOUT_S} s")
        if p.returncode < 0:
            pytest.fail(f"kiln was killed by signal {-p.returncode} (a crash)\n"
                        f"{Result(str_args, p.returncode, p.stdout, p.stderr).describe()}")
        return Result(str_args, p.returncode, p.stdout, p.stderr)


def assert_error(res: Result, code: int, *needles: str, regexes: tuple[str, ...] = ()) -> str:
    """Asserts exit `code` and that the error line contains every needle
    (case-sensitive) and matches every regex (case-insensitive); returns it."""
    assert res.rc == code, f"expected exit code {code}\n{res.describe()}"
    msg = res.error_message()
    for n in needles:
        assert n in msg, f"error message does not name {n!r}: {msg!r}"
    for rx in regexes:
        assert re.search(rx, msg, re.IGNORECASE), f"error message does not match /{rx}/: {msg!r}"
    return msg


def save_model(model, path) -> None:
    """Saves an onnx.ModelProto built with onnx.helper as IR version 8, checked."""
    import onnx

    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
