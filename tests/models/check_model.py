#!/usr/bin/env python3
"""End-to-end check of one real model: kiln's outputs against ONNX Runtime's,
and kiln's compile cache across two processes.

Usage: check_model.py --model NAME --kiln PATH [--models-dir DIR] [--target cpu]
                      [--rtol 1e-3] [--atol 1e-4] [--timeout S] [--keep]

1. Makes seeded inputs for MODELS_DIR/NAME.onnx (tools/models/inputs.py) and
   saves them as .npy files in a temporary directory.
2. Runs ONNX Runtime (CPU execution provider) for the reference outputs.
3. Runs, in two separate processes sharing one fresh cache directory,
     kiln run NAME.onnx --target T --input NAME=FILE.npy ... --output-dir OUT
                        --cache-dir CACHE --json
   and checks: the first reports cache "miss" with compile_ms > 0, the second
   cache "hit" with compile_ms == 0; each run writes OUT/<safe name>.npy for
   every output with ORT's shape and dtype and values within rtol/atol
   (|kiln - ort| <= atol + rtol * |ort| elementwise, and the largest error at
   most rtol times the output's largest magnitude, so that an output whose
   values all lie below atol is still compared meaningfully).
4. Prints a one-line summary; on failure every problem found, and exits 1.

Exit status: 0 all checks passed, 1 a check failed, 2 bad usage or setup
(missing model file or kiln binary).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "models"))
from inputs import make_inputs  # noqa: E402


def safe_names(names: list[str]) -> list[str]:
    """The file stems kiln uses for outputs (CLI contract): characters outside
    [A-Za-z0-9._-] become '_', a leading '.' or an empty name gets a '_'
    prefix, and collisions get '_2', '_3', ... in output order."""
    used: set[str] = set()
    out = []
    for name in names:
        s = re.sub(r"[^A-Za-z0-9._-]", "_", name)
        if s == "" or s.startswith("."):
            s = "_" + s
        candidate, k = s, 2
        while candidate in used:
            candidate = f"{s}_{k}"
            k += 1
        used.add(candidate)
        out.append(candidate)
    return out


class Failures:
    """Collects problems so one run reports all of them, not just the first."""

    def __init__(self) -> None:
        self.items: list[str] = []

    def add(self, msg: str) -> None:
        self.items.append(msg)

    def __bool__(self) -> bool:
        return bool(self.items)


def compare(label: str, got: np.ndarray, ref: np.ndarray, rtol: float, atol: float,
            fails: Failures) -> tuple[float, float]:
    """Compares one output; returns (max abs error, max rel error) and records
    a failure naming the worst element when out of tolerance."""
    if got.shape != ref.shape:
        fails.add(f"{label}: shape {list(got.shape)} != ORT {list(ref.shape)}")
        return float("inf"), float("inf")
    if got.dtype != ref.dtype:
        fails.add(f"{label}: dtype {got.dtype} != ORT {ref.dtype}")
        return float("inf"), float("inf")
    if got.size == 0:
        return 0.0, 0.0
    if not np.issubdtype(ref.dtype, np.floating):
        wrong = got != ref
        if wrong.any():
            idx = tuple(int(i) for i in np.argwhere(wrong)[0])
            fails.add(f"{label}: {int(wrong.sum())} of {ref.size} elements differ; first at {list(idx)}: "
                      f"kiln {got[idx]} vs ORT {ref[idx]}")
            return float("inf"), float("inf")
        return 0.0, 0.0

    g = got.astype(np.float64)
    r = ref.astype(np.float64)
    nan_mismatch = np.isnan(g) != np.isnan(r)
    if nan_mismatch.any():
        idx = tuple(int(i) for i in np.argwhere(nan_mismatch)[0])
        fails.add(f"{label}: NaN in one output but not the other at {list(idx)}: kiln {g[idx]} vs ORT {r[idx]}")
    both = ~(np.isnan(g) | np.isnan(r))
    diff = np.where(both, np.abs(g - r), 0.0)
    # Matching infinities give inf - inf = nan above; they are equal, so error 0.
    diff = np.nan_to_num(diff, nan=0.0, posinf=np.inf)
    rel = diff / np.maximum(np.abs(r), atol)
    max_abs = float(diff.max())
    max_rel = float(rel.max())
    excess = diff - (atol + rtol * np.abs(r))
    worst = np.unravel_index(int(np.argmax(excess)), r.shape)
    worst_l = [int(i) for i in worst]
    n_bad = int((excess > 0).sum())
    if n_bad:
        fails.add(f"{label}: {n_bad} of {r.size} elements outside rtol {rtol:g} / atol {atol:g}; "
                  f"max abs err {max_abs:.3g}, max rel err {max_rel:.3g}; worst at {worst_l}: "
                  f"kiln {g[worst]:.9g} vs ORT {r[worst]:.9g}")
    scale = float(np.abs(np.where(both, r, 0.0)).max())
    if not n_bad and max_abs > rtol * scale:
        idx = [int(i) for i in np.unravel_index(int(np.argmax(diff)), r.shape)]
        fails.add(f"{label}: max abs err {max_abs:.3g} exceeds rtol x largest |ORT value| "
                  f"({rtol:g} x {scale:.3g}); worst at {idx}: kiln {g[tuple(idx)]:.9g} vs ORT {r[tuple(idx)]:.9g}")
    return max_abs, max_rel


def run_kiln(cmd: list[str], timeout: float, label: str, fails: Failures) -> dict | None:
    """Runs one kiln process; returns its --json object, or None (failure recorded)."""
    t0 = time.perf_counter()
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        fails.add(f"{label}: kiln did not finish within {timeout:g} s: {' '.join(cmd)}")
        return None
    wall = time.perf_counter() - t0
    if res.returncode != 0:
        how = (f"killed by {signal.Signals(-res.returncode).name}" if res.returncode < 0
               else f"exit code {res.returncode}")
        fails.add(f"{label}: kiln failed ({how}) after {wall:.1f} s\n  command: {' '.join(cmd)}\n"
                  f"  stderr: {res.stderr.strip()[-3000:]}\n  stdout: {res.stdout.strip()[-1000:]}")
        return None
    try:
        obj = json.loads(res.stdout)
    except ValueError as e:
        fails.add(f"{label}: stdout is not one JSON object ({e}):\n  {res.stdout.strip()[:2000]}")
        return None
    if not isinstance(obj, dict):
        fails.add(f"{label}: --json printed {type(obj).__name__}, not an object")
        return None
    obj["_wall_s"] = wall
    return obj


def number(obj: dict, key: str, label: str, fails: Failures) -> float:
    v = obj.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        fails.add(f"{label}: JSON {key!r} is {v!r}, expected a number")
        return float("nan")
    return float(v)


def check_run(obj: dict, label: str, want_cache: str, out_dir: Path, ort_names: list[str],
              ort_outs: list[np.ndarray], input_names: list[str], args, fails: Failures) -> tuple[float, float]:
    """Checks one kiln run's JSON and output files; returns (max abs, max rel) error."""
    if obj.get("cache") != want_cache:
        fails.add(f"{label}: JSON cache is {obj.get('cache')!r}, expected {want_cache!r}; "
                  f"notes: {obj.get('notes')!r}")
    compile_ms = number(obj, "compile_ms", label, fails)
    if want_cache == "miss" and not compile_ms > 0:
        fails.add(f"{label}: compile_ms is {compile_ms}, expected > 0 on a cache miss")
    if want_cache == "hit" and compile_ms != 0:
        fails.add(f"{label}: compile_ms is {compile_ms}, expected 0 on a cache hit")
    number(obj, "load_ms", label, fails)
    number(obj, "run_ms", label, fails)
    if obj.get("target") != args.target:
        fails.add(f"{label}: JSON target is {obj.get('target')!r}, expected {args.target!r}")

    json_inputs = obj.get("inputs")
    if not isinstance(json_inputs, list) or sorted(i.get("name") for i in json_inputs
                                                   if isinstance(i, dict)) != sorted(input_names):
        fails.add(f"{label}: JSON inputs {json_inputs!r} do not list the model's inputs {input_names}")

    json_outputs = obj.get("outputs")
    by_name = {}
    if not isinstance(json_outputs, list):
        fails.add(f"{label}: JSON outputs is {json_outputs!r}, expected a list")
    else:
        by_name = {o.get("name"): o for o in json_outputs if isinstance(o, dict)}
        if [o.get("name") for o in json_outputs if isinstance(o, dict)] != ort_names:
            fails.add(f"{label}: JSON outputs are {[o.get('name') for o in json_outputs if isinstance(o, dict)]}, "
                      f"ORT's are {ort_names}")

    worst_abs = worst_rel = 0.0
    for name, stem, ref in zip(ort_names, safe_names(ort_names), ort_outs):
        olabel = f"{label}: output {name!r}"
        path = out_dir / f"{stem}.npy"
        entry = by_name.get(name)
        if entry is not None:
            if entry.get("shape") != list(ref.shape):
                fails.add(f"{olabel}: JSON shape {entry.get('shape')} != ORT {list(ref.shape)}")
            if entry.get("dtype") != str(ref.dtype):
                fails.add(f"{olabel}: JSON dtype {entry.get('dtype')!r} != ORT {str(ref.dtype)!r}")
            f = entry.get("file")
            if not isinstance(f, str) or not Path(f).exists() or not path.exists() \
                    or not os.path.samefile(f, path):
                fails.add(f"{olabel}: JSON file {f!r} is not {path}")
        if not path.exists():
            present = sorted(p.name for p in out_dir.iterdir()) if out_dir.is_dir() else "no directory"
            fails.add(f"{olabel}: {path} was not written (the directory has: {present})")
            continue
        try:
            got = np.load(path, allow_pickle=False)
        except Exception as e:  # any unreadable .npy is a kiln failure to report
            fails.add(f"{olabel}: cannot read {path}: {e}")
            continue
        a, r = compare(olabel, got, ref, args.rtol, args.atol, fails)
        worst_abs, worst_rel = max(worst_abs, a), max(worst_rel, r)
    return worst_abs, worst_rel


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="model name: MODELS_DIR/NAME.onnx")
    ap.add_argument("--kiln", required=True, type=Path, help="path to the kiln binary")
    ap.add_argument("--models-dir", type=Path, default=REPO / ".models")
    ap.add_argument("--target", default="cpu")
    ap.add_argument("--rtol", type=float, default=1e-3)
    ap.add_argument("--atol", type=float, default=1e-4)
    ap.add_argument("--timeout", type=float, default=1800, help="seconds allowed for each kiln process")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory and print it")
    args = ap.parse_args(argv)

    model_path = (args.models_dir / f"{args.model}.onnx").resolve()
    if not model_path.is_file():
        print(f"check_model: error: {model_path} does not exist; run tools/models/prepare.py --only {args.model}",
              file=sys.stderr)
        return 2
    kiln = args.kiln.resolve()
    if not (kiln.is_file() and os.access(kiln, os.X_OK)):
        print(f"check_model: error: kiln binary {kiln} does not exist or is not executable", file=sys.stderr)
        return 2

    if args.target.startswith("cuda"):
        # A GPU probe on the small demo model: a kiln without CUDA, or a machine
        # without a GPU, makes this test SKIPPED (exit 77), never passed.
        probe = subprocess.run([str(kiln), "run", str(args.models_dir / "demo.onnx"), "--target", args.target,
                                "--no-cache", "--random-inputs"], capture_output=True, text=True,
                               timeout=args.timeout)
        for why in ("built without CUDA support", "no CUDA driver or device"):
            if probe.returncode != 0 and why in probe.stderr:
                print(f"SKIPPED: {args.model} on {args.target}: {why}")
                return 77

    import onnxruntime as ort

    tmp = Path(tempfile.mkdtemp(prefix=f"kiln-check-{args.model}-"))
    try:
        fails = Failures()
        so = ort.SessionOptions()
        so.log_severity_level = 3
        sess = ort.InferenceSession(str(model_path), so, providers=["CPUExecutionProvider"])
        feeds = make_inputs(args.model, [(i.name, i.type, i.shape) for i in sess.get_inputs()])
        ort_names = [o.name for o in sess.get_outputs()]
        t0 = time.perf_counter()
        ort_outs = sess.run(None, feeds)
        ort_ms = (time.perf_counter() - t0) * 1e3

        in_dir = tmp / "inputs"
        in_dir.mkdir()
        input_args = []
        for (name, arr), stem in zip(feeds.items(), safe_names(list(feeds))):
            f = in_dir / f"{stem}.npy"
            np.save(f, arr)
            input_args += ["--input", f"{name}={f}"]

        cache = tmp / "cache"
        results = []
        for i, want in enumerate(["miss", "hit"], start=1):
            out_dir = tmp / f"out{i}"
            label = f"{args.model} run {i} ({want})"
            cmd = [str(kiln), "run", str(model_path), "--target", args.target, *input_args,
                   "--output-dir", str(out_dir), "--cache-dir", str(cache), "--json"]
            obj = run_kiln(cmd, args.timeout, label, fails)
            if obj is None:
                results.append(None)
                continue
            err = check_run(obj, label, want, out_dir, ort_names, ort_outs, list(feeds), args, fails)
            results.append((obj, err))

        def fmt(key):
            return "/".join(f"{r[0].get(key):.1f}" if r and isinstance(r[0].get(key), (int, float))
                            else "?" for r in results)

        errs = [r[1] for r in results if r]
        max_abs = max((e[0] for e in errs), default=float("nan"))
        max_rel = max((e[1] for e in errs), default=float("nan"))
        status = "FAIL" if fails else "OK"
        print(f"check_model: {args.model} {status} target={args.target} compile_ms={fmt('compile_ms')} "
              f"load_ms={fmt('load_ms')} run_ms={fmt('run_ms')} (ORT {ort_ms:.1f}) "
              f"max_abs_err={max_abs:.3g} max_rel_err={max_rel:.3g}", flush=True)
        if fails:
            print(f"check_model: {args.model}: {len(fails.items)} problem(s):", file=sys.stderr)
            for msg in fails.items:
                print(f"  - {msg}", file=sys.stderr)
            return 1
        return 0
    finally:
        if args.keep:
            print(f"check_model: kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
