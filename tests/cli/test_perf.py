"""`kiln perf`: the JSON fields the issue names, and --profile (per-operator
time of the compiled program)."""

from __future__ import annotations

import pytest


def test_perf_json_has_every_field(kiln, demo_onnx):
    res = kiln("perf", demo_onnx, "--runs", "3", "--warmup", "1", "--threads", "1", "--json")
    assert res.rc == 0, res.describe()
    obj = res.json()
    for key in ("compile_ms", "load_ms", "first_run_ms", "latency_ms_median", "latency_ms_p90",
                "throughput_per_s", "peak_bytes", "reload_ms"):
        assert key in obj, f"{key} missing\n{res.describe()}"
    assert obj["compile_ms"] > 0 and obj["load_ms"] > 0 and obj["reload_ms"] > 0, res.describe()
    assert obj["latency_ms_min"] <= obj["latency_ms_median"] <= obj["latency_ms_p90"], res.describe()
    assert obj["runs"] == 3 and obj["batch"] == 1 and obj["threads"] == 1, res.describe()
    assert obj["throughput_per_s"] == pytest.approx(1000.0 / obj["latency_ms_median"], rel=1e-6)
    assert obj["peak_bytes"] > obj["arena_bytes"] > 0, res.describe()
    assert "profile" not in obj, res.describe()


def test_perf_profile_times_every_node_by_operator(kiln, demo_onnx, tmp_path):
    art = tmp_path / "demo.kiln"
    res = kiln("perf", demo_onnx, "--runs", "4", "--warmup", "1", "--profile", "--keep", art, "--json")
    assert res.rc == 0, res.describe()
    prof = res.json()["profile"]
    assert prof["runs"] == 4
    # Every main-graph node of the compiled program is timed exactly once per run.
    inspect = kiln("inspect", art, "--json")
    assert inspect.rc == 0, inspect.describe()
    node_count = inspect.json()["nodes"]
    assert sum(o["nodes"] for o in prof["by_op"]) == node_count, (prof, node_count)
    # demo.onnx's convolutions are lowered to oneDNN on the cpu target.
    ops = {o["op"] for o in prof["by_op"]}
    assert "kiln.cpu::Conv" in ops, ops
    node_ms = sum(o["ms"] for o in prof["by_op"])
    assert 0 < node_ms <= prof["total_ms"] * 1.001, prof
    assert sum(o["percent"] for o in prof["by_op"]) == pytest.approx(100.0 * node_ms / prof["total_ms"], rel=1e-6)
    times = [n["ms"] for n in prof["top_nodes"]]
    assert times == sorted(times, reverse=True) and len(times) == min(15, node_count), prof


def test_perf_profile_table_in_text_mode(kiln, demo_onnx):
    res = kiln("perf", demo_onnx, "--runs", "2", "--warmup", "0", "--profile")
    assert res.rc == 0, res.describe()
    assert "profile (mean of 2 runs" in res.stdout and "slowest nodes:" in res.stdout, res.describe()
    assert "kiln.cpu::Conv" in res.stdout, res.describe()
