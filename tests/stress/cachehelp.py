"""Helpers for the cache tests: entry layout, concurrent launches."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import time
from pathlib import Path

SECTIONS = ["program", "memory_plan", "kernels", "tuning", "constants", "metadata"]


def regions(data: bytes) -> dict[str, tuple[int, int]]:
    """(offset, size) of every region of a .kiln file, from its header and
    section table (docs/file-format.md, "Fixed header", "Section table")."""
    compat_off, compat_size = struct.unpack_from("<QQ", data, 24)
    table_off, = struct.unpack_from("<Q", data, 48)
    count, = struct.unpack_from("<I", data, 56)
    out = {"header": (0, 80), "compatibility block": (compat_off, compat_size),
           "section table": (table_off, 32 * count)}
    for i in range(count):
        kind, _flags, off, size = struct.unpack_from("<IIQQ", data, table_off + 32 * i)
        out[SECTIONS[kind - 1] if 1 <= kind <= len(SECTIONS) else f"section {kind}"] = (off, size)
    return out


def entries(cache_dir: Path) -> list[Path]:
    return sorted(p for p in cache_dir.glob("*.kiln") if not p.name.startswith("."))


def leftovers(cache_dir: Path) -> list[Path]:
    """Temporary and lock files (a finished, unkilled process leaves none)."""
    return sorted(p for p in cache_dir.iterdir() if ".tmp-" in p.name or p.name.endswith(".lock"))


def launch_together(binary: Path, arg_lists: list[list[str]], env: dict[str, str], gate_dir: Path) -> list[dict]:
    """Starts one kiln per argument list, all released at the same instant
    by a gate file, and returns {rc, stdout, stderr, json} for each."""
    gate = gate_dir / "go"
    procs = []
    for args in arg_lists:
        script = 'while [ ! -e "$0" ]; do sleep 0.001; done; exec "$@"'
        procs.append(subprocess.Popen(["sh", "-c", script, str(gate), str(binary), *args], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    time.sleep(0.3)  # every shell is polling the gate
    gate.touch()
    results = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        obj = None
        try:
            obj = json.loads(out)
        except ValueError:
            pass
        results.append({"rc": p.returncode, "stdout": out, "stderr": err, "json": obj})
    gate.unlink()
    return results


def kiln_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.update(extra or {})
    return env
