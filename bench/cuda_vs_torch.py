#!/usr/bin/env python3
"""kiln's cuda target against PyTorch on the same GPU, the same model definitions
and the same weights and inputs, measured in one run (issue #6).

Models (bench/make_gpu_models.py, random weights, seed 0): torchvision
ResNet-50 (Nx3x224x224) and transformers BERT-base (BertConfig(), sequence 128,
inputs input_ids / attention_mask with zeros / token_type_ids). kiln gets them
as ONNX exported at each batch (static shapes); PyTorch runs the very modules
that were exported.

Configurations run precision by precision, then batch, then model (with the
defaults: fp16 b1 resnet50, fp16 b1 bert_base, fp16 b32 ..., then fp32), so a
run cut short has the most important rows. For each configuration:
  1. torch eager: a fresh Python process (`cuda_vs_torch.py torch-child ...`):
     model .half() for fp16 (bfloat16 for bf16), inputs on the GPU, torch.inference_mode(); after
     --warmup calls, --runs calls each timed with time.perf_counter() around
     the call and torch.cuda.synchronize() (median, p90); also the CUDA-event
     time of --runs back-to-back calls ("pipelined") and the median latency
     with host copies (host fp32 inputs -> GPU -> model -> outputs .cpu()).
     Its outputs are saved for the comparison with kiln.
  2. `kiln perf MODEL --target cuda --precision P [--tf32] --tuning T --runs N
     --warmup W --input ... --keep ART --json` with a fresh XDG_CACHE_HOME:
     compile_ms (cold compile, in process), load_ms (Session::load in a fresh
     process), first_run_ms, latency_ms_median / p90 (each run is kiln's
     Session::run: host inputs copied in, the program, outputs copied back,
     synchronized), throughput_per_s.
  3. kiln warm start: `kiln run ART.kiln --input ... --output-dir D --json`,
     --warm-starts times, each a fresh process; the wall time from spawn to
     exit (CUDA context creation, load, first run, writing the outputs) and the
     load_ms it reports. Its outputs are compared with torch eager's:
     max |kiln - torch|, and whether that is <= TOL * max(1, max |torch|)
     (TOL: fp32 1e-3, tf32 1e-2, fp16 3e-2, bf16 1e-1).
  4. (models in --cache-start-models, batches in --cache-start-batches; default
     ResNet-50 at batch 1) the same through kiln's compiled-program
     cache: `kiln run MODEL.onnx ... --cache-dir EMPTY_DIR` once (a miss: cold
     compile in a fresh process, wall time), then --warm-starts more times
     (hits: the warm start a deployment sees).
Then for each torch.compile mode (--torch-modes minus eager):
  5. cold: a fresh process with TORCHINDUCTOR_CACHE_DIR (and TRITON_CACHE_DIR
     inside it) an empty directory: compile_s is the wall time of
     torch.compile(model, mode=...) and its first call (CUDA context already
     created, model already on the GPU). With --parallel-compiles K, up to K
     configurations compile at once (the report says so). A cold process
     measures the latency too, after its compile, but the report uses it only
     when the warm process failed or was cut (and says so: with concurrent
     compiles it may have been disturbed).
  6. warm: a fresh process on the same cache directory: warm-cache compile_s,
     then the latency as in 1 (these are the torch.compile latencies reported;
     a cold process's only when the warm one failed).

Every step is a subprocess with a timeout (--step-timeout, --compile-timeout,
both cut to what is left of --deadline); a failure is recorded as
"error: <first line>" and the run goes on. Each result is appended at once to
--results (JSON lines; every record holds the exact command), progress lines
go to stdout with timestamps, and the Markdown report (--report-out) is
rewritten after every step, so a run cut short still leaves a report.

Usage (GPU; see scripts/device/bench_gpu.sh for the device call):
  python3 bench/cuda_vs_torch.py --kiln build-cuda/tools/kiln/kiln \\
      [--models resnet50 bert_base] [--batches 1 32] [--precisions fp16 fp32] \\
      [--torch-modes eager max-autotune [default]] [--no-max-autotune] \\
      [--kiln-tuning exhaustive] [--kiln-extra "--arch sm_90"] [--runs 100] \\
      [--warmup 20] [--parallel-compiles K] [--deadline SECONDS] \\
      [--results build-bench/cuda_vs_torch.jsonl] [--report-out bench/results/cuda_vs_torch.md]
  CPU smoke test of the plumbing (eager only, kiln --target cpu, few runs):
  .venv/bin/python bench/cuda_vs_torch.py --device cpu --models resnet50
  Report only, merging result files (later records of a step win, except that a
  step skipped for want of time never replaces an earlier record of it; ratios
  whose two figures come from different runs are marked with a dagger):
  python3 bench/cuda_vs_torch.py --report A.jsonl [B.jsonl ...] [--report-out PATH]

This is a benchmark, not a test: it asserts nothing and exits 0 unless its
own arguments are wrong.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import json
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

try:
    import numpy as np
except ImportError:  # --report needs no numpy (so any python3 can write the report from result files)
    np = None

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

MODELS = ("resnet50", "bert_base")
MODEL_TITLES = {"resnet50": "ResNet-50 (torchvision resnet50(weights=None), seed 0, 3x224x224)",
                "bert_base": "BERT-base (transformers BertModel(BertConfig()), seed 0, sequence 128)"}
PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
TOL = {"fp32": 1e-3, "tf32": 1e-2, "fp16": 3e-2, "bf16": 1e-1}
COMPILED_MODES = ("max-autotune", "default", "reduce-overhead", "max-autotune-no-cudagraphs")
REPORT_MARGIN_S = 15  # what a deadline keeps back for the last report

T0 = time.monotonic()
LOCK = threading.Lock()


# ---------------------------------------------------------------- small helpers
def log(msg: str) -> None:
    with LOCK:
        print(f"[{datetime.datetime.now():%H:%M:%S} +{time.monotonic() - T0:7.1f}s] {msg}", flush=True)


def rel(p) -> str:
    """A path relative to the repo root when it is inside it (for readable commands)."""
    p = Path(os.path.abspath(p))
    try:
        return str(p.relative_to(REPO))
    except ValueError:
        return str(p)


def cmd_text(cmd: list, env: dict | None = None) -> str:
    pre = " ".join(f"{k}={shlex.quote(rel(v) if '/' in str(v) else str(v))}" for k, v in (env or {}).items())
    body = " ".join(shlex.quote(rel(c) if isinstance(c, Path) or (isinstance(c, str) and c.startswith(str(REPO)))
                                else str(c)) for c in cmd)
    return (pre + " " + body).strip()


def first_line(text: str) -> str:
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()
    return ""


def error_line(stdout: str, stderr: str, rc) -> str:
    """The most telling line of a failed command: kiln's `kiln: error:` line, its JSON error, the last line of a
    Python traceback, a line that says error, else the first line."""
    lines = [x.strip() for x in (stderr or "").splitlines() if x.strip()]
    for line in lines:
        if line.startswith("kiln: error"):
            return line
    for line in (stdout or "").splitlines():
        try:
            j = json.loads(line)
        except ValueError:
            continue
        if isinstance(j, dict) and isinstance(j.get("error"), dict):
            return f"{j['error'].get('code')}: {first_line(j['error'].get('message', ''))}"
    if any(x.startswith("Traceback") for x in lines):
        return lines[-1]
    for line in lines:
        if "error" in line.lower():
            return line
    return (lines[0] if lines else "") or first_line(stdout) or f"exit status {rc}"


def last_json(stdout: str) -> dict:
    for line in reversed((stdout or "").splitlines()):
        line = line.strip()
        if line.startswith("RESULT "):
            line = line[7:]
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    raise ValueError("no JSON on stdout")


class Skipped(Exception):
    pass


class StepFailed(Exception):
    pass


class Runner:
    """Runs subprocesses with timeouts (killing the whole process group), logs and records."""

    def __init__(self, args):
        self.args = args
        self.deadline = T0 + args.deadline if args.deadline else None
        self.work = Path(args.work)
        self.run_id = datetime.datetime.now().strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}"
        self.logs = Path(args.step_logs) if args.step_logs else self.work / "logs" / self.run_id
        self.logs.mkdir(parents=True, exist_ok=True)
        self.results = Path(args.results)
        self.results.parent.mkdir(parents=True, exist_ok=True)
        self.records: list[dict] = []
        self.nlog = 0

    def timeout(self, want: float, need: float = 20) -> float:
        """`want` cut to what the deadline leaves (minus the report margin); Skipped when under `need`."""
        if self.deadline is None:
            return want
        left = self.deadline - time.monotonic() - REPORT_MARGIN_S
        if left < need:
            raise Skipped(f"skipped: deadline ({left + REPORT_MARGIN_S:.0f} s left)")
        return min(want, left)

    def run(self, cmd: list, *, timeout: float, env: dict | None = None, tag: str = "step") -> dict:
        """Runs cmd; returns {rc, stdout, stderr, wall_s, cmd}. Raises StepFailed on timeout."""
        full_env = os.environ.copy()
        full_env.update({k: str(v) for k, v in (env or {}).items()})
        if os.environ.get("BENCH_TORCH_UNSET_LD_LIBRARY_PATH") and tag.startswith(("torch", "export")):
            full_env.pop("LD_LIBRARY_PATH", None)  # set by scripts/device/bench_gpu.sh when torch fails under it
        with LOCK:
            self.nlog += 1
            log_path = self.logs / f"{self.nlog:03d}_{tag}.log"
        text = cmd_text(cmd, env)
        t0 = time.perf_counter()
        p = subprocess.Popen([str(c) for c in cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=full_env, cwd=REPO, start_new_session=True)
        timed_out = False
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:
                out, err = p.communicate(timeout=30)
            except subprocess.TimeoutExpired:  # a grandchild in another session still holds the pipes
                out, err = "", "(output lost: the pipes stayed open after the kill)"
        wall = time.perf_counter() - t0
        log_path.write_text(f"$ {text}\n# rc={p.returncode} wall={wall:.3f}s{' TIMEOUT' if timed_out else ''}\n"
                            f"# ---- stdout\n{out}\n# ---- stderr\n{err}\n")
        if timed_out:
            raise StepFailed(f"timeout after {timeout:.0f} s (log {rel(log_path)})")
        return {"rc": p.returncode, "stdout": out, "stderr": err, "wall_s": wall, "cmd": text, "log": rel(log_path)}

    def record(self, rec: dict) -> dict:
        rec = {"ts": datetime.datetime.now().isoformat(timespec="seconds"), "run_id": self.run_id,
               "device": self.args.device, **rec}
        with LOCK:
            self.records.append(rec)
            with self.results.open("a") as f:
                f.write(json.dumps(rec) + "\n")
        return rec


# ---------------------------------------------------------------- configuration
class Cfg:
    def __init__(self, model: str, batch: int, precision: str):
        self.model, self.batch, self.precision = model, batch, precision

    @property
    def key(self) -> str:
        return f"{self.model}|b{self.batch}|{self.precision}"

    @property
    def slug(self) -> str:
        return f"{self.model}_b{self.batch}_{self.precision}"

    def fields(self) -> dict:
        return {"model": self.model, "batch": self.batch, "precision": self.precision, "key": self.key}


def onnx_path(work: Path, model: str, batch: int) -> Path:
    """make_gpu_models.onnx_name (not imported here: that module imports torch)."""
    return work / "models" / (f"{model}.onnx" if batch == 1 else f"{model}_b{batch}.onnx")


def inputs_dir(work: Path, model: str, batch: int) -> Path:
    return work / "inputs" / f"{model}_b{batch}"


# ---------------------------------------------------------------- the torch side (child process)
def torch_child(argv: list) -> int:
    ap = argparse.ArgumentParser(prog="cuda_vs_torch.py torch-child")
    ap.add_argument("--model", required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--precision", required=True, choices=PRECISIONS)
    ap.add_argument("--mode", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--inputs", required=True)
    ap.add_argument("--save-outputs")
    ap.add_argument("--compile-only", action="store_true")
    a = ap.parse_args(argv)
    t_start = time.perf_counter()
    res: dict = {"mode": a.mode}
    try:
        import torch

        from make_gpu_models import INPUT_NAMES, build_module

        res["torch"] = torch.__version__
        try:
            import transformers
            import torchvision

            res["transformers"], res["torchvision"] = transformers.__version__, torchvision.__version__
        except Exception:  # noqa: BLE001 (versions are informative only)
            pass
        dev = torch.device(a.device)
        cuda = dev.type == "cuda"
        if cuda:
            torch.zeros(1, device=dev)  # CUDA context now, outside every timing
            torch.cuda.synchronize()
            res["gpu"] = torch.cuda.get_device_name(dev)
            res["cuda"] = torch.version.cuda
            tf32 = a.precision == "tf32"
            try:  # the pre-2.9 switches (still honoured, with a deprecation warning, by later versions)
                torch.backends.cuda.matmul.allow_tf32 = tf32
                torch.backends.cudnn.allow_tf32 = tf32
                res["tf32"] = tf32
            except Exception as e:  # noqa: BLE001 (recorded: the row's precision is then uncertain)
                res["tf32"] = f"not set: {type(e).__name__}: {first_line(str(e))}"
            res["cudnn_benchmark"] = bool(torch.backends.cudnn.benchmark)
        sync = torch.cuda.synchronize if cuda else (lambda: None)
        dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(a.precision, torch.float32)
        model = build_module(a.model).to(device=dev, dtype=dtype)
        if a.model == "bert_base":
            res["attn_implementation"] = getattr(model.inner.config, "_attn_implementation", None)
        host = [torch.from_numpy(np.load(Path(a.inputs) / f"{n}.npy")) for n in INPUT_NAMES[a.model]]

        def to_dev(t):
            t = t.to(dev)
            return t.to(dtype) if t.is_floating_point() else t

        args = tuple(to_dev(t) for t in host)

        def as_tuple(o):
            return o if isinstance(o, (tuple, list)) else (o,)

        def timed(fn, n):
            lat = []
            for _ in range(n):
                t0 = time.perf_counter()
                fn()
                sync()
                lat.append((time.perf_counter() - t0) * 1e3)
            return lat

        with torch.inference_mode():
            fn = model
            t0 = time.perf_counter()
            if a.mode != "eager":
                fn = torch.compile(model, mode=None if a.mode == "default" else a.mode)
            out = as_tuple(fn(*args))
            sync()
            first = time.perf_counter() - t0
            if a.mode != "eager":
                res["compile_s"] = first
            res["first_call_ms"] = first * 1e3
            if a.save_outputs:
                os.makedirs(a.save_outputs, exist_ok=True)
                for i, o in enumerate(out):
                    np.save(Path(a.save_outputs) / f"out{i}.npy", o.detach().float().cpu().numpy())
            del out  # CUDA-graph outputs are overwritten by the next call: never touch them again
            if not a.compile_only:
                def step():
                    fn(*args)

                timed(step, a.warmup)
                lat = timed(step, a.runs)
                med = statistics.median(lat)
                res.update(latency_ms_median=med, latency_ms_p90=float(np.percentile(lat, 90)),
                           latency_ms_min=min(lat), runs=len(lat), warmup=a.warmup,
                           throughput_per_s=1000.0 * a.batch / med)
                if cuda:
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    for _ in range(a.runs):
                        fn(*args)
                    end.record()
                    end.synchronize()
                    res["pipelined_ms"] = start.elapsed_time(end) / a.runs

                def step_io():
                    xs = tuple(to_dev(t) for t in host)
                    for o in as_tuple(fn(*xs)):
                        o.float().cpu()

                timed(step_io, max(1, a.warmup // 4))
                lat_io = timed(step_io, a.runs)
                res["latency_ms_median_host_copies"] = statistics.median(lat_io)
    except Exception as e:  # noqa: BLE001 (reported, not raised: the parent records it)
        traceback.print_exc()
        res["error"] = f"{type(e).__name__}: {first_line(str(e))}"
    res["child_wall_s"] = time.perf_counter() - t_start
    print("RESULT " + json.dumps(res), flush=True)
    return 0


# ---------------------------------------------------------------- steps (parent)
def prepare(r: Runner, cfgs: list) -> None:
    """Exports every (model, batch) ONNX file that is missing (in parallel: CPU work, before any timing) and
    writes the inputs."""
    from make_gpu_models import make_inputs

    pairs = sorted({(c.model, c.batch) for c in cfgs})
    for m, b in pairs:
        d = inputs_dir(r.work, m, b)
        d.mkdir(parents=True, exist_ok=True)
        for name, arr in make_inputs(m, b).items():
            np.save(d / f"{name}.npy", arr)
    todo = [(m, b) for m, b in pairs if not onnx_path(r.work, m, b).exists()]
    for m, b in pairs:
        if (m, b) not in todo:
            log(f"export {m} b{b}: {rel(onnx_path(r.work, m, b))} exists, kept")

    def one(mb):
        m, b = mb
        cmd = [sys.executable, REPO / "bench" / "make_gpu_models.py", r.work / "models", m, "--batch", str(b)]
        rec = {"step": "export", "model": m, "batch": b, "key": f"{m}|b{b}"}
        try:
            res = r.run(cmd, timeout=r.timeout(r.args.step_timeout), tag=f"export_{m}_b{b}")
            rec.update(cmd=res["cmd"], wall_s=res["wall_s"])
            if res["rc"] != 0:
                rec["error"] = error_line(res["stdout"], res["stderr"], res["rc"])
        except (Skipped, StepFailed) as e:
            rec["error"] = str(e)
        r.record(rec)
        log(f"export {m} b{b}: " + (f"error: {rec['error']}" if "error" in rec else f"{rec['wall_s']:.1f} s"))

    if todo:
        log(f"exporting {len(todo)} model file(s) in parallel: {', '.join(f'{m} b{b}' for m, b in todo)}")
        with concurrent.futures.ThreadPoolExecutor(max_workers=min(4, len(todo))) as ex:
            list(ex.map(one, todo))


def torch_cmd(r: Runner, cfg: Cfg, mode: str, save: Path | None, compile_only: bool = False) -> list:
    a = r.args
    cmd = [sys.executable, REPO / "bench" / "cuda_vs_torch.py", "torch-child", "--model", cfg.model, "--batch",
           str(cfg.batch), "--precision", cfg.precision, "--mode", mode, "--device", a.device, "--runs", str(a.runs),
           "--warmup", str(a.warmup), "--inputs", inputs_dir(r.work, cfg.model, cfg.batch)]
    if save:
        cmd += ["--save-outputs", save]
    if compile_only:
        cmd.append("--compile-only")
    return cmd


def torch_step(r: Runner, cfg: Cfg, mode: str, phase: str, timeout: float, env: dict | None = None,
               compile_only: bool = False, extra: dict | None = None) -> dict:
    """phase: eager | cold | warm. Records step torch_<phase>."""
    save = r.work / "outputs" / cfg.slug / f"torch_{mode}_{phase}"
    shutil.rmtree(save, ignore_errors=True)
    rec = {"step": f"torch_{phase}", "mode": mode, **cfg.fields(), **(extra or {})}
    cmd = torch_cmd(r, cfg, mode, save, compile_only)
    rec["cmd"] = cmd_text(cmd, env)
    try:
        res = r.run(cmd, timeout=r.timeout(timeout, need=60 if phase == "cold" else 20), env=env,
                    tag=f"torch_{phase}_{mode}_{cfg.slug}")
        rec.update(cmd=res["cmd"], wall_s=res["wall_s"], log=res["log"])
        try:
            rec.update(last_json(res["stdout"]))
        except ValueError:
            rec["error"] = error_line(res["stdout"], res["stderr"], res["rc"])
        rec["outputs_dir"] = str(save)
    except (Skipped, StepFailed) as e:
        rec["error"] = str(e)
    r.record(rec)
    what = f"torch {mode} {phase} {cfg.key}"
    if "error" in rec:
        log(f"{what}: error: {rec['error']}")
    else:
        parts = []
        if "compile_s" in rec:
            parts.append(f"compile {rec['compile_s']:.1f} s")
        if "latency_ms_median" in rec:
            parts.append(f"{rec['latency_ms_median']:.3f} ms median ({rec['throughput_per_s']:.0f}/s)")
        log(f"{what}: {', '.join(parts) or 'done'} [process {rec['wall_s']:.1f} s]")
    return rec


def kiln_help(r: Runner, sub: str) -> str:
    try:
        res = r.run([r.args.kiln, sub, "--help"], timeout=30, tag=f"kiln_{sub}_help")
        return res["stdout"] + res["stderr"]
    except Exception as e:  # noqa: BLE001
        return f"error: {e}"


def kiln_compile_flags(r: Runner, cfg: Cfg, help_text: str, sub: str) -> tuple[list, dict]:
    """Flags that make kiln compile this configuration, and notes. Raises StepFailed when this kiln cannot."""
    a = r.args
    flags = ["--target", "cuda" if a.device == "cuda" else "cpu"]
    notes = {}
    has = lambda f: f in help_text  # noqa: E731
    if cfg.precision in ("fp16", "bf16"):
        if not has("--precision"):
            raise StepFailed(f"kiln {sub} has no --precision option (this kiln cannot compile {cfg.precision})")
        flags += ["--precision", cfg.precision]
    else:
        if has("--precision"):
            flags += ["--precision", "fp32"]
        if cfg.precision == "tf32":
            if not has("--tf32"):
                raise StepFailed(f"kiln {sub} has no --tf32 option")
            flags.append("--tf32")
    if not a.kiln_tuning:
        notes["tuning"] = "none (no --kiln-tuning)"
    elif a.kiln_tuning:
        if has("--tuning"):
            flags += ["--tuning", a.kiln_tuning]
            notes["tuning"] = a.kiln_tuning
        else:
            notes["tuning"] = f"none (kiln {sub} has no --tuning)"
    flags += shlex.split(a.kiln_extra or "")
    return flags, notes


def kiln_inputs(r: Runner, cfg: Cfg, dtype16: bool = False) -> list:
    from make_gpu_models import INPUT_NAMES

    d = inputs_dir(r.work, cfg.model, cfg.batch)
    out = []
    for n in INPUT_NAMES[cfg.model]:
        p = d / f"{n}.npy"
        if dtype16:
            arr = np.load(p)
            if arr.dtype == np.float32:
                p = d / f"{n}.f16.npy"
                np.save(p, arr.astype(np.float16))
        out += ["--input", f"{n}={rel(p)}"]
    return out


def fresh_dir(p: Path) -> Path:
    shutil.rmtree(p, ignore_errors=True)
    p.mkdir(parents=True, mode=0o700)
    return p


def kiln_perf(r: Runner, cfg: Cfg, help_perf: str) -> dict:
    a = r.args
    art = r.work / "artifacts" / f"{cfg.slug}.kiln"
    art.parent.mkdir(parents=True, exist_ok=True)
    if art.exists():
        art.unlink()
    rec = {"step": "kiln_perf", **cfg.fields()}
    try:
        flags, notes = kiln_compile_flags(r, cfg, help_perf, "perf")
        rec.update(notes)
        env = {"XDG_CACHE_HOME": fresh_dir(r.work / "xdg" / f"{cfg.slug}_perf")}
        for f16 in (False, True):
            cmd = [a.kiln, "perf", onnx_path(r.work, cfg.model, cfg.batch), *flags, "--runs", str(a.runs),
                   "--warmup", str(a.warmup), *kiln_inputs(r, cfg, f16), "--keep", art, "--json"]
            rec["cmd"] = cmd_text(cmd, env)
            res = r.run(cmd, timeout=r.timeout(a.step_timeout), env=env, tag=f"kiln_perf_{cfg.slug}")
            rec.update(cmd=res["cmd"], wall_s=res["wall_s"], log=res["log"])
            # An fp16 program that wants fp16 inputs: feed it those once.
            if res["rc"] == 6 and cfg.precision == "fp16" and not f16 and "16" in res["stderr"]:
                rec["note"] = "retried with float16 inputs: " + error_line(res["stdout"], res["stderr"], 6)
                continue
            break
        if res["rc"] != 0:
            rec["error"] = error_line(res["stdout"], res["stderr"], res["rc"])
        else:
            rec.update(last_json(res["stdout"]))
            rec["artifact"] = str(art)
            rec["f16_inputs"] = f16
    except (Skipped, StepFailed, ValueError) as e:
        rec["error"] = str(e)
    r.record(rec)
    if "error" in rec:
        log(f"kiln perf {cfg.key}: error: {rec['error']}")
    else:
        g = lambda k, scale=1.0: f"{rec[k] * scale:.3f}" if isinstance(rec.get(k), (int, float)) else "?"  # noqa: E731
        log(f"kiln perf {cfg.key}: {g('latency_ms_median')} ms median ({g('throughput_per_s')}/s), "
            f"compile {g('compile_ms', 1e-3)} s (tuning {rec.get('tuning', '-')}), load {g('load_ms')} ms "
            f"[process {g('wall_s')} s]")
    return rec


def kiln_starts(r: Runner, cfg: Cfg, model_arg: Path, flags: list, env: dict | None, n: int, step: str,
                f16: bool, out_dir: Path, extra: dict | None = None) -> dict:
    """`kiln run` n times, each a fresh process; the wall time of each (spawn to exit) and its load_ms."""
    rec = {"step": step, **cfg.fields(), **(extra or {})}
    walls, loads, runs, caches, compiles = [], [], [], [], []
    try:
        for i in range(n):
            cmd = [r.args.kiln, "run", model_arg, *flags, *kiln_inputs(r, cfg, f16), "--output-dir", out_dir, "--json"]
            rec["cmd"] = cmd_text(cmd, env)
            res = r.run(cmd, timeout=r.timeout(r.args.step_timeout), env=env, tag=f"{step}_{cfg.slug}_{i}")
            if res["rc"] != 0:
                rec["error"] = error_line(res["stdout"], res["stderr"], res["rc"])
                break
            j = last_json(res["stdout"])
            walls.append(res["wall_s"])
            loads.append(j.get("load_ms"))
            runs.append(j.get("run_ms"))
            caches.append(j.get("cache"))
            compiles.append(j.get("compile_ms"))
            rec["outputs"] = [o.get("file") for o in j.get("outputs", [])]
    except (Skipped, StepFailed, ValueError) as e:
        rec["error"] = str(e)
    rec.update(wall_s_each=walls, load_ms_each=loads, run_ms_each=runs, cache_each=caches, compile_ms_each=compiles)
    if walls:
        rec.update(total_s_median=statistics.median(walls), total_s_first=walls[0],
                   load_ms_median=statistics.median([x for x in loads if x is not None] or [float("nan")]))
    r.record(rec)
    return rec


def kiln_warm_start(r: Runner, cfg: Cfg, perf: dict) -> dict:
    if "error" in perf or not perf.get("artifact"):
        why = "skipped: kiln perf was skipped" if str(perf.get("error", "")).startswith("skipped") else \
            "no artifact (kiln perf failed)"
        rec = r.record({"step": "kiln_warm_start", **cfg.fields(), "error": why})
        log(f"kiln warm start {cfg.key}: skipped, no artifact")
        return rec
    out = r.work / "outputs" / cfg.slug / "kiln"
    shutil.rmtree(out, ignore_errors=True)
    rec = kiln_starts(r, cfg, Path(perf["artifact"]), [], None, r.args.warm_starts, "kiln_warm_start",
                      perf.get("f16_inputs", False), out)
    if "total_s_median" in rec:
        log(f"kiln warm start {cfg.key} (fresh `kiln run ART.kiln`): {rec['total_s_median']:.3f} s median of "
            f"{len(rec['wall_s_each'])} (first {rec['total_s_first']:.3f} s), load {rec['load_ms_median']:.1f} ms"
            + (f"; then error: {rec['error']}" if "error" in rec else ""))
    else:
        log(f"kiln warm start {cfg.key}: error: {rec.get('error')}")
    return rec


def kiln_cache_start(r: Runner, cfg: Cfg, help_run: str, f16: bool) -> dict:
    rec = {"step": "kiln_cache_start", **cfg.fields()}
    try:
        flags, notes = kiln_compile_flags(r, cfg, help_run, "run")
    except StepFailed as e:
        rec["error"] = str(e)
        r.record(rec)
        log(f"kiln cache start {cfg.key}: error: {e}")
        return rec
    cache = r.work / "kcache" / cfg.slug
    shutil.rmtree(cache, ignore_errors=True)
    cache.parent.mkdir(parents=True, exist_ok=True)  # kiln creates the cache dir itself (mode 0700)
    env = {"XDG_CACHE_HOME": fresh_dir(r.work / "xdg" / f"{cfg.slug}_cache")}
    out = r.work / "outputs" / cfg.slug / "kiln_cache"
    rec = kiln_starts(r, cfg, onnx_path(r.work, cfg.model, cfg.batch), flags + ["--cache-dir", cache], env,
                      1 + r.args.warm_starts, "kiln_cache_start", f16, out, extra=notes)
    if rec.get("wall_s_each"):
        w, c = rec["wall_s_each"], rec["cache_each"]
        hits = [x for x, k in zip(w[1:], c[1:]) if k == "hit"]
        log(f"kiln cache start {cfg.key}: first run {w[0]:.1f} s (cache {c[0]}, compile "
            f"{(rec['compile_ms_each'][0] or 0) / 1e3:.1f} s); later runs {', '.join(f'{x:.3f}' for x in w[1:])} s "
            f"(cache {', '.join(str(k) for k in c[1:])})" + (f"; error: {rec['error']}" if "error" in rec else ""))
        if not hits and len(w) > 1:
            log(f"kiln cache start {cfg.key}: note: no cache hit")
    else:
        log(f"kiln cache start {cfg.key}: error: {rec.get('error')}")
    return rec


def compare(r: Runner, cfg: Cfg, kiln_rec: dict, torch_rec: dict, step: str = "compare") -> dict:
    rec = {"step": step, **cfg.fields(), "tolerance": TOL[cfg.precision],
           "against": f"torch {torch_rec.get('mode', 'eager')}",
           "cmd": f"(in bench/cuda_vs_torch.py) numpy: {', '.join(rel(f) for f in kiln_rec.get('outputs') or [])} "
                  f"against {rel(torch_rec['outputs_dir']) if torch_rec.get('outputs_dir') else '-'}/out*.npy"}
    try:
        if "error" in torch_rec or not torch_rec.get("outputs_dir"):
            raise StepFailed("no torch eager outputs" + (f" ({torch_rec['error']})" if "error" in torch_rec else ""))
        files = kiln_rec.get("outputs") or []
        if not files:
            raise StepFailed("no kiln outputs" + (f" ({kiln_rec['error']})" if "error" in kiln_rec else ""))
        worst, ref_max, ok, per = 0.0, 0.0, True, []
        for i, f in enumerate(files):
            k = np.load(f).astype(np.float64)
            t = np.load(Path(torch_rec["outputs_dir"]) / f"out{i}.npy").astype(np.float64)
            if k.shape != t.shape:
                raise StepFailed(f"output {i}: kiln shape {k.shape} vs torch {t.shape}")
            d = float(np.abs(k - t).max()) if k.size else 0.0
            m = float(np.abs(t).max()) if t.size else 0.0
            good = bool(np.isfinite(k).all()) and d <= TOL[cfg.precision] * max(1.0, m)
            per.append({"output": Path(f).stem, "max_abs_diff": d, "max_abs_torch": m, "ok": good})
            worst, ref_max, ok = max(worst, d), max(ref_max, m), ok and good
        rec.update(max_abs_diff=worst, max_abs_torch=ref_max, ok=ok, per_output=per)
    except (StepFailed, OSError, ValueError) as e:
        skipped = any(str(x.get("error", "")).startswith("skipped") for x in (kiln_rec, torch_rec))
        rec["error"] = ("skipped: " if skipped else "") + str(e)
    r.record(rec)
    if "error" in rec:
        log(f"compare {cfg.key}: error: {rec['error']}")
    else:
        log(f"compare {cfg.key}: max |kiln - torch| = {rec['max_abs_diff']:.3g} (max |torch| {rec['max_abs_torch']:.3g})"
            f" -> {'within' if rec['ok'] else 'NOT within'} {TOL[cfg.precision]:g} * max(1, max|torch|)")
    return rec


def compiled_phase(r: Runner, cfgs: list, mode: str) -> None:
    a = r.args
    k = max(1, a.parallel_compiles)
    dirs = {c.key: r.work / "inductor" / f"{c.slug}_{mode}" for c in cfgs}

    def env_of(c):
        d = dirs[c.key]
        return {"TORCHINDUCTOR_CACHE_DIR": d, "TRITON_CACHE_DIR": d / "triton"}

    concurrent_n = min(k, len(cfgs))
    log(f"torch.compile mode={mode}: cold compiles of {len(cfgs)} configuration(s), "
        f"{'up to ' + str(concurrent_n) + ' at a time (concurrent)' if concurrent_n > 1 else 'one at a time'}")
    for c in cfgs:
        fresh_dir(dirs[c.key])

    def cold(c):
        return torch_step(r, c, mode, "cold", a.compile_timeout, env_of(c),
                          extra={"concurrent": concurrent_n, "parallel_compiles": k})

    if concurrent_n > 1:
        with concurrent.futures.ThreadPoolExecutor(max_workers=concurrent_n) as ex:
            list(ex.map(cold, cfgs))
    else:
        for c in cfgs:
            cold(c)
    log(f"torch.compile mode={mode}: warm-cache processes (same cache dirs), one at a time")
    for c in cfgs:
        torch_step(r, c, mode, "warm", a.compile_timeout, env_of(c))


def main_run(args) -> int:
    r = Runner(args)
    a = args
    log(f"run {r.run_id}: device {a.device}, models {a.models}, batches {a.batches}, precisions {a.precisions}, "
        f"torch modes {a.torch_modes}, kiln tuning {a.kiln_tuning}, runs {a.runs}, warmup {a.warmup}, "
        f"results -> {rel(r.results)}, report -> {a.report_out}")
    meta = {"step": "meta", "argv": sys.argv, "python": sys.version.split()[0], "cpu_cores": os.cpu_count(),
            "kiln": a.kiln, "hostname": os.uname().nodename,
            "torch_without_ld_library_path": bool(os.environ.get("BENCH_TORCH_UNSET_LD_LIBRARY_PATH"))}
    try:
        meta["kiln_version"] = first_line(r.run([a.kiln, "--version"], timeout=30, tag="kiln_version")["stdout"])
    except Exception as e:  # noqa: BLE001
        meta["kiln_version"] = f"error: {e}"
    if a.device == "cuda":
        try:
            res = r.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm",
                         "--format=csv,noheader"], timeout=30, tag="nvidia_smi")
            meta["gpu"] = first_line(res["stdout"]) or error_line(res["stdout"], res["stderr"], res["rc"])
        except Exception as e:  # noqa: BLE001
            meta["gpu"] = f"error: {e}"
    helps = {s: kiln_help(r, s) for s in ("perf", "run", "compile")}
    meta["kiln_flags"] = {s: [f for f in ("--precision", "--tf32", "--tuning", "--arch", "--cache-dir")
                              if f in h] for s, h in helps.items()}
    r.record(meta)
    log(f"kiln {meta['kiln_version']}; gpu {meta.get('gpu', '-')}; kiln flags {meta['kiln_flags']}")

    cfgs = [Cfg(m, b, p) for p in a.precisions for b in a.batches for m in a.models]

    def report():
        write_report(load_records([r.results]) if a.report_merge else list(r.records), Path(a.report_out))

    try:
        prepare(r, cfgs)
    except Exception as e:  # noqa: BLE001
        r.record({"step": "export", "error": f"{type(e).__name__}: {first_line(str(e))}"})
        log(f"prepare: error: {e}")
    safe_report(report)

    for c in cfgs:
        if not onnx_path(r.work, c.model, c.batch).exists():
            log(f"{c.key}: no ONNX file; the kiln steps will fail")
        eager = {"error": "torch eager not in --torch-modes"}
        if "eager" in a.torch_modes:
            eager = guard(r, c, "torch_eager", torch_step, r, c, "eager", "eager", a.step_timeout)
        if not a.no_kiln:
            perf = guard(r, c, "kiln_perf", kiln_perf, r, c, helps["perf"])
            warm = guard(r, c, "kiln_warm_start", kiln_warm_start, r, c, perf)
            guard(r, c, "compare", compare, r, c, warm, eager)
            if c.batch in a.cache_start_batches and c.model in a.cache_start_models:
                guard(r, c, "kiln_cache_start", kiln_cache_start, r, c, helps["run"], perf.get("f16_inputs", False))
        safe_report(report)

    for mode in [m for m in a.torch_modes if m != "eager"]:
        try:
            compiled_phase(r, cfgs, mode)
        except Exception as e:  # noqa: BLE001
            log(f"torch.compile {mode}: error: {e}")
            r.record({"step": "note", "error": f"compiled phase {mode}: {type(e).__name__}: {first_line(str(e))}"})
        safe_report(report)
    log(f"done: {len(r.records)} records in {rel(r.results)}; report {a.report_out}")
    return 0


def guard(r: Runner, cfg: Cfg, step: str, fn, *args) -> dict:
    """fn(*args), but a bug of this script in one step is recorded as that step's error, not the end of the run."""
    try:
        return fn(*args)
    except Exception as e:  # noqa: BLE001
        log(f"{step} {cfg.key}: internal error of the bench:\n{traceback.format_exc()}")
        return r.record({"step": step, **cfg.fields(), **({"mode": "eager"} if step == "torch_eager" else {}),
                         "error": f"bench bug: {type(e).__name__}: {first_line(str(e))}"})


