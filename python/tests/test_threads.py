"""Several Python threads running one Session give the same outputs as runs
one at a time (kiln::Session::run is thread-safe; the GIL is released while
it runs, so the threads really overlap)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import kiln
from conftest import model_path

THREADS = 4
RUNS_PER_THREAD = 6


@pytest.mark.parametrize("name,input_name,shape", [
    ("demo", "image", (1, 3, 64, 64)),
    ("mobilenet_v3_small", None, None),
])
def test_threads_share_one_session(name, input_name, shape, tmp_path):
    s = kiln.Session(model_path(name), cache_dir=tmp_path)
    info = s.inputs[0]
    input_name = input_name or info.name
    shape = shape or tuple(d if isinstance(d, int) else 1 for d in info.shape)
    rng = np.random.default_rng(7)
    requests = [rng.random(shape, dtype=np.float32) for _ in range(THREADS * RUNS_PER_THREAD)]
    expected = [s.run({input_name: x}) for x in requests]
    results = [None] * len(requests)
    errors = []
    start = threading.Barrier(THREADS)

    def worker(t: int) -> None:
        try:
            start.wait()
            for k in range(t, len(requests), THREADS):
                results[k] = s.run({input_name: requests[k]})
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    assert not errors, errors
    for k, (got, want) in enumerate(zip(results, expected)):
        assert list(got) == list(want)
        for out in want:
            np.testing.assert_array_equal(got[out], want[out], err_msg=f"request {k}, output {out!r}")
    # Different inputs give different outputs (the comparison above is not vacuous).
    first = list(expected[0])[0]
    assert not np.array_equal(expected[0][first], expected[1][first])
    print(f"{name}: {len(requests)} runs on {THREADS} threads in {wall * 1e3:.0f} ms")
