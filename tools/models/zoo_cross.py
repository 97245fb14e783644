#!/usr/bin/env python3
"""Cross-compiles zoo models for cuda without a GPU (issue 17: "every zoo model
that fits cross-compiles, fallback partitions included").

For each model exported in DIR (tools/models/zoo.py export), with the seeded
inputs of `zoo.py check` (their shapes fixed with --shape, and the value of
each scalar integer input a value guard needs with --value):
  kiln compile MODEL.onnx -o TMP.kiln --target cuda --arch sm_90 --tuning heuristic ...
then `kiln inspect TMP.kiln --json` for the partition: the host segments'
nodes and op types and the values copied across. A model whose compile fails
fails the run (exit 1); a table goes to stdout (and --report FILE.md).

Usage: zoo_cross.py --kiln BIN [--dir DIR] [--only NAME|FAMILY ...] [--timeout S]
                    [--max-mb MB] [--report FILE.md] [--json FILE]
--max-mb skips larger files ("that fits": the default 600 MB keeps every
model of the zoo but the largest decoders within a 2-core CI run's memory).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import zoo  # noqa: E402


def cross_one(m, directory: Path, kiln: str, timeout: float) -> dict:
    res = {"model": m.name, "result": "FAIL", "seconds": None, "host_segments": [], "reason": ""}
    path = directory / f"{m.name}.onnx"
    sess = zoo.ort_session(path)
    feeds = zoo.make_feeds(m, sess)
    with tempfile.TemporaryDirectory(prefix=f"kiln-cross-{m.name}-") as tmp:
        out = Path(tmp) / "m.kiln"
        cmd = [kiln, "compile", str(path), "-o", str(out), "--target", "cuda", "--arch", "sm_90", "--tuning",
               "heuristic", "--json"]
        for name, arr in feeds.items():
            if arr.ndim:
                cmd += ["--shape", f"{name}={'x'.join(str(d) for d in arr.shape)}"]
        code, stdout, stderr, secs = zoo.run_kiln(cmd, timeout)
        if code is not None and code != 0 and "--value" in stderr:
            # Value guards: compile the values the seeded inputs hold.
            for name, arr in feeds.items():
                if arr.size == 1 and np.issubdtype(arr.dtype, np.integer):
                    cmd += ["--value", f"{name}={int(arr.reshape(-1)[0])}"]
            code, stdout, stderr, secs = zoo.run_kiln(cmd, timeout)
        res["seconds"] = secs
        if code != 0:
            res["reason"] = "timeout" if code is None else f"exit {code}: {zoo.kiln_error_line(stderr)}"
            return res
        code, stdout, stderr, _ = zoo.run_kiln([kiln, "inspect", str(out), "--json"], 60)
        if code != 0:
            res["reason"] = f"inspect exit {code}: {zoo.kiln_error_line(stderr)}"
            return res
        facts = json.loads(stdout)
        for s in facts.get("segments") or []:
            if s["device"] == "host":
                res["host_segments"].append({"ops": [n["op"] for n in s["nodes"]],
                                             "copies": len(s["copies_to_host"]) + len(s["copies_to_device"])})
        res["result"] = "PASS"
    return res


def summary(r: dict) -> str:
    """'3 segments, 7 nodes (Einsum x3, TopK x4), 9 copies'; 'none'."""
    segs = r["host_segments"]
    if not segs:
        return "none"
    ops: dict[str, int] = {}
    for s in segs:
        for op in s["ops"]:
            ops[op] = ops.get(op, 0) + 1
    hist = ", ".join(f"{op} x{n}" if n > 1 else op for op, n in sorted(ops.items(), key=lambda kv: -kv[1]))
    return (f"{len(segs)} segment(s), {sum(ops.values())} node(s) ({hist}), "
            f"{sum(s['copies'] for s in segs)} copies")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--dir", type=Path, default=zoo.DEFAULT_DIR)
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--max-mb", type=float, default=600)
    ap.add_argument("--report", type=Path)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    rows = []
    for m in zoo.select(a.only):
        path = a.dir / f"{m.name}.onnx"
        if not path.exists():
            continue
        if path.stat().st_size > a.max_mb * 1e6:
            rows.append({"model": m.name, "result": "SKIP", "reason": f"{path.stat().st_size / 1e6:.0f} MB > --max-mb",
                         "host_segments": [], "seconds": None})
            continue
        t0 = time.time()
        try:
            r = cross_one(m, a.dir, a.kiln, a.timeout)
        except Exception as e:  # a harness error is a row, not a crash
            r = {"model": m.name, "result": "FAIL", "reason": f"harness: {type(e).__name__}: {e}"[:300],
                 "host_segments": [], "seconds": time.time() - t0}
        rows.append(r)
        print(f"{r['model']}: {r['result']} {r.get('seconds') or 0:.1f} s {r['reason']} host: {summary(r)}", flush=True)
    lines = ["| model | result | compile s | host segments (op types; boundary copies) | reason |", "|---|---|---|---|---|"]
    for r in rows:
        hs = summary(r)
        secs = f"{r['seconds']:.1f}" if r.get("seconds") else "-"
        lines.append(f"| {r['model']} | {r['result']} | {secs} | {hs} | {r['reason']} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if a.report:
        a.report.write_text(text)
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))
    return 0 if all(r["result"] != "FAIL" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
