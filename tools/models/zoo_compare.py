"""Comparing kiln's outputs with ONNX Runtime's for the model zoo.

Element-wise: |kiln - ort| <= atol + rtol * |ort| for every element (NaN only
where ORT has NaN, infinities equal), same shape and dtype; integer and bool
outputs exactly. Sets: the outputs of one group (say boxes [N,4], labels [N],
scores [N] after NMS) are the columns of N rows; the rows are matched one to
one (bipartite matching, each pair within the same tolerance) in whatever
order either side returns them, so a different but equally valid order of
detections is not a failure while a missing, extra or wrong one is.
"""

from __future__ import annotations

import numpy as np

RTOL = 1e-3
ATOL = 1e-4


def _close(got: np.ndarray, ref: np.ndarray, rtol: float, atol: float) -> np.ndarray:
    """Element-wise pass mask (float64 inputs of one shape)."""
    both_nan = np.isnan(got) & np.isnan(ref)
    same_inf = np.isinf(got) & np.isinf(ref) & (np.sign(got) == np.sign(ref))
    with np.errstate(invalid="ignore"):
        ok = np.abs(got - ref) <= atol + rtol * np.abs(ref)
    return ok | both_nan | same_inf


def _abs_err(got: np.ndarray, ref: np.ndarray) -> float:
    finite = np.isfinite(got) & np.isfinite(ref)
    if not finite.any():
        return 0.0
    return float(np.abs(got[finite] - ref[finite]).max())


def compare_tensor(name: str, got: np.ndarray, ref: np.ndarray, rtol=RTOL, atol=ATOL) -> tuple[float, list[str]]:
    """(max abs error, problems) for one output compared element-wise."""
    if got.shape != ref.shape:
        return float("inf"), [f"{name}: shape {list(got.shape)} != ORT {list(ref.shape)}"]
    if got.dtype != ref.dtype:
        return float("inf"), [f"{name}: dtype {got.dtype} != ORT {ref.dtype}"]
    if ref.size == 0:
        return 0.0, [f"{name}: empty output (ORT's too): nothing to compare"]
    if not np.issubdtype(ref.dtype, np.floating):
        wrong = got != ref
        if wrong.any():
            idx = tuple(int(i) for i in np.argwhere(wrong)[0])
            return float("inf"), [f"{name}: {int(wrong.sum())} of {ref.size} elements differ; first at "
                                  f"{list(idx)}: kiln {got[idx]} vs ORT {ref[idx]}"]
        return 0.0, []
    g, r = got.astype(np.float64), ref.astype(np.float64)
    ok = _close(g, r, rtol, atol)
    err = _abs_err(g, r)
    if ok.all():
        return err, []
    bad = ~ok
    with np.errstate(invalid="ignore"):
        excess = np.where(bad, np.nan_to_num(np.abs(g - r) - (atol + rtol * np.abs(r)), nan=np.inf), -np.inf)
    worst = np.unravel_index(int(np.argmax(excess)), r.shape)
    return max(err, 0.0) if np.isfinite(g).all() == np.isfinite(r).all() else float("inf"), [
        f"{name}: {int(bad.sum())} of {r.size} elements outside rtol {rtol:g} / atol {atol:g}; max abs err "
        f"{err:.3g}; worst at {[int(i) for i in worst]}: kiln {g[worst]:.9g} vs ORT {r[worst]:.9g}"]


def _rows(arrays: list[np.ndarray]) -> np.ndarray:
    """The group's outputs as N rows of float64 columns."""
    n = arrays[0].shape[0]
    return np.concatenate([a.reshape(n, int(np.prod(a.shape[1:], dtype=np.int64))).astype(np.float64)
                           for a in arrays], axis=1)


def _max_matching(adj: list[list[int]], n_right: int) -> list[int]:
    """Maximum bipartite matching (augmenting paths); match[left] = right or -1."""
    match_r = [-1] * n_right
    match_l = [-1] * len(adj)

    def augment(u: int, seen: list[bool]) -> bool:
        for v in adj[u]:
            if not seen[v]:
                seen[v] = True
                if match_r[v] == -1 or augment(match_r[v], seen):
                    match_r[v] = u
                    match_l[u] = v
                    return True
        return False

    for u in range(len(adj)):
        if adj[u]:
            augment(u, [False] * n_right)
    return match_l


def compare_set(names: list[str], got: list[np.ndarray], ref: list[np.ndarray], rtol=RTOL,
                atol=ATOL) -> tuple[float, list[str]]:
    """(max abs error over matched rows, problems) for a group of outputs compared as a set of rows."""
    label = "/".join(names)
    for n, g, r in zip(names, got, ref):
        if g.dtype != r.dtype:
            return float("inf"), [f"{n}: dtype {g.dtype} != ORT {r.dtype}"]
        if g.shape[1:] != r.shape[1:]:
            return float("inf"), [f"{n}: shape {list(g.shape)} != ORT {list(r.shape)} beyond axis 0"]
    n_ref, n_got = ref[0].shape[0], got[0].shape[0]
    if any(r.shape[0] != n_ref for r in ref) or any(g.shape[0] != n_got for g in got):
        return float("inf"), [f"{label}: the outputs of one set disagree on their row count"]
    if n_ref == 0:
        return 0.0, [f"{label}: empty output (ORT's too): nothing to compare"]
    if n_got != n_ref:
        problems = [f"{label}: kiln returned {n_got} rows, ORT {n_ref}"]
    else:
        problems = []
    G, R = _rows(got), _rows(ref)
    # adjacency: ORT row i may pair with kiln row j when every column is within tolerance
    adj = []
    for i in range(n_ref):
        ok = _close(G, np.broadcast_to(R[i], G.shape), rtol, atol).all(axis=1)
        adj.append([int(j) for j in np.flatnonzero(ok)])
    match = _max_matching(adj, n_got)
    unmatched = [i for i, j in enumerate(match) if j < 0]
    err = 0.0
    for i, j in enumerate(match):
        if j >= 0:
            err = max(err, _abs_err(G[j], R[i]))
    if unmatched:
        i = unmatched[0]
        nearest = int(np.argmin(np.abs(G - R[i]).max(axis=1))) if n_got else -1
        near = (f"; nearest kiln row {nearest}: {np.array2string(G[nearest], precision=6)}" if nearest >= 0 else "")
        problems.append(f"{label}: {len(unmatched)} of {n_ref} ORT rows have no kiln row within rtol {rtol:g} / "
                        f"atol {atol:g} (compared as a set); first ORT row {i}: "
                        f"{np.array2string(R[i], precision=6)}{near}")
        err = float("inf")
    return err, problems
