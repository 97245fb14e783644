"""kiln on a GPU through DLPack: torch (and CuPy) CUDA tensors in without a
host copy, kiln.DeviceArray out, ordering on the caller's stream, 8 threads.

Needs a kiln built with CUDA, an NVIDIA GPU and torch with CUDA; every test
here is SKIPPED otherwise (the reason says which is missing), never passed.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import kiln

torch = pytest.importorskip("torch", reason="SKIPPED: torch is not installed")

RTOL, ATOL = 1e-3, 1e-4  # cuda fp32 against the cpu target (docs/cuda.md)
SHAPE = (1, 3, 64, 64)


def _need_gpu() -> None:
    if not kiln.has_cuda():
        pytest.skip("SKIPPED: this kiln was built without CUDA support")
    if not torch.cuda.is_available():
        pytest.skip("SKIPPED: no CUDA device (torch.cuda.is_available() is False)")


@pytest.fixture(scope="module")
def sessions(demo, tmp_path_factory):
    """(cuda session, cpu session) of the demo model, static shapes."""
    _need_gpu()
    cache = tmp_path_factory.mktemp("cuda-cache")
    try:
        gpu = kiln.Session(demo, target="cuda", shapes={"image": list(SHAPE)}, cache_dir=cache)
    except kiln.Unsupported as e:  # e.g. no CUDA driver for kiln
        pytest.skip(f"SKIPPED: {e}")
    cpu = kiln.Session(demo, cache_dir=cache)
    return gpu, cpu


def reference(cpu: kiln.Session, x) -> np.ndarray:
    return cpu.run({"image": x.detach().cpu().numpy()})["probs"]


def test_device_tensors_in_and_out(sessions):
    gpu, cpu = sessions
    x = torch.rand(SHAPE, device="cuda")
    out = gpu.run({"image": x})
    probs = out["probs"]
    assert isinstance(probs, kiln.DeviceArray)
    assert probs.shape == (1, 10) and probs.dtype == "float32" and probs.device == x.device.index
    assert probs.__dlpack_device__() == (2, x.device.index)
    t = torch.from_dlpack(probs)
    assert t.is_cuda and t.data_ptr() == probs.data_ptr  # no copy out
    np.testing.assert_allclose(t.cpu().numpy(), reference(cpu, x), rtol=RTOL, atol=ATOL)
    np.testing.assert_array_equal(probs.numpy(), t.cpu().numpy())
    del out, probs
    torch.cuda.synchronize()
    assert float(t.sum()) == pytest.approx(1.0, abs=1e-4)  # the tensor keeps kiln's buffer alive


def test_preallocated_outputs(sessions):
    gpu, cpu = sessions
    x = torch.rand(SHAPE, device="cuda")
    y = torch.full((1, 10), -1.0, device="cuda")
    res = gpu.run({"image": x}, outputs={"probs": y})
    assert res["probs"] is y
    np.testing.assert_allclose(y.cpu().numpy(), reference(cpu, x), rtol=RTOL, atol=ATOL)


def _late_input(stream, base):
    """A zero tensor whose real values are written on `stream` behind a long queue of GPU work."""
    x = torch.zeros(SHAPE, device="cuda")
    torch.cuda.synchronize()
    with torch.cuda.stream(stream):
        m = torch.randn(2048, 2048, device="cuda")
        for _ in range(30):
            m = torch.tanh(m @ m)
        x.copy_(base + 0 * m[0, 0])
    return x


@pytest.mark.parametrize("how", ["explicit", "current", "explicit_and_current"])
def test_ordered_on_the_callers_stream(sessions, how):
    gpu, cpu = sessions
    base = torch.rand(SHAPE, device="cuda")
    want = reference(cpu, base)
    s = torch.cuda.Stream()
    x = _late_input(s, base)
    if how == "explicit":
        out = gpu.run({"image": x}, stream=s)
    elif how == "current":  # no stream given: the legacy default stream, which torch orders after its current one
        with torch.cuda.stream(s):
            out = gpu.run({"image": x})
    else:  # the given stream is torch's current one: torch's C exporter, no __dlpack__ exchange
        with torch.cuda.stream(s):
            out = gpu.run({"image": x}, stream=s)
    np.testing.assert_allclose(out["probs"].numpy(), want, rtol=RTOL, atol=ATOL)


def test_torch_fast_path_only_where_the_streams_agree(sessions, monkeypatch):
    """run() skips torch's Python __dlpack__(stream=) (about 25 us a tensor) exactly
    when torch's current stream is the one kiln waits for; otherwise the general
    DLPack exchange orders the tensor's writes."""
    import kiln._tensors as kt
    gpu, cpu = sessions
    taken = []
    real = kt.torch_capsule
    monkeypatch.setattr(kt, "torch_capsule", lambda x, st: taken.append(real(x, st) is not None) or real(x, st))
    x = torch.rand(SHAPE, device="cuda")
    y = torch.empty((1, 10), device="cuda")
    gpu.run({"image": x}, outputs={"probs": y})  # default stream on both sides
    assert taken == [True, True]
    s = torch.cuda.Stream()
    taken.clear()
    gpu.run({"image": x}, stream=s)  # torch's current stream is not s
    assert taken == [False]
    taken.clear()
    with pytest.raises(kiln.InvalidInput, match="'image'"):  # __dlpack__ refuses it: the general path's error
        gpu.run({"image": x.clone().requires_grad_()})
    assert taken == [False]
    np.testing.assert_allclose(y.cpu().numpy(), reference(cpu, x), rtol=RTOL, atol=ATOL)


