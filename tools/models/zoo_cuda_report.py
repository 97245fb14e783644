#!/usr/bin/env python3
"""One Markdown table from the result files of scripts/device/zoo_cuda_parallel.sh.

Usage: zoo_cuda_report.py OUT_DIR/zoo_fp32_g0.json OUT_DIR/zoo_fp16_g0.json ... [--out report.md]

Each file is a `zoo.py check --json` list for one precision (the precision is
read from the file name, zoo_<precision>_g<N>.json). Per model and precision:
PASS/FAIL, the max abs error (with, where a 16-bit run's precision check sampled the zoo's
input, that and the nodes it kept in fp32), kiln's median latency (`kiln perf`, batch as the
zoo's inputs), the host segments' share of it (issue 17's bound: 10%) and the
nodes on reference kernels. Models in no file are listed as not reached.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def load(paths: list[Path]) -> dict:
    """{model: {precision: result dict}}. Files of several calls merge in the order given (a
    name may have a prefix: call2_zoo_fp16_g0.json): a later result replaces an earlier one,
    except that a model the later call did not export never replaces a result."""
    out: dict = {}
    for p in paths:
        m = re.search(r"zoo_(fp32|fp16|bf16)_g\d+\.json$", p.name)
        if not m:
            raise SystemExit(f"{p}: expected a file named [PREFIX]zoo_<precision>_g<N>.json")
        for r in json.loads(p.read_text()):
            slot = out.setdefault(r["model"], {})
            if "not exported" in str(r.get("reason", "")) and m.group(1) in slot:
                continue
            slot[m.group(1)] = r
    return out


def check_note(r: dict) -> str:
    """' [check: the zoo's input (--check-input): kept 3 of 265 nodes]' where the precision check
    sampled the zoo's input (zoo.py check_input_args); '' for kiln's random samples or no check."""
    inputs = str(r.get("check_inputs") or "")
    if not inputs.startswith("the zoo's input"):
        return ""
    return f" [check: {inputs}" + (f", {r['check_kept']}" if r.get("check_kept") else "") + "]"


def cell(r: dict | None) -> str:
    if r is None:
        return "not reached"
    if r.get("result") != "PASS":
        return f"{r.get('result')}: {str(r.get('reason', ''))[:160]}{check_note(r)}"
    err = r.get("max_abs_err")
    return (f"PASS ({err:.1e})" if isinstance(err, (int, float)) else "PASS") + check_note(r)


def share(r: dict | None) -> str:
    if not r or r.get("result") != "PASS":
        return "-"
    if r.get("perf_error"):
        return f"perf: {r['perf_error'][:80]}"
    lat, s = r.get("latency_ms"), r.get("host_share")
    if lat is None:
        return "-"
    segs = r.get("host_segments") or []
    text = f"{lat:.3f} ms, host {100 * (s or 0):.1f}%"
    if segs:
        text += " (" + "; ".join(f"{x.get('segment')}: {x.get('ms', 0):.3f} ms" for x in segs[:3]) + \
                (f"; +{len(segs) - 3} more" if len(segs) > 3 else "") + ")"
    return text


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    import zoo

    res = load(a.files)
    names = [m.name for m in zoo.select(None)]
    rows = ["| model | fp32 (max abs err) | fp32 latency, host share | fp16 (max abs err) | fp16 latency, host share |",
            "| --- | --- | --- | --- | --- |"]
    counts = {"fp32": [0, 0], "fp16": [0, 0]}
    over = []
    for n in names:
        r = res.get(n, {})
        for p in counts:
            if p in r:
                counts[p][1] += 1
                counts[p][0] += r[p].get("result") == "PASS"
                if (r[p].get("host_share") or 0) > 0.10:
                    over.append(f"{n} {p}: {100 * r[p]['host_share']:.1f}%")
        rows.append(f"| {n} | {cell(r.get('fp32'))} | {share(r.get('fp32'))} | {cell(r.get('fp16'))} | "
                    f"{share(r.get('fp16'))} |")
    summary = "; ".join(f"{p}: {c[0]} of {c[1]} reached pass" for p, c in counts.items())
    summary += f"; {len(names)} models in the zoo"
    summary += "; host share over 10%: " + (", ".join(over) if over else "none")
    text = "\n".join(rows) + "\n\n" + summary + "\n"
    if a.out:
        a.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
