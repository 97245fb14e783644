"""EP options are validated when the session is created: each bad one is an
ONNX Runtime error naming the option (never a crash, never a silent default),
and a model with an operator kiln lacks runs with ORT's CPU EP taking that node."""

from __future__ import annotations

import numpy as np
import pytest

import ep_models
from conftest import EP_NAME, assert_close, assignment, kiln_session, ort, reference, session_options

BAD_OPTIONS = [
    ({"precision": "fp64"}, ["precision", "fp64"]),
    ({"precision": "fp16"}, ["precision"]),  # the cpu target computes in fp32 only
    ({"cache_dir": ""}, ["cache_dir", "empty"]),
    ({"tuning": "fast"}, ["tuning"]),  # cuda only
    ({"tuning": "slow"}, ["tuning", "slow"]),
    ({"device_id": "1"}, ["device_id"]),
    ({"device_id": "gpu0"}, ["device_id", "gpu0"]),
    ({"fallback": "maybe"}, ["fallback", "maybe"]),
    ({"shapes": "x"}, ["shapes"]),
    ({"shapes": "x=1xAx3"}, ["shapes", "A"]),
    ({"dims": "batch=0"}, ["dims"]),
    ({"load_model_path": ""}, ["load_model_path", "empty"]),
    ({"save_model_path": ""}, ["save_model_path", "empty"]),
    ({"reference_nodes": "sometimes"}, ["reference_nodes"]),
    ({"precison": "fp32"}, ["precison", "unknown"]),
]


@pytest.mark.parametrize("options,words", BAD_OPTIONS, ids=[next(iter(o)) + "=" + next(iter(o.values()))
                                                             for o, _ in BAD_OPTIONS])
def test_bad_option_is_an_error_naming_it(lib, tmp_path, options, words):
    path = tmp_path / "m.onnx"
    ep_models.conv_net(path)
    with pytest.raises(Exception) as e:
        kiln_session(path, session_options("all", options=options))
    msg = str(e.value)
    for w in words:
        assert w in msg, msg


def test_missing_load_model_path_names_the_file(lib, tmp_path):
    path = tmp_path / "m.onnx"
    ep_models.conv_net(path)
    with pytest.raises(Exception) as e:
        kiln_session(path, session_options("all", options={"load_model_path": str(tmp_path / "no.kiln")}))
    assert "no.kiln" in str(e.value), str(e.value)


def test_operator_kiln_lacks_runs_on_cpu_ep_and_the_rest_on_kiln(lib, tmp_path):
    path = tmp_path / "roi.onnx"
    feeds = ep_models.with_op_kiln_lacks(path)
    names, refs = reference(path, feeds)
    for level in ("all", "off"):
        sess = kiln_session(path, session_options(level))
        where = assignment(sess)
        assert where.get("CPUExecutionProvider") == ["MaxRoiPool"], where
        assert sorted(where[EP_NAME]) == ["Conv", "Mul", "Relu", "Relu"], where
        for oname, got, want in zip(names, sess.run(None, feeds), refs):
            assert_close(got, want, what=f"{level}: {oname}")


def test_load_model_path_with_two_partitions_names_the_option_and_count(lib, tmp_path):
    # save_model_path of a one-partition model gives a real .kiln to point at.
    one = tmp_path / "conv.onnx"
    ep_models.conv_net(one)
    art = tmp_path / "conv.kiln"
    kiln_session(one, session_options("all", options={"save_model_path": str(art)}))
    assert art.is_file()
    two = tmp_path / "roi.onnx"
    ep_models.with_op_kiln_lacks(two)
    with pytest.raises(Exception) as e:
        kiln_session(two, session_options("all", options={"load_model_path": str(art)}))
    assert "load_model_path" in str(e.value) and "2 partitions" in str(e.value), str(e.value)


def test_save_then_load_model_path_loads_without_compiling(lib, tmp_path, capfd):
    path = tmp_path / "conv.onnx"
    feeds = ep_models.conv_net(path)
    names, refs = reference(path, feeds)
    art = tmp_path / "conv.kiln"
    kiln_session(path, session_options("all", options={"save_model_path": str(art)}))
    so = session_options("all", options={"load_model_path": str(art), "cache_dir": str(tmp_path / "empty")})
    so.log_severity_level = 1
    capfd.readouterr()
    sess = kiln_session(path, so)
    log = capfd.readouterr().err
    assert "(load_model_path; no compile" in log, log[-2000:]
    assert "compiled" not in log.replace("no compile", ""), log[-2000:]
    for oname, got, want in zip(names, sess.run(None, feeds), refs):
        assert_close(got, want, what=oname)


def test_contrib_dynamic_quantize_lstm_stays_with_ort_unless_reference_nodes_claim(lib, tmp_path):
    # com.microsoft DynamicQuantizeLSTM runs on kiln's reference kernels only: ORT's CPU EP keeps it by
    # default; reference_nodes=claim hands it to kiln, whose result matches ORT's.
    from small_models import dq_lstm_model

    path = dq_lstm_model(tmp_path / "dq_lstm.onnx")
    feeds = {"x": np.random.RandomState(3).uniform(-1, 1, (6, 1, 5)).astype(np.float32)}
    names, refs = reference(path, feeds)
    where = assignment(kiln_session(path, session_options("all")))
    assert where.get("CPUExecutionProvider") == ["DynamicQuantizeLSTM"] and EP_NAME not in where, where
    sess = kiln_session(path, session_options("all", options={"reference_nodes": "claim"}))
    assert assignment(sess).get(EP_NAME) == ["DynamicQuantizeLSTM"], assignment(sess)
    # ORT is an exact oracle here only with VNNI: without it (AVX2-only CPUs) MLAS's uint8 x int8 products go
    # through vpmaddubsw, whose int16 pair sums saturate, while kiln's int32 products are exact (8.6e-3 apart
    # on y, whose values are 0.03-0.3; tests/cli/test_contrib_ops.py says the same).
    rtol, atol = (1e-3, 1e-4) if _int8_exact_cpu() else (0.0, 2e-2)
    for oname, got, want in zip(names, sess.run(None, feeds), refs):
        assert_close(got, want, rtol=rtol, atol=atol, what=oname)


def _int8_exact_cpu() -> bool:
    """True when this CPU has VNNI (ORT's int8 matmuls are then exact)."""
    from pathlib import Path

    flags = next((ln for ln in Path("/proc/cpuinfo").read_text().splitlines() if ln.startswith("flags")), "")
    return any(f in flags.split() for f in ("avx512_vnni", "avx_vnni"))