def test_eight_threads_with_their_own_streams(sessions):
    gpu, cpu = sessions
    threads, runs = 8, 12
    inputs = [[torch.rand(SHAPE, device="cuda") for _ in range(runs)] for _ in range(threads)]
    torch.cuda.synchronize()
    want = [[reference(cpu, x) for x in row] for row in inputs]
    got = [[None] * runs for _ in range(threads)]
    errors = []
    start = threading.Barrier(threads)

    def worker(t: int) -> None:
        try:
            stream = torch.cuda.Stream()
            start.wait()
            with torch.cuda.stream(stream):
                for k in range(runs):
                    x = inputs[t][k] * 1.0  # written on this thread's stream
                    out = gpu.run({"image": x}, stream=stream)
                    got[t][k] = torch.from_dlpack(out["probs"]).cpu().numpy()
        except BaseException as e:
            errors.append(e)

    pool = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    for p in pool:
        p.start()
    for p in pool:
        p.join()
    assert not errors, errors
    for t in range(threads):
        for k in range(runs):
            np.testing.assert_allclose(got[t][k], want[t][k], rtol=RTOL, atol=ATOL, err_msg=f"thread {t} run {k}")


def test_binding_runs_on_what_the_bound_tensors_hold(sessions):
    gpu, cpu = sessions
    x = torch.rand(SHAPE, device="cuda")
    y = torch.full((1, 10), -1.0, device="cuda")
    stream = torch.cuda.Stream()
    b = gpu.bind({"image": x}, outputs={"probs": y}, stream=stream)
    assert b.outputs["probs"] is y
    for _ in range(3):
        with torch.cuda.stream(stream):
            x.copy_(torch.rand(SHAPE, device="cuda"))  # new data, written on the bound stream
        want = reference(cpu, x)
        assert b.run()["probs"] is y
        np.testing.assert_allclose(y.cpu().numpy(), want, rtol=RTOL, atol=ATOL)
    allocated = gpu.bind({"image": x})
    out = allocated.run()["probs"]
    assert isinstance(out, kiln.DeviceArray) and out is allocated.outputs["probs"]
    np.testing.assert_allclose(out.numpy(), reference(cpu, x), rtol=RTOL, atol=ATOL)
    del gpu  # the binding keeps the session
    np.testing.assert_allclose(allocated.run()["probs"].numpy(), reference(cpu, x), rtol=RTOL, atol=ATOL)
    with pytest.raises(kiln.InvalidInput, match="'image' has shape"):
        sessions[0].bind({"image": torch.rand(1, 3, 32, 64, device="cuda")})


def test_device_input_errors_name_the_input(sessions):
    gpu, _ = sessions
    with pytest.raises(kiln.InvalidInput, match="'image' has dtype float64"):
        gpu.run({"image": torch.rand(SHAPE, device="cuda", dtype=torch.float64)})
    with pytest.raises(kiln.InvalidInput, match="'image' has shape"):
        gpu.run({"image": torch.rand(1, 3, 32, 64, device="cuda")})
    with pytest.raises(kiln.InvalidInput, match="'image' is not contiguous"):
        gpu.run({"image": torch.rand(SHAPE, device="cuda").transpose(2, 3)})
    with pytest.raises(kiln.InvalidInput, match="'image'"):
        gpu.run({"image": torch.rand(SHAPE, device="cuda", requires_grad=True)})
    with pytest.raises(kiln.InvalidOption, match="stream"):
        gpu.run({"image": torch.rand(SHAPE, device="cuda")}, stream="fast")


def test_host_arrays_on_a_cuda_session(sessions):
    gpu, cpu = sessions
    x = np.random.default_rng(3).random(SHAPE, dtype=np.float32)
    out = gpu.run({"image": x})["probs"]
    assert isinstance(out, np.ndarray)
    np.testing.assert_allclose(out, cpu.run({"image": x})["probs"], rtol=RTOL, atol=ATOL)
    with pytest.raises(kiln.InvalidInput, match="host"):
        cpu.run({"image": torch.rand(SHAPE, device="cuda")})


def test_cupy_interop(sessions):
    cupy = pytest.importorskip("cupy", reason="SKIPPED: CuPy is not installed")
    gpu, cpu = sessions
    x = cupy.random.random(SHAPE, dtype=cupy.float32)
    out = gpu.run({"image": x}, stream=cupy.cuda.get_current_stream())
    y = cupy.from_dlpack(out["probs"])
    np.testing.assert_allclose(cupy.asnumpy(y), cpu.run({"image": cupy.asnumpy(x)})["probs"], rtol=RTOL, atol=ATOL)
