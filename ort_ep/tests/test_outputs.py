"""Compute writes kiln's outputs straight into the tensors ONNX Runtime
allocates (Session::run_into) when kiln can tell their shapes before the
run, and copies them after the run otherwise (a batch size first seen;
KILN_ORT_EP_COPY_OUTPUTS=1 forces the copy): both give ORT's CPU EP values.
The `fallback` option reaches kiln's SessionOptions; on the CPU device,
which runs everything on the host, it changes nothing."""

from __future__ import annotations

import os

import numpy as np
import pytest

import ep_models
from conftest import EP_NAME, assert_close, assignment, kiln_session, reference, session_options


@pytest.mark.parametrize("copy", ["0", "1"], ids=["in_place", "copied"])
def test_dynamic_batch_outputs_match_cpu_ep(lib, tmp_path, monkeypatch, copy):
    # Read when a partition is compiled (fill_io): set before the session.
    monkeypatch.setenv("KILN_ORT_EP_COPY_OUTPUTS", copy)
    path = tmp_path / "mlp.onnx"
    ep_models.dynamic_batch_mlp(path)
    sess = kiln_session(path, session_options("all"))
    assert sorted(assignment(sess)[EP_NAME]) == ["Add", "MatMul", "Relu", "Sigmoid"] or \
        sorted(assignment(sess)[EP_NAME]) == ["Gemm", "Relu", "Sigmoid"], assignment(sess)
    rng = np.random.default_rng(7)
    # Batch 2 twice (first: its program is compiled during the run, outputs
    # copied; then held: written in place), then 3, then 2 again.
    for rows in (2, 2, 3, 2):
        feeds = {"x": rng.standard_normal((rows, 4)).astype(np.float32)}
        names, refs = reference(path, feeds)
        got = sess.run(None, feeds)
        for name, g, w in zip(names, got, refs):
            assert_close(g, w, what=f"batch {rows}: {name}")


def test_static_outputs_written_in_place_match_run_after_run(lib, tmp_path):
    path = tmp_path / "conv.onnx"
    feeds = ep_models.conv_net(path)
    names, refs = reference(path, feeds)
    sess = kiln_session(path, session_options("all"))
    first = sess.run(None, feeds)
    for _ in range(3):  # ORT may hand the same buffers again: every run rewrites them
        got = sess.run(None, feeds)
        for name, g, w, f in zip(names, got, refs, first):
            assert_close(g, w, what=name)
            np.testing.assert_array_equal(g, f)


@pytest.mark.parametrize("fallback", ["host", "error"])
def test_fallback_option_on_cpu_device_runs_lacking_op_on_cpu_ep(lib, tmp_path, fallback):
    # The operator kiln lacks is declined by GetCapability (ORT's CPU EP runs
    # it), so no partition holds it; kiln's cpu target runs every node it
    # takes on the host, so fallback=error refuses nothing here. (On the GPU
    # device fallback=error makes a partition holding a node the cuda target
    # cannot lower fail the session, naming the node.)
    path = tmp_path / "roi.onnx"
    feeds = ep_models.with_op_kiln_lacks(path)
    names, refs = reference(path, feeds)
    sess = kiln_session(path, session_options("all", options={"fallback": fallback}))
    where = assignment(sess)
    assert where.get("CPUExecutionProvider") == ["MaxRoiPool"], where
    for name, got, want in zip(names, sess.run(None, feeds), refs):
        assert_close(got, want, what=f"fallback={fallback}: {name}")
