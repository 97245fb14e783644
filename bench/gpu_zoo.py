#!/usr/bin/env python3
"""The GPU zoo benchmark (issue #20, build item 2): kiln's cuda target with
device I/O against torch.compile on models outside the dev set, fp16, batch 1
and 32, measured in one device call.

Models come from the zoo's recipes (tools/models/zoo_models.py: torchvision
and transformers architectures, seed-0 random weights, exported as their owners
export them); the decoder LMs run a prefill of --seq tokens without a KV cache
(GPT-2 and the zoo's tiny Llama config, logits out). Each model runs in its own
worker process (`gpu_zoo.py worker`):

  1. export: the recipe writes MODEL.onnx (dynamic batch / sequence; float32);
     the very torch module it exports is rebuilt (same seeds) for PyTorch.
  2. torch.compile(module.half(), mode=--torch-mode) per batch: the wall time
     of the compile call and the first call ("torch compile s", cold: an empty
     TORCHINDUCTOR_CACHE_DIR per worker). Workers do this at once (phase 1), so
     these times are under --workers concurrent compiles (the report says so).
  3. after the barrier (every worker compiled, or --barrier-s passed), one
     worker at a time holds the GPU lock (phase 2): per batch, a kiln.Session
     (target cuda, precision fp16, the batch's shapes, an empty cache: the
     constructor's wall time is "kiln compile s", stats.compile_ms is kept too), bound once to torch CUDA tensors
     (Session.bind: Session::run_device, no host copy; float32 inputs and
     outputs, 16-bit inside), then the latency of both sides: --warmup calls,
     then --runs calls in two alternating blocks per side, each call timed by
     the wall clock around call + torch.cuda.synchronize(); the median. The
     outputs are compared (max |kiln - torch| / max |torch|, first output).
A record per (model, batch) is written as soon as it exists; a failure is
recorded with its phase and first line, and the worker goes on with what it
can still measure. The parent kills what is left at --budget-s and writes the
report from the records: a Markdown table (kiln/torch per row, geometric
means), a PNG chart and the JSON, with the torch, torchvision, transformers,
kiln and GPU versions.

Usage:
  GPU (scripts/device/gpu_zoo.sh runs it):
    gpu_zoo.py run --out DIR [--models ...] [--batches 1 32] [--budget-s 540]
  CPU dry run (kiln target cpu fp32, torch eager on the CPU: torch 1.13 has no
  torch.compile; two small models, batches 1 and 2, few runs):
    gpu_zoo.py run --dry-run --out /tmp/gz
  Report from records (merging calls; a later record of a row wins):
    gpu_zoo.py report RECORDS.jsonl [...] --out PREFIX   (writes PREFIX.md/.png/.json)
This is a benchmark: it asserts nothing and exits 0 unless its arguments are wrong.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools" / "models"))

# name -> (family, title). Zoo registry names, plus the decoder prefill recipes of PREFILL below.
MODELS = {
    "mobilenet_v2": ("cnn-depthwise", "MobileNetV2"),
    "efficientnet_b0": ("cnn-depthwise", "EfficientNet-B0"),
    "resnext50_32x4d": ("cnn-grouped", "ResNeXt-50 32x4d"),
    "regnet_y_400mf": ("cnn-grouped", "RegNetY-400MF"),
    "convnext_tiny": ("convnext", "ConvNeXt-Tiny"),
    "densenet121": ("dense", "DenseNet-121"),
    "ssdlite320_mobilenet_v3_large": ("detector", "SSDlite320 MobileNetV3"),
    "fcn_resnet50": ("segmenter", "FCN-ResNet50"),
    "vit_b_16": ("vit", "ViT-B/16"),
    "swin_t": ("vit", "Swin-T"),
    "distilbert": ("encoder", "DistilBERT"),
    "roberta": ("encoder", "RoBERTa-base"),
    "gpt2_prefill": ("decoder", "GPT-2 (4 layers)"),
    "llama_prefill": ("decoder", "Llama (zoo tiny config)"),
}
DRY_MODELS = ["mobilenet_v2", "distilbert"]
# Decoder prefill: (transformers model class, config class, overrides); the zoo's configs, no KV cache.
PREFILL = {
    "gpt2_prefill": ("GPT2LMHeadModel", "GPT2Config", {"n_layer": 4, "use_cache": False}),
    "llama_prefill": ("LlamaForCausalLM", "LlamaConfig", None),  # None: zoo_models._LLAMA
}
IMAGE_SIZE = {"ssdlite320_mobilenet_v3_large": 320}
SINGLE_IMAGE = {"ssdlite320_mobilenet_v3_large"}  # torchvision's detector export takes one image [3,H,W]


def now() -> float:
    return time.time()


class Recorder:
    """Appends JSON records to one file per worker (a killed worker keeps what it wrote) and a status line."""

    def __init__(self, work: Path, model: str):
        self.path = work / "records" / f"{model}.jsonl"
        self.status = work / "status" / f"{model}.txt"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.status.parent.mkdir(parents=True, exist_ok=True)
        self.model = model

    def phase(self, text: str) -> None:
        self.current = text
        self.status.write_text(text)
        print(f"[{time.strftime('%H:%M:%S')}] {self.model}: {text}", flush=True)

    def record(self, rec: dict) -> None:
        rec = {"model": self.model, "ts": now(), **rec}
        with self.path.open("a") as f:
            f.write(json.dumps(rec) + "\n")


def first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:300] if text else ''}"


# ---------------------------------------------------------------- models and inputs
def export(name: str, path: Path) -> dict:
    """Writes `name`'s ONNX file with its zoo recipe (or the prefill recipe); the exporter's record."""
    import zoo_models as zm

    if name in PREFILL:
        import torch

        module = prefill_module(name)
        vocab = module.inner.config.vocab_size
        names = ("input_ids", "attention_mask")
        feeds = zm.text_inputs(vocab, 2, 16)([(n, "tensor(int64)", ["b", "s"]) for n in names],
                               __import__("numpy").random.default_rng(0))
        axes = {n: {0: "batch_size", 1: "sequence_length"} for n in names}
        axes["logits"] = {0: "batch_size", 1: "sequence_length"}
        return zm._export(module, tuple(torch.from_numpy(feeds[n]) for n in names), path, names, ["logits"],
                          axes, prefer_torchscript=True)
    return zm.models()[name].build(path)


def export_static(name: str, path: Path, batch: int) -> None:
    """`name`'s torchvision module exported with a batch-`batch` example and no dynamic axes: what an owner
    exports for a fixed batch when the dynamic export does not run at that batch (torch 2.11's dynamo export
    of torchvision's ViT-B/16 traced with batch 1 bakes that 1 into a Reshape of its attention)."""
    import torch
    import zoo_models as zm

    size = IMAGE_SIZE.get(name, 224)
    zm._export(torch_module(name), (torch.rand(batch, 3, size, size),), path, ["input"], ["output"], {})


def prefill_module(name: str):
    import zoo_models as zm

    cls, cfg, overrides = PREFILL[name]
    overrides = dict(zm._LLAMA, use_cache=False) if overrides is None else overrides
    return zm.hf_text_module(cls, cfg, overrides, ("input_ids", "attention_mask"), output="logits")


def torch_module(name: str):
    """The torch module the recipe exports (eval, float32, CPU)."""
    if name in PREFILL:
        return prefill_module(name)
    import zoo_models as zm

    return zm.models()[name].module()


def make_inputs(onnx_path: Path, name: str, batch: int, seq: int, vocab: int) -> dict:
    """name -> numpy array for every graph input (the zoo's generators, seeded per model and batch);
    token ids in [0, vocab)."""
    import numpy as np
    import onnx

    import zoo_models as zm

    g = onnx.load(str(onnx_path), load_external_data=False).graph
    init = {i.name for i in g.initializer}
    specs = []
    for i in g.input:
        if i.name in init:
            continue
        t = i.type.tensor_type
        type_str = "tensor(" + {1: "float", 10: "float16", 7: "int64", 6: "int32", 9: "bool"}[t.elem_type] + ")"
        specs.append((i.name, type_str, [d.dim_param or d.dim_value for d in t.shape.dim]))
    rng = np.random.default_rng(zm.seed_of(f"{name}/b{batch}"))
    if specs[0][0] == "input_ids":
        if not vocab:
            raise ValueError(f"{name}: no vocabulary size (the torch module did not build)")
        return zm.text_inputs(vocab, batch, seq)(specs, rng)
    size = IMAGE_SIZE.get(name, 224)
    shape = [3, size, size] if name in SINGLE_IMAGE else [batch, 3, size, size]
    return zm.image_inputs(shape)(specs, rng)


# ---------------------------------------------------------------- timing
def time_calls(fn, sync, runs: int) -> list:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        sync()
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def alternating(fns: dict, sync, runs: int, warmup: int) -> dict:
    """Warm-up, then `runs` calls per side in two alternating blocks (ABAB); side -> median ms, p90 ms."""
    for fn in fns.values():
        time_calls(fn, sync, warmup)
    lat = {k: [] for k in fns}
    for _ in range(2):
        for k, fn in fns.items():
            lat[k] += time_calls(fn, sync, max(1, runs // 2))
    res = {}
    for k, v in lat.items():
        v.sort()
        res[k] = {"median_ms": statistics.median(v), "p90_ms": v[int(0.9 * (len(v) - 1))], "runs": len(v)}
    return res


# ---------------------------------------------------------------- the worker (one model)
def worker(a: argparse.Namespace) -> int:
    work = Path(a.work)
    rec = Recorder(work, a.model)
    dry = a.dry_run
    rec.phase("start")
    import torch

    versions = {"torch": torch.__version__, "python": sys.version.split()[0]}
    for lib in ("torchvision", "transformers", "onnx"):
        try:
            versions[lib] = __import__(lib).__version__
        except Exception:  # noqa: BLE001 - informative only
            pass
    dev = torch.device("cpu" if dry else "cuda")
    if not dry:
        torch.zeros(1, device=dev)
        versions.update(gpu=torch.cuda.get_device_name(0), cuda=torch.version.cuda)
    rec.record({"kind": "versions", **versions})
    onnx_path = work / "models" / f"{a.model}.onnx"
    onnx_path.parent.mkdir(parents=True, exist_ok=True)
    batches = [1] if a.model in SINGLE_IMAGE else a.batches
    for b in a.batches:
        if b not in batches:
            rec.record({"kind": "row", "batch": b, "skipped": f"the recipe takes one image [3,H,W] (torchvision's "
                                                             f"detector export); batch {b} not applicable"})
    rec.phase("export")
    t0 = time.perf_counter()
    try:
        if not onnx_path.exists():
            tmp = onnx_path.with_suffix(".tmp.onnx")
            info = export(a.model, tmp)
            os.replace(tmp, onnx_path)
        else:
            info = {"exporter": "kept from an earlier run"}
        rec.record({"kind": "export", "export_s": time.perf_counter() - t0, **{k: info.get(k) for k in
                    ("exporter", "exporter_note", "recipe")}})
    except Exception as e:  # noqa: BLE001 - the model is then skipped, with the reason
        traceback.print_exc()
        for b in batches:
            rec.record({"kind": "row", "batch": b, "error": f"export: {first_line(e)}"})
        (work / "barrier" / a.model).touch()
        return 0

    # Phase 1: torch.compile per batch (concurrently with the other workers).
    rec.phase("torch compile")
    dtype = torch.float32 if dry else torch.float16
    sides = {}
    try:
        module = torch_module(a.model).to(device=dev, dtype=dtype)
    except Exception as e:  # noqa: BLE001
        traceback.print_exc()
        module = None
        torch_err = f"torch module: {first_line(e)}"
    config = getattr(getattr(module, "inner", None), "config", None)
    vocab = getattr(config, "vocab_size", 0)
    for b in batches:
        st = sides.setdefault(b, {})
        try:
            host = make_inputs(onnx_path, a.model, b, a.seq, vocab)
            st["host"] = host
            if module is None:
                raise RuntimeError(torch_err)
            targs = tuple(torch.from_numpy(v).to(dev).to(dtype) if v.dtype.kind == "f" else torch.from_numpy(v).to(dev)
                          for v in host.values())
            fn = module
            with torch.inference_mode():
                t0 = time.perf_counter()
                if not dry:
                    # dynamic=False: each batch gets its own static-shape graph, as kiln's program is static.
                    fn = torch.compile(module, mode=a.torch_mode, dynamic=False)
                out = fn(*targs)
                if not dry:
                    torch.cuda.synchronize()
                st["torch_compile_s"] = time.perf_counter() - t0
                out = out[0] if isinstance(out, (tuple, list)) else out
                st["torch_out"] = out.detach().float().cpu().numpy()
                del out  # CUDA-graph outputs are overwritten by the next call
            st["torch_fn"], st["torch_args"] = fn, targs
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            st["torch_error"] = f"torch {'eager' if dry else a.torch_mode}: {first_line(e)}"
        rec.record({"kind": "torch_compile", "batch": b,
                    **{k: st[k] for k in ("torch_compile_s", "torch_error") if k in st}})
    if a.kiln_compile == "phase1" and not a.no_kiln:
        # kiln compiles here too, alongside the other workers (its fp16 precision check runs the model on the
        # host's reference kernels at the compiled batch: tens of seconds at batch 32, too long to do one
        # model at a time); phase 2 then loads the cache entry.
        for b in batches:
            st = sides[b]
            rec.phase(f"kiln compile b{b}")
            try:
                host = st.get("host") or make_inputs(onnx_path, a.model, b, a.seq, vocab)
                try:
                    s, fields = kiln_session(a, onnx_path, b, host)
                except Exception as e:  # noqa: BLE001
                    # A dynamic export that cannot run at this batch (a batch-1 trace baked into a Reshape):
                    # that batch's own static export, as its owner would make for a fixed batch.
                    if "cannot reshape" not in str(e) or b == 1 or a.model in PREFILL or a.model in SINGLE_IMAGE:
                        raise
                    traceback.print_exc()
                    rec.phase(f"static export b{b}")
                    st["onnx"] = onnx_path.with_name(f"{a.model}_b{b}.onnx")
                    export_static(a.model, st["onnx"], b)
                    st["export_note"] = (f"batch {b}: the dynamic export cannot run at it ({first_line(e)[:120]}); "
                                         f"exported again with a batch-{b} example, static")
                    rec.phase(f"kiln compile b{b}")
                    s, fields = kiln_session(a, st["onnx"], b, host)
                del s
                st["kiln_compiled"] = fields
            except Exception as e:  # noqa: BLE001
                traceback.print_exc()
                st["kiln_error"] = f"kiln: {first_line(e)}"
            rec.record({"kind": "kiln_compile", "batch": b, **st.get("kiln_compiled", {}),
                        **({"kiln_error": st["kiln_error"]} if "kiln_error" in st else {})})
    (work / "barrier" / a.model).touch()

    # Phase 2: wait for the barrier, then take the GPU lock and measure.
    rec.phase("waiting for the barrier")
    while not (work / "barrier" / "GO").exists():
        time.sleep(0.2)
    rec.phase("waiting for the GPU lock")
    with open(work / "gpu.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        # A worker stuck while it holds the GPU would starve the others: it ends itself after --hold-s
        # (the lock goes with the process), recording where it was.
        def give_up():
            rec.record({"kind": "cut", "phase": rec.current,
                        "reason": f"held the GPU over {a.hold_s:.0f} s (in '{rec.current}'): ended"})
            os._exit(3)

        watchdog = threading.Timer(a.hold_s, give_up)
        watchdog.daemon = True
        watchdog.start()
        for b in batches:
            running = sum(1 for f in (work / "status").glob("*.txt") if not (work / "barrier" / f.stem).exists())
            measure(a, rec, module, onnx_path, b, sides.get(b, {}), dev, running, vocab)
        watchdog.cancel()
        fcntl.flock(lock, fcntl.LOCK_UN)
    rec.phase("done")
    return 0


def kiln_session(a, onnx_path: Path, batch: int, host: dict):
    """kiln.Session for one batch through this worker's cache directory for it: the first call compiles
    (an empty cache), a later one loads the entry. Returns (session, record fields): a compile's wall
    time, compile_ms, the precision check's share (kiln.inspect of the entry) and notes; a load's time."""
    import kiln

    shapes = {k: list(v.shape) for k, v in host.items()}
    cache = Path(a.work) / "kcache" / f"{a.model}_b{batch}"
    opts = dict(target="cpu", precision="fp32") if a.dry_run else dict(target="cuda", precision="fp16")
    t0 = time.perf_counter()
    s = kiln.Session(str(onnx_path), cache_dir=str(cache), shapes=shapes, **opts)
    wall = time.perf_counter() - t0
    if s.stats.cache == "hit":
        return s, {"kiln_load_s": wall}
    f = {"kiln_compile_s": s.stats.compile_ms / 1e3, "kiln_session_s": wall, "kiln_cache": s.stats.cache,
         "kiln_notes": list(s.stats.notes)[:6]}
    try:
        check = kiln.inspect(s.stats.artifact_path).get("precision_check") or {}
        if check.get("ms") is not None:
            f["kiln_check_s"] = check["ms"] / 1e3
    except Exception as e:  # noqa: BLE001 - informative only
        f["kiln_check_note"] = first_line(e)
    return s, f


class NoKiln(Exception):
    """--no-kiln: the row has no kiln side (not an error)."""


def measure(a, rec: Recorder, module, onnx_path: Path, batch: int, st: dict, dev, compiles_running: int,
            vocab: int) -> None:
    """Phase 2 for one batch: kiln compile, bind, latency of both sides, output comparison; one record."""
    import numpy as np
    import torch

    dry = a.dry_run
    row = {"kind": "row", "batch": batch, "torch_mode": "eager (dry run)" if dry else a.torch_mode,
           "compiles_running": compiles_running}
    if not a.no_kiln:
        import kiln

        row["kiln_version"] = kiln.__version__
    for k in ("torch_compile_s", "torch_error"):
        if k in st:
            row[k] = st[k]
    row.update(st.get("kiln_compiled", {}))
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    fns = {}
    rec.phase(f"kiln {'load' if 'kiln_compiled' in st else 'compile'} b{batch}")
    try:
        if a.no_kiln:
            raise NoKiln()
        if st.get("kiln_error"):
            raise RuntimeError(st["kiln_error"])
        host = st.get("host") or make_inputs(onnx_path, a.model, batch, a.seq, vocab)
        s, fields = kiln_session(a, st.get("onnx", onnx_path), batch, host)
        row.update(fields)
        if "export_note" in st:
            row["export_note"] = st["export_note"]
        if dry:
            fns["kiln"] = lambda: s.run(host)
            kout = s.run(host)
        else:
            dev_in = {k: torch.from_numpy(v).to(dev) for k, v in host.items()}
            bound = s.bind(dev_in, stream=torch.cuda.current_stream())
            fns["kiln"] = bound.run
            kout = {k: torch.from_dlpack(v).float().cpu().numpy() for k, v in bound.run().items()}
        row["kiln_out"] = list(kout.keys())[0]
        kfirst = np.asarray(list(kout.values())[0], dtype=np.float32)
    except NoKiln:
        kfirst = None
    except Exception as e:  # noqa: BLE001
        traceback.print_exc()
        row["kiln_error"] = st.get("kiln_error") or f"kiln: {first_line(e)}"
        kfirst = None
    if "torch_fn" in st:
        fn, targs = st["torch_fn"], st["torch_args"]

        def call():
            with torch.inference_mode():
                fn(*targs)

        fns["torch"] = call
    rec.phase(f"timing b{batch}")
    if fns:
        try:
            res = alternating(fns, sync, a.runs, a.warmup)
            for k, v in res.items():
                row.update({f"{k}_ms": v["median_ms"], f"{k}_p90_ms": v["p90_ms"], "runs": v["runs"]})
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            row["timing_error"] = f"timing: {first_line(e)}"
    tout = st.get("torch_out")
    if kfirst is not None and tout is not None:
        if kfirst.shape == tout.shape:
            scale = float(np.abs(tout).max()) or 1.0
            row["max_rel_diff"] = float(np.abs(kfirst - tout).max()) / scale
        else:
            row["diff_note"] = f"output shapes differ: kiln {list(kfirst.shape)}, torch {list(tout.shape)}"
    rec.record(row)


# ---------------------------------------------------------------- the parent
def run(a: argparse.Namespace) -> int:
    t_start = now()
    work = Path(a.work)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    for sub in ("records", "status", "barrier"):
        d = work / sub
        d.mkdir(parents=True, exist_ok=True)
        for f in d.iterdir():
            f.unlink()
    models = a.models or (DRY_MODELS if a.dry_run else list(MODELS))
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        raise SystemExit(f"gpu_zoo: unknown model(s): {', '.join(unknown)} (known: {', '.join(MODELS)})")
    logs = out / "logs"
    logs.mkdir(exist_ok=True)
    procs = {}
    # OMP_NUM_THREADS: the workers' CPU work (BatchNorm calibration, export) would oversubscribe the cores.
    env = dict(os.environ, PYTHONUNBUFFERED="1", TORCHINDUCTOR_COMPILE_THREADS=str(a.compile_threads),
               OMP_NUM_THREADS=str(a.compile_threads))
    for i, m in enumerate(models):
        if len(procs) >= a.workers:
            break
        cmd = [sys.executable, __file__, "worker", "--model", m, "--work", str(work), "--seq", str(a.seq),
               "--runs", str(a.runs), "--warmup", str(a.warmup), "--torch-mode", a.torch_mode,
               "--hold-s", str(a.hold_s), "--kiln-compile", a.kiln_compile, "--batches", *map(str, a.batches)]
        cmd += ["--dry-run"] if a.dry_run else []
        cmd += ["--no-kiln"] if a.no_kiln else []
        wenv = dict(env, TORCHINDUCTOR_CACHE_DIR=str(work / "inductor" / m))
        log = open(logs / f"{m}.log", "w")
        procs[m] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=wenv, start_new_session=True)
    print(f"gpu_zoo: {len(procs)} workers: {' '.join(procs)}", flush=True)
    go = False
    deadline = t_start + a.budget_s
    while any(p.poll() is None for p in procs.values()) and now() < deadline:
        at_barrier = sum(1 for m, p in procs.items() if (work / "barrier" / m).exists() or p.poll() is not None)
        if not go and (at_barrier >= len(procs) or now() > t_start + a.barrier_s):
            (work / "barrier" / "GO").touch()
            go = True
            print(f"gpu_zoo: barrier passed at {now() - t_start:.0f} s", flush=True)
        time.sleep(0.5)
    cut = {}
    for m, p in procs.items():
        if p.poll() is None:
            st = (work / "status" / f"{m}.txt")
            cut[m] = st.read_text() if st.exists() else "not started"
            os.killpg(p.pid, signal.SIGKILL)
    for m, p in procs.items():
        p.wait()
    records = []
    for m in procs:
        f = work / "records" / f"{m}.jsonl"
        if f.exists():
            records += [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
    for m, phase in cut.items():
        records.append({"model": m, "kind": "cut", "ts": now(), "phase": phase,
                        "reason": f"cut by the {a.budget_s:.0f} s budget while in '{phase}'"})
    for m in models:
        if m not in procs:
            records.append({"model": m, "kind": "cut", "ts": now(), "phase": "not started",
                            "reason": f"not started (--workers {a.workers})"})
    meta = {"kind": "meta", "ts": now(), "dry_run": a.dry_run, "batches": a.batches, "seq": a.seq, "runs": a.runs,
            "warmup": a.warmup, "workers": len(procs), "budget_s": a.budget_s, "barrier_s": a.barrier_s,
            "kiln_compile": a.kiln_compile, "torch_mode": a.torch_mode, "no_kiln": a.no_kiln,
            "wall_s": now() - t_start, "command": " ".join(sys.argv)}
    records.append(meta)
    rec_path = out / "gpu_zoo.jsonl"
    rec_path.write_text("".join(json.dumps(r) + "\n" for r in records))
    report([rec_path], out / "gpu_zoo")
    print(f"gpu_zoo: done in {now() - t_start:.0f} s; {rec_path}", flush=True)
    return 0


# ---------------------------------------------------------------- kiln perf --profile
def profile(a: argparse.Namespace) -> int:
    """`kiln perf MODEL.onnx --target cuda --precision fp16 --shape ... --profile` for each MODEL:BATCH (the
    model exported by an earlier `run` into --work, else exported now); stdout and stderr to
    OUT/profile_MODEL_bBATCH.txt."""
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    for item in a.items:
        name, batch, *flags = item.split(":")
        static = "static" in flags
        path = Path(a.work) / "models" / (f"{name}_b{batch}.onnx" if static else f"{name}.onnx")
        try:
            if not path.exists():
                path.parent.mkdir(parents=True, exist_ok=True)
                if static:  # as `run` re-exports a batch the dynamic export cannot run at
                    export_static(name, path, int(batch))
                else:
                    export(name, path)
            feeds = make_inputs(path, name, int(batch), a.seq, 2)
            shapes = [x for k, v in feeds.items() for x in ("--shape", f"{k}={'x'.join(map(str, v.shape))}")]
            cmd = [a.kiln, "perf", str(path), "--target", a.target, "--precision", a.precision, "--runs", str(a.runs),
                   *shapes, "--profile"]
            t0 = time.perf_counter()
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
            text = f"$ {' '.join(cmd)}\n# exit {p.returncode}, {time.perf_counter() - t0:.1f} s\n{p.stdout}\n{p.stderr}"
        except Exception as e:  # noqa: BLE001 - recorded in the file, the next item goes on
            text = f"{item}: {first_line(e)}\n{traceback.format_exc()}"
        (out / f"profile_{name}_b{batch}.txt").write_text(text)
        print(text[:3000], flush=True)
    return 0


# ---------------------------------------------------------------- report
def geomean(xs: list) -> float | None:
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def collect(paths: list) -> tuple[list, dict, list, dict]:
    """(rows keyed (model, batch), later records winning; per-model info; meta records; max-autotune rows
    keyed (model, batch)). A row whose torch_mode is max-autotune goes to the last dict (its own column);
    every row remembers the file it came from (`_file`), so a column measured in another call is marked."""
    rows, info, metas, autotune = {}, {}, [], {}
    for p in paths:
        for line in Path(p).read_text().splitlines():
            if not line.strip():
                continue
            r = json.loads(line)
            if r["kind"] == "meta":
                metas.append(r)
            elif r["kind"] == "row":
                r["_file"] = str(p)
                key = (r["model"], r["batch"])
                if r.get("torch_mode") == "max-autotune":
                    autotune[key] = r
                    if key not in rows and r.get("kiln_ms") is not None:  # its kiln side, until a reduce-overhead row
                        rows[key] = {**r, "torch_ms": None, "torch_compile_s": None}
                    continue
                rows[key] = r
            elif r["kind"] == "cut":
                info.setdefault(r["model"], {})["cut"] = r["reason"]
            elif r["kind"] in ("torch_compile", "kiln_compile"):  # phase 1: what a row cut later still shows
                phase1 = info.setdefault(r["model"], {}).setdefault("phase1", {})
                phase1.setdefault(r["batch"], {}).update({k: v for k, v in r.items() if k not in ("model", "ts")})
            else:
                info.setdefault(r["model"], {}).update({k: v for k, v in r.items() if k not in ("model", "ts")})
    return rows, info, metas, autotune


def fmt(x, d=3) -> str:
    return "—" if x is None else f"{x:.{d}f}"


def kiln_when(meta: dict) -> str:
    if meta.get("kiln_compile", "locked") == "locked":
        return "one model at a time holding the GPU"
    return (f"in phase 1 alongside the other workers' compiles ({meta.get('workers', '?')} at once: its tuning "
            f"timed candidates on a shared GPU), the timed session loaded from that cache entry")


def compile_cell(r: dict) -> str:
    """kiln's compile wall time, with the precision check's share when known."""
    cell = fmt(r.get("kiln_session_s"), 1)
    return cell + (f" (check {r['kiln_check_s']:.1f})" if r.get("kiln_check_s") is not None else "")


def fmt_e(x) -> str:
    return "—" if x is None else f"{x:.1e}"


def report(paths: list, prefix: Path) -> str:
    rows, info, metas, autotune = collect(paths)
    meta = next((m for m in reversed(metas) if not m.get("no_kiln")), metas[-1] if metas else {})
    batches = meta.get("batches") or sorted({b for _, b in rows})
    v = next((i for i in info.values() if "torch" in i), {})
    kv = next((r.get("kiln_version") for r in rows.values() if r.get("kiln_version")), "?")
    lines = [f"# GPU zoo: kiln (cuda, fp16, device I/O) against torch.compile"
             f"{' — DRY RUN (CPU: kiln cpu fp32, torch eager)' if meta.get('dry_run') else ''}", "",
             f"GPU {v.get('gpu', '?')}, CUDA {v.get('cuda', '?')}; torch {v.get('torch', '?')}, torchvision "
             f"{v.get('torchvision', '?')}, transformers {v.get('transformers', '?')}, Python {v.get('python', '?')}; "
             f"kiln {kv}. LMs: sequence {meta.get('seq', '?')}. Latency: median of {meta.get('runs', '?')} calls per "
             f"side after {meta.get('warmup', '?')} warm-up, wall clock around call + synchronize, two alternating "
             f"blocks per side, one worker at a time on the GPU. kiln compile: the kiln.Session constructor's wall "
             f"time (cold, empty cache; in brackets its fp16 precision check; compile_ms is in the JSON), "
             f"{kiln_when(meta)}; "
             f"torch compile: compile call + first call, cold inductor cache, {meta.get('workers', '?')} workers "
             f"compiling at once.", "",
             "torch ms is reduce-overhead's, measured in the same call as kiln's; max-autotune ms, where "
             "measured, comes from its own call when marked † (issue #20 allows that for max-autotune alone: "
             "about 4 min of cold compile per configuration). kiln/torch is against the faster of the two.", "",
             "| model | family | batch | kiln ms | torch ms | max-autotune ms | kiln/torch | kiln compile s "
             "| torch compile s | max-autotune compile s | max rel diff | note |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    ratios = {b: [] for b in batches}
    chart = []
    for m, (fam, title) in MODELS.items():
        mi = info.get(m, {})
        if not mi and not any(k[0] == m for k in rows):
            continue
        for b in batches:
            r = rows.get((m, b))
            notes = []
            if r is None:
                r = {**mi.get("phase1", {}).get(b, {}), "cut": mi.get("cut", "no record")}
            for k in ("cut", "skipped", "error", "kiln_error", "torch_error", "timing_error", "diff_note", "export_note"):
                if r.get(k):
                    notes.append(r[k])
            if r.get("compiles_running"):
                notes.append(f"timed while {r['compiles_running']} other worker(s) still compiled")
            if "TorchScript" in (mi.get("exporter") or "") and "torch 2" in mi.get("exporter", ""):
                failed = "failed" in (mi.get("exporter_note") or "")
                how = "dynamo failed" if failed else "the recipe, as optimum does"
                notes.append(f"TorchScript exporter ({how})")
            ma = autotune.get((m, b), {})
            ma_ms = ma.get("torch_ms")
            dagger = " †" if ma_ms is not None and ma.get("_file") != r.get("_file") else ""
            if ma.get("torch_error"):
                notes.append(ma["torch_error"])
            best = min((x for x in (r.get("torch_ms"), ma_ms) if x), default=None)
            ratio = r["kiln_ms"] / best if r.get("kiln_ms") and best else None
            if ratio:
                ratios[b].append(ratio)
                chart.append((f"{title} b{b}", ratio))
            lines.append(f"| {title} | {fam} | {b} | {fmt(r.get('kiln_ms'))} | {fmt(r.get('torch_ms'))} | "
                         f"{fmt(ma_ms)}{dagger} | "
                         f"{fmt(ratio, 2)} | {compile_cell(r)} | {fmt(r.get('torch_compile_s'), 1)} | "
                         f"{fmt(ma.get('torch_compile_s'), 1)}{dagger if ma.get('torch_compile_s') else ''} | "
                         f"{fmt_e(r.get('max_rel_diff'))} | "
                         f"{'; '.join(n.replace('|', '/') for n in notes)} |")
    lines.append("")
    all_r = [x for b in batches for x in ratios[b]]
    for b in batches:
        g = geomean(ratios[b])
        lines.append(f"- geometric mean kiln/torch, batch {b}: **{fmt(g, 2)}** over {len(ratios[b])} models")
    lines.append(f"- geometric mean kiln/torch, all rows: **{fmt(geomean(all_r), 2)}** over {len(all_r)} rows "
                 f"(goal of issue #20: <= 0.70, no row > 1.00; rows above 1.00: "
                 f"{sum(1 for x in all_r if x > 1.0)})")
    for mt in metas:
        side = f" ({mt.get('torch_mode', '?')}, torch side only)" if mt.get("no_kiln") else ""
        lines += ["", f"Command{side}: `{mt.get('command', '')}`; wall {mt.get('wall_s', 0):.0f} s."]
    text = "\n".join(lines) + "\n"
    prefix = Path(prefix)
    prefix.with_suffix(".md").write_text(text)
    prefix.with_suffix(".json").write_text(json.dumps({"rows": [rows[k] for k in sorted(rows, key=str)],
                                                       "max_autotune_rows": [autotune[k] for k in
                                                                             sorted(autotune, key=str)],
                                                       "models": info, "meta": meta}, indent=1, default=str))
    chart_png(chart, prefix.with_suffix(".png"), "dry run" if meta.get("dry_run") else f"{v.get('gpu', '')}")
    print(text)
    return text


def chart_png(chart: list, path: Path, where: str) -> None:
    """Horizontal bars of kiln/torch per row (log scale, 1.0 marked); nothing without matplotlib."""
    if not chart:
        return
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("gpu_zoo: no matplotlib: no chart")
        return
    fig, ax = plt.subplots(figsize=(8, 0.3 * len(chart) + 1.2))
    labels, vals = zip(*chart)
    ax.barh(range(len(vals)), vals, color=["#c0392b" if x > 1 else "#2e86c1" for x in vals])
    ax.set_yticks(range(len(vals)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.axvline(1.0, color="k", lw=0.8)
    ax.axvline(0.7, color="g", lw=0.8, ls="--")
    ax.set_xlabel("kiln / torch.compile latency (lower is better; dashed: goal 0.7)")
    ax.set_title(f"GPU zoo, fp16, {where}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


# ---------------------------------------------------------------- command line
def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("run", "worker"):
        p = sub.add_parser(name)
        p.add_argument("--work", default="/tmp/gpu_zoo_work")
        p.add_argument("--batches", type=int, nargs="+", default=None)
        p.add_argument("--seq", type=int, default=None, help="LM sequence length (default 128; dry run 16)")
        p.add_argument("--runs", type=int, default=None, help="timed calls per side (default 200; dry run 10)")
        p.add_argument("--warmup", type=int, default=None, help="warm-up calls per side (default 30; dry run 2)")
        p.add_argument("--torch-mode", default="reduce-overhead")
        p.add_argument("--dry-run", action="store_true")
        p.add_argument("--no-kiln", action="store_true",
                       help="torch side only (a max-autotune call whose rows merge with an earlier call's kiln rows: "
                            "kiln's compiles would share the GPU with the autotuner's timings)")
        p.add_argument("--hold-s", type=float, default=120, help="longest a worker may hold the GPU lock")
        p.add_argument("--kiln-compile", choices=("phase1", "locked"), default="phase1",
                       help="phase1: kiln compiles alongside the other workers (default); locked: one at a time, "
                            "holding the GPU (its tuning undisturbed; about 50-80 s per model at batch 32)")
    w = sub.choices["worker"]
    w.add_argument("--model", required=True)
    r = sub.choices["run"]
    r.add_argument("--out", required=True)
    r.add_argument("--models", nargs="+")
    r.add_argument("--workers", type=int, default=16)
    r.add_argument("--compile-threads", type=int, default=2, help="TORCHINDUCTOR_COMPILE_THREADS per worker")
    r.add_argument("--budget-s", type=float, default=540)
    r.add_argument("--barrier-s", type=float, default=240, help="timing starts then even if compiles still run")
    pp = sub.add_parser("profile")
    pp.add_argument("items", nargs="+", help="MODEL:BATCH, or MODEL:BATCH:static for that batch's static export")
    pp.add_argument("--kiln", required=True, help="the kiln command line")
    pp.add_argument("--work", default="/tmp/gpu_zoo_work")
    pp.add_argument("--out", required=True)
    pp.add_argument("--seq", type=int, default=128)
    pp.add_argument("--runs", type=int, default=100)
    pp.add_argument("--timeout", type=float, default=240)
    pp.add_argument("--target", default="cuda")
    pp.add_argument("--precision", default="fp16")
    rp = sub.add_parser("report")
    rp.add_argument("records", nargs="+")
    rp.add_argument("--out", required=True, help="prefix of the .md/.png/.json written")
    a = ap.parse_args()
    if a.cmd == "report":
        report(a.records, Path(a.out))
        return 0
    if a.cmd == "profile":
        return profile(a)
    dry = a.dry_run
    a.batches = a.batches or ([1, 2] if dry else [1, 32])
    a.seq = a.seq or (16 if dry else 128)
    a.runs = a.runs or (10 if dry else 200)
    a.warmup = a.warmup or (2 if dry else 30)
    return worker(a) if a.cmd == "worker" else run(a)


if __name__ == "__main__":
    sys.exit(main())
