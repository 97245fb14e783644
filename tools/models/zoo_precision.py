"""The precision check of the zoo's 16-bit cuda runs (tools/models/zoo.py check).

kiln compiles a fp16 / bf16 cuda program through its precision check
(docs/cuda.md, "Precision check"), which samples random inputs unless given
some with --check-input. A model whose zoo input is representative data
(ZooModel.check_sample: the OCR models' text page) gives that input to the
check; this module builds those options from a run's kiln options and reads
back what the check kept, for the zoo's report.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from zoo_models import ZooModel


def option_value(args: list[str], flag: str) -> str | None:
    """The last value given to `flag` in a kiln command line (`--flag V` or `--flag=V`)."""
    value = None
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            value = args[i + 1]
        elif a.startswith(flag + "="):
            value = a[len(flag) + 1:]
    return value


def checks_precision(kiln_args: list[str]) -> bool:
    """Whether kiln options compile a 16-bit cuda program with its precision check on
    (docs/cuda.md, "Precision check"): the only compiles that read --check-input."""
    return ((option_value(kiln_args, "--target") or "cpu").startswith("cuda")
            and option_value(kiln_args, "--precision") in ("fp16", "bf16")
            and (option_value(kiln_args, "--precision-check") or "on") == "on")


def check_input_args(m: ZooModel, feeds: dict, files: dict, kiln_args: list[str]) -> tuple[list[str], str | None]:
    """(kiln options, what the precision check samples) for one check run. A 16-bit cuda run
    of a model whose zoo input is representative data (m.check_sample: an OCR page) gives
    that input to the check (`--check-input NAME=FILE` per float input, `files[NAME]`: the
    file given to --input), so the 16-bit program is checked on the data it is compared on rather than on
    kiln's uniform noise, on which a text recognizer's logits are small and flat. Others keep
    kiln's random samples. The description is None where no check runs (fp32, cpu, check off)."""
    import numpy as np

    if not checks_precision(kiln_args):
        return [], None
    if not m.check_sample:
        return [], "random (kiln's)"
    args = []
    for name, arr in feeds.items():
        if np.issubdtype(arr.dtype, np.floating):
            args += ["--check-input", f"{name}={files[name]}"]
    return args, "the zoo's input (--check-input)" if args else "random (kiln's)"


def precision_check_kept(notes, stderr: str) -> str | None:
    """'kept 265 of 265 nodes' / 'kept 0 of 265 nodes' from kiln's precision check note (the
    --json notes, or stderr where a run's specializing compile printed it); None without one."""
    for text in list(notes or []) + stderr.splitlines():
        hit = re.search(r"precision check \((?:fp16|bf16)\): kept (\d+) of (\d+) nodes", str(text))
        if hit:
            return f"kept {hit.group(1)} of {hit.group(2)} nodes"
        hit = re.search(r"precision check \((?:fp16|bf16)\): no node amplifies 16-bit rounding \((\d+) nodes",
                        str(text))
        if hit:
            return f"kept 0 of {hit.group(1)} nodes"
    return None


def inspected_check_kept(kiln: Path, artifact: str | None) -> str | None:
    """'kept N of M nodes' from `kiln inspect ARTIFACT --json`'s precision_check (the entry's first
    program: the run's, in the check's fresh cache); None when it holds no checked result."""
    if not artifact or not Path(artifact).exists():
        return None
    try:
        res = subprocess.run([str(kiln), "inspect", artifact, "--json"], capture_output=True, text=True, timeout=300)
        check = json.loads(res.stdout).get("precision_check") if res.returncode == 0 else None
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None
    if not isinstance(check, dict) or check.get("state") != "checked":
        return None
    return f"kept {len(check.get('kept') or [])} of {check.get('nodes')} nodes"


def check_text(r: dict) -> str:
    """'the zoo's input (--check-input): kept 3 of 265 nodes'; '-' where no precision check ran."""
    if not r.get("check_inputs"):
        return "-"
    return r["check_inputs"] + (f": {r['check_kept']}" if r.get("check_kept") else "")