def safe_report(fn) -> None:
    try:
        fn()
    except Exception:  # noqa: BLE001 (the report must never stop the measurements)
        log("report: error:\n" + traceback.format_exc())


# ---------------------------------------------------------------- report
def load_records(paths: list) -> list:
    recs = []
    for p in paths:
        try:
            with open(p) as f:
                for line in f:
                    line = line.strip()
                    if line:
                        try:
                            recs.append(json.loads(line))
                        except ValueError:
                            pass
        except OSError as e:
            print(f"cannot read {p}: {e}", file=sys.stderr)
    return recs


def fmt_ms(x) -> str:
    if x is None or (isinstance(x, float) and x != x):
        return "-"
    return f"{x:.3f}" if x < 10 else f"{x:.1f}"


def fmt_s(x, digits=2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def cell_err(rec) -> str:
    e = str(rec.get("error", ""))
    e = e[len("error: "):] if e.startswith("error: ") else e
    if e.startswith("skipped"):
        return e.split("(")[0].strip()
    e = e.replace("|", "/")
    return "error: " + (e[:70] + "..." if len(e) > 70 else e)


def write_report(records: list, out: Path) -> str:
    md = render(records)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(out.suffix + ".tmp")
    tmp.write_text(md)
    os.replace(tmp, out)
    return md


def render(records: list) -> str:
    # Latest record of each (key, step, mode) wins: merging files, or re-runs of a configuration.
    # A step skipped for want of time never replaces an earlier record of it (merging several device calls).
    latest: dict = {}
    metas = [x for x in records if x.get("step") == "meta"]
    for x in records:
        if x.get("key") and x.get("step") not in ("meta",):
            k = (x["key"], x["step"], x.get("mode", ""))
            if k in latest and str(x.get("error", "")).startswith("skipped"):
                continue
            latest[k] = x

    def get(key, step, mode=""):
        return latest.get((key, step, mode))

    cfg_keys = []
    for x in records:
        if x.get("key", "").count("|") == 2 and x["key"] not in cfg_keys:
            cfg_keys.append(x["key"])
    modes = []
    for x in records:
        if x.get("step") in ("torch_cold", "torch_warm") and x.get("mode") not in modes:
            modes.append(x["mode"])
    devices = sorted({x.get("device", "?") for x in records})
    torch_info = next((x for x in reversed(records) if x.get("torch") and x.get("step", "").startswith("torch")), {})
    L = []
    L.append("# kiln cuda vs PyTorch (issue #6)\n")
    if devices != ["cuda"]:
        L.append(f"**Device {', '.join(devices)}: " + ("a CPU smoke run of the bench's plumbing (kiln --target cpu, "
                 "torch on the CPU); these figures say nothing about the GPU goals.**\n" if "cpu" in devices else "\n"))
    for mrec in metas[-3:]:
        L.append(f"- run `{mrec['run_id']}` ({mrec['ts']}, {mrec.get('hostname', '?')}, {mrec.get('cpu_cores')} CPU cores): "
                 f"kiln {mrec.get('kiln_version')}, GPU {mrec.get('gpu', '-')}; kiln options present: "
                 f"{json.dumps(mrec.get('kiln_flags', {}))}")
        L.append(f"  - command: `{' '.join(shlex.quote(x) for x in mrec.get('argv', []))}`")
    if torch_info:
        L.append(f"- PyTorch {torch_info.get('torch')} (CUDA {torch_info.get('cuda', '-')}), torchvision "
                 f"{torch_info.get('torchvision', '?')}, transformers {torch_info.get('transformers', '?')}; "
                 f"GPU as torch sees it: {torch_info.get('gpu', '-')}; cudnn.benchmark {torch_info.get('cudnn_benchmark', '-')}"
                 + (f"; BERT attention: {torch_info.get('attn_implementation')}" if torch_info.get("attn_implementation") else ""))
    L.append("- kiln latency: `kiln perf` median of its timed runs; each run is `Session::run` on host tensors: the "
             "inputs copied to the GPU, the program, the outputs copied back, synchronized. torch latency: median "
             "wall time of one call followed by `torch.cuda.synchronize()`, inputs already on the GPU, under "
             "`torch.inference_mode()`, model `.half()` for fp16; the host-copy table times torch with the same "
             "copies kiln makes. Throughput = batch x 1000 / median latency (items/s).")
    L.append("- Ratios kiln/torch are latency ratios (below 1: kiln is faster); the throughput ratio is kiln/torch "
             "items/s (above 1: kiln is faster). The peer of each ratio is measured in the same run.")
    L.append("- fp32 rows: TF32 off on both sides; tf32 rows: kiln `--tf32`, torch `allow_tf32` for matmul and "
             "cuDNN. Outputs: kiln's (a fresh `kiln run` of the artifact) against torch eager's at the same "
             "precision on the same inputs; within tolerance when max |kiln - torch| <= TOL x max(1, max |torch|), "
             f"TOL {', '.join(f'{k} {v:g}' for k, v in TOL.items())}.")
    L.append("- Reference figures from the issue (this H200, PyTorch 2.11): ResNet-50 fp16 batch 1 = 4.3 ms eager, "
             "0.91 ms max-autotune; max-autotune compile 247 s cold, 11 s with a warm cache.\n")

    # Goals ---------------------------------------------------------------
    def kiln_lat(key):
        p = get(key, "kiln_perf")
        return p.get("latency_ms_median") if p and "error" not in p else None

    def torch_best(key, mode):
        """The warm process's latency record, else the cold one's (if it measured latency)."""
        for ph in ("torch_warm", "torch_cold"):
            t = get(key, ph, mode)
            if t and "error" not in t and t.get("latency_ms_median") is not None:
                return t
        return None

    goals = []

    def goal(name, target, value, ok, how):
        goals.append(f"| {name} | {target} | {value} | {ok} | {how} |")

    for model, lim in (("resnet50", 0.6), ("bert_base", 0.8)):
        key = f"{model}|b1|fp16"
        v = kiln_lat(key)
        p = get(key, "kiln_perf")
        goal(f"{model} fp16 batch 1 latency", f"<= {lim} ms",
             fmt_ms(v) + " ms" if v is not None else (cell_err(p) if p else "not measured"),
             ("yes" if v <= lim else "no") if v is not None else "not measured", "kiln perf (commands below)")
    for model in ("resnet50", "bert_base"):
        key = f"{model}|b32|fp16"
        v, t = kiln_lat(key), torch_best(key, "max-autotune")
        if v is not None and t:
            ratio = t["latency_ms_median"] / v
            goal(f"{model} fp16 batch 32 throughput vs torch.compile max-autotune", ">= 1.2x", f"{ratio:.2f}x "
                 f"({32e3 / v:.0f} vs {t['throughput_per_s']:.0f} items/s)", "yes" if ratio >= 1.2 else "no",
                 "kiln perf; torch-child max-autotune (warm process)")
        else:
            goal(f"{model} fp16 batch 32 throughput vs torch.compile max-autotune", ">= 1.2x", "not measured",
                 "not measured", "needs kiln perf and max-autotune at b32 fp16")
    # Warm start: ResNet-50 at batch 1, fp16 preferred.
    ws_cands = ("resnet50|b1|fp16", "resnet50|b1|bf16", "resnet50|b1|tf32", "resnet50|b1|fp32")
    ws_key = next((k for k in ws_cands if any((get(k, s) or {}).get("wall_s_each")
                                              for s in ("kiln_cache_start", "kiln_warm_start"))),
                  next((k for k in ws_cands if get(k, "kiln_cache_start") or get(k, "kiln_warm_start")), None))
    for step, label in (("kiln_cache_start", "through the cache: `kiln run MODEL.onnx --cache-dir` hit"),
                        ("kiln_warm_start", "explicit artifact: `kiln run ART.kiln`")):
        rec = get(ws_key, step) if ws_key else None
        tot, load = None, None
        if rec and rec.get("wall_s_each"):
            walls, loads, caches = rec["wall_s_each"], rec["load_ms_each"], rec.get("cache_each", [])
            if step == "kiln_cache_start":
                pairs = [(w, ld) for w, ld, c in zip(walls, loads, caches) if c == "hit"]
            else:
                pairs = list(zip(walls, loads))
            if pairs:
                tot = statistics.median(w for w, _ in pairs)
                load = statistics.median(ld for _, ld in pairs if ld is not None)
        prec = ws_key.split("|")[2] if ws_key else "-"
        goal(f"warm start, resnet50 b1 {prec}, {label}: process total", "<= 0.5 s",
             fmt_s(tot, 3) + " s" if tot is not None else (cell_err(rec) if rec else "not measured"),
             ("yes" if tot <= 0.5 else "no") if tot is not None else "not measured",
             "wall time of a fresh process, spawn to exit (median)")
        goal(f"warm start, resnet50 b1 {prec}, {label}: artifact load", "<= 50 ms",
             fmt_ms(load) + " ms" if load is not None else "not measured",
             ("yes" if load <= 50 else "no") if load is not None else "not measured", "load_ms of that process")
    cc_key = next((k for k in ("resnet50|b1|fp16", "resnet50|b1|bf16", "resnet50|b1|tf32", "resnet50|b1|fp32")
                   if get(k, "kiln_perf") and "error" not in get(k, "kiln_perf")), None)
    p = get(cc_key, "kiln_perf") if cc_key else None
    if p:
        tuning = p.get("tuning", "none")
        v = p["compile_ms"] / 1e3
        goal(f"cold compile, resnet50 b1 {cc_key.split('|')[2]}, tuning {tuning}", "<= 60 s (exhaustive)",
             f"{v:.1f} s", ("yes" if v <= 60 else "no") if tuning == "exhaustive" else
             f"not measured with exhaustive tuning ({'yes' if v <= 60 else 'no'} for {tuning})", "kiln perf compile_ms")
    else:
        goal("cold compile, resnet50 b1, exhaustive tuning", "<= 60 s", "not measured", "not measured", "-")
    L.append("## Goals\n")
    L.append("| goal | target | measured | reached | how |\n|---|---|---|---|---|")
    L.extend(goals)
    L.append("")

    # Latency tables ------------------------------------------------------
    cmodes = [m for m in modes]
    for model in [m for m in MODELS if any(k.startswith(m + "|") for k in cfg_keys)] + \
            sorted({k.split("|")[0] for k in cfg_keys} - set(MODELS)):
        keys = [k for k in cfg_keys if k.split("|")[0] == model]
        keys.sort(key=lambda k: (int(k.split("|")[1][1:]), PRECISIONS.index(k.split("|")[2])
                                 if k.split("|")[2] in PRECISIONS else 9))
        L.append(f"## {MODEL_TITLES.get(model, model)}\n")
        head = ["batch", "precision", "kiln ms", "kiln p90", "torch eager ms"]
        head += [f"torch.compile {m} ms" for m in cmodes]
        head += ["kiln/eager"] + [f"kiln/{m}" for m in cmodes]
        head += ["kiln items/s", "eager items/s"] + [f"{m} items/s" for m in cmodes]
        head += [f"throughput kiln/{m}" for m in cmodes] or ["throughput kiln/eager"]
        head += ["max abs diff kiln vs torch (max abs torch)", "within tol"]
        L.append("| " + " | ".join(head) + " |")
        L.append("|" + "|".join(["---"] * 2 + ["---:"] * (len(head) - 4) + ["---:", ":---:"]) + "|")
        io_rows, other_run = [], []
        for k in keys:
            _, b, prec = k.split("|")
            p = get(k, "kiln_perf")
            e = get(k, "torch_eager", "eager")
            kl = p.get("latency_ms_median") if p and "error" not in p else None
            row = [b[1:], prec]
            row.append(fmt_ms(kl) if kl is not None else (cell_err(p) if p else "-"))
            row.append(fmt_ms(p.get("latency_ms_p90")) if kl is not None else "-")
            el = e.get("latency_ms_median") if e and "error" not in e else None
            row.append(fmt_ms(el) if el is not None else (cell_err(e) if e else "-"))
            tl = {}
            for m in cmodes:
                t = torch_best(k, m)
                tl[m] = t["latency_ms_median"] if t else None
                if t:
                    row.append(fmt_ms(tl[m]) + ("" if get(k, "torch_warm", m) is t else
                                                " (cold process" + (", concurrent)" if t.get("concurrent", 1) > 1
                                                                    else ")")))
                else:
                    bad = get(k, "torch_warm", m) or get(k, "torch_cold", m)
                    row.append(cell_err(bad) if bad and "error" in bad else "-")
            def mark(t):
                """A dagger when the two figures of a ratio come from different runs (merged result files)."""
                if p and t and p.get("run_id") != t.get("run_id"):
                    other_run.append(1)
                    return " †"
                return ""

            tr = {m: torch_best(k, m) for m in cmodes}
            row.append(f"{kl / el:.2f}{mark(e)}" if kl and el else "-")
            for m in cmodes:
                row.append(f"**{kl / tl[m]:.2f}**{mark(tr[m])}" if kl and tl[m] else "-")
            bn = int(b[1:])
            row.append(f"{bn * 1e3 / kl:.0f}" if kl else "-")
            row.append(f"{bn * 1e3 / el:.0f}" if el else "-")
            for m in cmodes:
                row.append(f"{bn * 1e3 / tl[m]:.0f}" if tl[m] else "-")
            if cmodes:
                for m in cmodes:
                    row.append(f"**{tl[m] / kl:.2f}x**{mark(tr[m])}" if kl and tl[m] else "-")
            else:
                row.append(f"{el / kl:.2f}x{mark(e)}" if kl and el else "-")
            c = get(k, "compare")
            if c and "error" not in c:
                row += [f"{c['max_abs_diff']:.3g} ({c['max_abs_torch']:.3g})", "yes" if c["ok"] else "**NO**"]
            else:
                row += [cell_err(c) if c else "-", "-"]
            L.append("| " + " | ".join(row) + " |")
            io = [b[1:], prec, fmt_ms(kl) if kl else "-"]
            eio = e.get("latency_ms_median_host_copies") if e and "error" not in e else None
            io.append(fmt_ms(eio) if eio else "-")
            for m in cmodes:
                t = torch_best(k, m)
                io.append(fmt_ms(t.get("latency_ms_median_host_copies")) if t else "-")
            io.append(f"{kl / eio:.2f}" if kl and eio else "-")
            for m in cmodes:
                t = torch_best(k, m)
                v = t.get("latency_ms_median_host_copies") if t else None
                io.append(f"{kl / v:.2f}" if kl and v else "-")
            pe = e.get("pipelined_ms") if e and "error" not in e else None
            io.append(fmt_ms(pe) if pe else "-")
            for m in cmodes:
                t = torch_best(k, m)
                io.append(fmt_ms(t.get("pipelined_ms")) if t and t.get("pipelined_ms") else "-")
            io_rows.append("| " + " | ".join(io) + " |")
        L.append("")
        if other_run:
            L.append("† the two figures of this ratio come from different runs (merged result files), not one run.\n")
        L.append("With host copies on the torch side too (host fp32 inputs copied to the GPU, outputs `.cpu()`, "
                 "as every kiln run does), and torch's pipelined time per call (CUDA events around back-to-back "
                 "calls, no synchronization between them):\n")
        h2 = ["batch", "precision", "kiln ms", "torch eager + copies ms"] + [f"{m} + copies ms" for m in cmodes]
        h2 += ["kiln/(eager + copies)"] + [f"kiln/({m} + copies)" for m in cmodes]
        h2 += ["eager pipelined ms"] + [f"{m} pipelined ms" for m in cmodes]
        L.append("| " + " | ".join(h2) + " |")
        L.append("|" + "|".join(["---"] * 2 + ["---:"] * (len(h2) - 2)) + "|")
        L.extend(io_rows)
        L.append("")
        dev_rows = []
        for k in keys:
            _, b, prec = k.split("|")
            p = get(k, "kiln_perf")
            kd = p.get("latency_device_io_ms_median") if p and "error" not in p else None
            if kd is None:
                continue
            e = get(k, "torch_eager", "eager")
            el = e.get("latency_ms_median") if e and "error" not in e else None
            row = [b[1:], prec, fmt_ms(kd), fmt_ms(el) if el else "-"]
            tls = {m: (torch_best(k, m) or {}).get("latency_ms_median") for m in cmodes}
            row += [fmt_ms(tls[m]) if tls[m] else "-" for m in cmodes]
            row.append(f"{kd / el:.2f}" if el else "-")
            row += [f"**{kd / tls[m]:.2f}**" if tls[m] else "-" for m in cmodes]
            bn = int(b[1:])
            row += [f"**{tls[m] / kd:.2f}x**" if tls[m] else "-" for m in cmodes]
            dev_rows.append("| " + " | ".join(row) + " |")
        if dev_rows:
            L.append("Inputs and outputs in GPU memory on both sides: kiln `Session::run_device` "
                     "(`latency_device_io_ms_median` of `kiln perf`: device-to-device copies into and out of the "
                     "program, the CUDA graph, synchronized) against torch's latency with its inputs already on the "
                     "GPU (the first table's):\n")
            h3 = ["batch", "precision", "kiln device I/O ms", "torch eager ms"] + [f"{m} ms" for m in cmodes]
            h3 += ["kiln/eager"] + [f"kiln/{m}" for m in cmodes] + [f"throughput kiln/{m}" for m in cmodes]
            L.append("| " + " | ".join(h3) + " |")
            L.append("|" + "|".join(["---"] * 2 + ["---:"] * (len(h3) - 2)) + "|")
            L.extend(dev_rows)
            L.append("")

    # Compile / start table -------------------------------------------------
    L.append("## Compile and start\n")
    L.append("kiln cold compile: `compile_ms` of `kiln perf` (in process, fresh XDG_CACHE_HOME), and the wall "
             "time of the first `kiln run MODEL.onnx --cache-dir EMPTY` (a fresh process that compiles and "
             "caches: a cache miss). Warm start: wall time of a fresh process from spawn to exit (CUDA context, "
             "load, first run, outputs written), median of the runs, with the `load_ms` it reports. torch.compile: "
             "wall time of `torch.compile(...)` plus the first call in a fresh process whose "
             "TORCHINDUCTOR_CACHE_DIR is empty (cold) or the one the cold process filled (warm).\n")
    h3 = ["model", "batch", "precision", "kiln tuning", "kiln cold compile s (perf)", "kiln cold compile s (run, cache miss)",
          "kiln warm start s (`.kiln`)", "its load ms", "kiln warm start s (cache hit)", "its load ms",
          "kiln load ms (perf child)"]
    for m in cmodes:
        h3 += [f"torch.compile {m} cold s", f"{m} warm-cache s"]
    L.append("| " + " | ".join(h3) + " |")
    L.append("|" + "|".join(["---"] * 4 + ["---:"] * (len(h3) - 4)) + "|")
    concurrent_note = []
    for k in cfg_keys:
        model, b, prec = k.split("|")
        p = get(k, "kiln_perf")
        row = [model, b[1:], prec, (p or {}).get("tuning", "-")]
        row.append(fmt_s(p["compile_ms"] / 1e3, 1) if p and "error" not in p else (cell_err(p) if p else "-"))
        cs = get(k, "kiln_cache_start")
        if cs and cs.get("wall_s_each") and cs.get("cache_each", [None])[0] == "miss":
            row.append(fmt_s(cs["wall_s_each"][0], 1))
        else:
            row.append(cell_err(cs) if cs and "error" in cs else "-")
        ws = get(k, "kiln_warm_start")
        if ws and ws.get("wall_s_each"):
            row += [fmt_s(ws["total_s_median"], 3), fmt_ms(ws["load_ms_median"])]
        else:
            row += [cell_err(ws) if ws and "error" in ws else "-", "-"]
        hits = [(w, ld) for w, ld, c in zip(cs.get("wall_s_each", []), cs.get("load_ms_each", []),
                                            cs.get("cache_each", [])) if c == "hit"] if cs else []
        if hits:
            row += [fmt_s(statistics.median(w for w, _ in hits), 3),
                    fmt_ms(statistics.median(ld for _, ld in hits if ld is not None))]
        else:
            row += ["-", "-"]
        row.append(fmt_ms(p.get("load_ms")) if p and "error" not in p else "-")
        for m in cmodes:
            for ph in ("torch_cold", "torch_warm"):
                t = get(k, ph, m)
                if t and "error" not in t and t.get("compile_s") is not None:
                    mark = ""
                    if ph == "torch_cold" and t.get("concurrent", 1) > 1:
                        mark = f" (concurrent x{t['concurrent']})"
                        concurrent_note.append(m)
                    row.append(fmt_s(t["compile_s"], 1) + mark)
                else:
                    row.append(cell_err(t) if t else "-")
        L.append("| " + " | ".join(row) + " |")
    L.append("")
    if concurrent_note:
        L.append(f"Cold torch.compile times marked 'concurrent xN' ran with up to N configurations compiling at "
                 f"the same time on this machine's CPU cores and GPU ({', '.join(sorted(set(concurrent_note)))}): "
                 "each is longer than it would be alone, and max-autotune's kernel choices were benchmarked on a "
                 "shared GPU. The warm-cache processes ran alone, and so did every latency in the tables except one marked "
                 "'cold process, concurrent' (shown only when the warm process gave none).\n")

    # Commands ------------------------------------------------------------
    L.append("## Commands\n")
    L.append("Every figure above, with the command that produced it (run from the repo root; paths relative to it). "
             "torch-child is this script's own subcommand (bench/cuda_vs_torch.py) that builds the model from "
             "bench/make_gpu_models.py and times it.\n")
    steps_order = ["torch_eager", "kiln_perf", "kiln_warm_start", "compare", "kiln_cache_start", "torch_cold",
                   "torch_warm"]
    exports = [x for x in latest.values() if x.get("step") == "export"]
    if exports:
        L.append("### exports\n")
        for x in exports:
            L.append(f"- {x['key']}: " + (f"error: {x['error']}" if "error" in x else f"{x.get('wall_s', 0):.1f} s")
                     + f" — `{x.get('cmd', '-')}`")
        L.append("")
    for k in cfg_keys:
        L.append(f"### {k.replace('|', ' ')}\n")
        recs = sorted([x for (kk, _, _), x in latest.items() if kk == k],
                      key=lambda x: (steps_order.index(x["step"]) if x["step"] in steps_order else 99, x.get("mode", "")))
        for x in recs:
            s = x["step"] + (f" {x['mode']}" if x.get("mode") and x["step"] != "torch_eager" else "")
            if "error" in x:
                fig = f"error: {x['error']}"
            elif x["step"] == "kiln_perf":
                fig = (f"latency {fmt_ms(x.get('latency_ms_median'))} ms median, p90 {fmt_ms(x.get('latency_ms_p90'))}, "
                       f"{x.get('throughput_per_s', 0):.0f}/s; compile_ms {x.get('compile_ms', 0):.0f} (tuning "
                       f"{x.get('tuning', '-')}), load_ms {fmt_ms(x.get('load_ms'))}, first_run_ms "
                       f"{fmt_ms(x.get('first_run_ms'))}, peak {x.get('peak_bytes', 0) / 2**20:.0f} MiB")
            elif x["step"] in ("kiln_warm_start", "kiln_cache_start"):
                fig = (f"wall s {', '.join(f'{w:.3f}' for w in x.get('wall_s_each', []))}; load_ms "
                       f"{', '.join(fmt_ms(v) for v in x.get('load_ms_each', []))}; cache "
                       f"{', '.join(str(c) for c in x.get('cache_each', []))}")
            elif x["step"] == "compare":
                fig = (f"max abs diff {x['max_abs_diff']:.3g}, max abs torch {x['max_abs_torch']:.3g}, "
                       f"{'within' if x['ok'] else 'NOT within'} tolerance {x['tolerance']:g} (vs {x['against']}; "
                       f"kiln outputs from the kiln_warm_start run, torch's from the torch_eager run)")
            elif x["step"].startswith("torch"):
                parts = []
                if x.get("compile_s") is not None:
                    parts.append(f"compile {x['compile_s']:.1f} s")
                if x.get("latency_ms_median") is not None:
                    parts.append(f"latency {fmt_ms(x['latency_ms_median'])} ms median, p90 "
                                 f"{fmt_ms(x.get('latency_ms_p90'))}, with host copies "
                                 f"{fmt_ms(x.get('latency_ms_median_host_copies'))}, pipelined "
                                 f"{fmt_ms(x.get('pipelined_ms'))}")
                if x.get("concurrent", 1) > 1:
                    parts.append(f"concurrent with up to {x['concurrent'] - 1} other cold compile(s)")
                fig = "; ".join(parts) or "done"
            else:
                fig = ""
            L.append(f"- {s}: {fig}")
            L.append(f"  - `{x.get('cmd', '-')}`")
        L.append("")
    notes = [x for x in records if x.get("step") == "note"]
    for x in notes:
        L.append(f"- note: {x.get('error')}")
    return "\n".join(L) + "\n"


# ---------------------------------------------------------------- main
def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "torch-child":
        return torch_child(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                    help="cpu: a smoke test of the plumbing (kiln --target cpu, torch on the CPU; defaults: batch 1, "
                         "fp32, eager only, 5 runs, 1 warm-up, 1 warm start)")
    ap.add_argument("--kiln", help="kiln binary (default: build-cuda/tools/kiln/kiln for cuda, build/tools/kiln/kiln "
                                   "for cpu)")
    ap.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    ap.add_argument("--batches", nargs="+", type=int)
    ap.add_argument("--precisions", nargs="+", choices=PRECISIONS)
    ap.add_argument("--torch-modes", nargs="+", choices=("eager",) + COMPILED_MODES,
                    help="eager and torch.compile modes (default: eager max-autotune; 'default' is plain inductor)")
    ap.add_argument("--no-max-autotune", action="store_true", help="drop max-autotune from --torch-modes")
    ap.add_argument("--no-kiln", action="store_true", help="torch measurements only")
    ap.add_argument("--kiln-tuning", default=None,
                    help="kiln --tuning mode (heuristic|fast|exhaustive; default exhaustive on cuda, none on cpu); "
                         "left out, with a note, when this kiln has no --tuning")
    ap.add_argument("--kiln-extra", default="", help="more kiln compile options, one string (e.g. '--arch sm_90')")
    ap.add_argument("--runs", type=int, help="timed runs per latency (default 100)")
    ap.add_argument("--warmup", type=int, help="warm-up runs before them (default 20)")
    ap.add_argument("--warm-starts", type=int, help="fresh `kiln run` processes per warm start figure (default 3)")
    ap.add_argument("--cache-start-batches", nargs="*", type=int,
                    help="batches at which the cache-path start (a miss that compiles, then hits) is measured "
                         "(default: 1; give none to skip)")
    ap.add_argument("--cache-start-models", nargs="*", choices=MODELS, default=["resnet50"],
                    help="models at which the cache-path start is measured (default: resnet50, the warm-start goal's; "
                         "each costs one more kiln compile)")
    ap.add_argument("--parallel-compiles", type=int, default=1,
                    help="torch.compile cold compiles run at once (default 1; >1 runs them concurrently, the "
                         "report says so)")
    ap.add_argument("--step-timeout", type=float, default=300, help="seconds per step (default 300)")
    ap.add_argument("--compile-timeout", type=float, default=900,
                    help="seconds per torch.compile process (default 900)")
    ap.add_argument("--deadline", type=float,
                    help="seconds from the start after which no step runs (steps are cut to fit and the report "
                         "is written before it)")
    ap.add_argument("--work", default=str(REPO / "build-bench"),
                    help="models, inputs, artifacts, caches, outputs, logs (default build-bench, git-ignored; ONNX "
                         "files there are reused)")
    ap.add_argument("--step-logs", help="directory of the per-step logs (default WORK/logs)")
    ap.add_argument("--results", help="JSON lines, appended (default WORK/cuda_vs_torch.jsonl)")
    ap.add_argument("--report-out", default=None,
                    help="Markdown report (default bench/results/cuda_vs_torch.md; cpu: WORK/cuda_vs_torch_cpu.md)")
    ap.add_argument("--report-merge", action="store_true",
                    help="the live report covers every record in --results, earlier runs' too")
    ap.add_argument("--report", nargs="+", metavar="JSONL", help="only write the report from these result files")
    a = ap.parse_args()

    if a.report:
        out = Path(a.report_out or REPO / "bench" / "results" / "cuda_vs_torch.md")
        md = write_report(load_records(a.report), out)
        print(md)
        print(f"wrote {out}", file=sys.stderr)
        return 0

    cpu = a.device == "cpu"
    a.kiln = a.kiln or str(REPO / ("build" if cpu else "build-cuda") / "tools" / "kiln" / "kiln")
    a.batches = a.batches or ([1] if cpu else [1, 32])
    a.precisions = a.precisions or (["fp32"] if cpu else ["fp16", "fp32"])
    a.torch_modes = a.torch_modes or (["eager"] if cpu else ["eager", "max-autotune"])
    if a.no_max_autotune:
        a.torch_modes = [m for m in a.torch_modes if not m.startswith("max-autotune")]
    a.kiln_tuning = a.kiln_tuning if a.kiln_tuning is not None else (None if cpu else "exhaustive")
    a.runs = a.runs or (5 if cpu else 100)
    a.warmup = a.warmup if a.warmup is not None else (1 if cpu else 20)
    a.warm_starts = a.warm_starts or (1 if cpu else 3)
    a.cache_start_batches = [1] if a.cache_start_batches is None else a.cache_start_batches
    a.results = a.results or str(Path(a.work) / ("cuda_vs_torch_cpu.jsonl" if cpu else "cuda_vs_torch.jsonl"))
    a.report_out = a.report_out or str(Path(a.work) / "cuda_vs_torch_cpu.md" if cpu else
                                       REPO / "bench" / "results" / "cuda_vs_torch.md")
    Path(a.work).mkdir(parents=True, exist_ok=True)
    if not Path(a.kiln).exists():
        log(f"warning: {a.kiln} does not exist; every kiln step will fail")
    try:
        return main_run(a)
    except KeyboardInterrupt:
        log("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
