"""EPContext round trip: a session with ep.context_enable=1 writes a model whose
EPContext node embeds the .kiln artifact (ep.context_embed_mode=1) or names it
beside the model (0); a new process loads that model with no compile and the
same outputs. A corrupted artifact, one from another kiln version and one
whose precision differs from the option each give an error naming the field."""

from __future__ import annotations

import ctypes
import ctypes.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

import ep_models
from conftest import EP_NAME, ROOT, assert_close, kiln_devices, kiln_session, ort, reference, session_options

HERE = Path(__file__).resolve().parent

# A fresh process: load the EPContext model with the kiln EP, run it, save the
# outputs; ORT's log (severity info) goes to stderr.
LOAD = r"""
import sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import conftest
rt = conftest.ort()
model, feeds_npz, out_npz = sys.argv[2:5]
opts = dict(kv.split("=", 1) for kv in sys.argv[5:])
so = conftest.session_options("all", options=opts, record=False)
so.log_severity_level = 1
s = conftest.kiln_session(model, so)
feeds = dict(np.load(feeds_npz))
np.savez(out_npz, *s.run(None, feeds))
"""


def compile_context(tmp_path, embed, cache):
    model = tmp_path / "conv.onnx"
    feeds = ep_models.conv_net(model)
    ctx = tmp_path / f"conv_ctx_{embed}.onnx"
    cfg = {"ep.context_enable": "1", "ep.context_file_path": str(ctx), "ep.context_embed_mode": str(embed)}
    kiln_session(model, session_options("all", options={"cache_dir": str(cache)}, config=cfg))
    assert ctx.is_file(), f"ORT wrote no EPContext model at {ctx}"
    return model, ctx, feeds


def load_in_new_process(tmp_path, ctx, feeds, *opts):
    np.savez(tmp_path / "feeds.npz", **feeds)
    r = subprocess.run([sys.executable, "-c", LOAD, str(HERE), str(ctx), str(tmp_path / "feeds.npz"),
                        str(tmp_path / "out.npz"), *opts], capture_output=True, text=True, timeout=300)
    return r


def ctx_node(ctx):
    m = onnx.load(str(ctx))
    nodes = [n for n in m.graph.node if n.op_type == "EPContext"]
    assert len(nodes) == 1 and len(m.graph.node) == 1, [n.op_type for n in m.graph.node]
    return {a.name: onnx.helper.get_attribute_value(a) for a in nodes[0].attribute}


@pytest.mark.parametrize("embed", [1, 0])
def test_epcontext_round_trip_loads_without_compiling(lib, tmp_path, embed):
    model, ctx, feeds = compile_context(tmp_path, embed, tmp_path / "cache1")
    attrs = ctx_node(ctx)
    assert attrs["source"] == EP_NAME.encode() and attrs["embed_mode"] == embed
    if embed:
        assert attrs["ep_cache_context"][:8] == b"KILNART\0"
    else:
        assert (ctx.parent / attrs["ep_cache_context"].decode()).is_file()
    names, refs = reference(model, feeds)
    # An empty cache directory in the new process: nothing to find there.
    r = load_in_new_process(tmp_path, ctx, feeds, f"cache_dir={tmp_path / 'cache2'}")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "loaded from EPContext node" in r.stderr and "no compile" in r.stderr, r.stderr[-3000:]
    assert "compiled and cached" not in r.stderr, r.stderr[-3000:]
    out = np.load(tmp_path / "out.npz")
    for i, (oname, want) in enumerate(zip(names, refs)):
        assert_close(out[f"arr_{i}"], want, what=oname)


@pytest.mark.parametrize("embed", [True, False])
def test_ort_compile_api_writes_a_kiln_epcontext_model_that_loads(lib, tmp_path, embed):
    """ORT's compile API (ModelCompiler) instead of ep.context_enable."""
    rt = ort()
    model = tmp_path / "conv.onnx"
    feeds = ep_models.conv_net(model)
    ctx = tmp_path / "conv_compiled.onnx"
    so = session_options("all", options={"cache_dir": str(tmp_path / "cache1")}, record=False)
    rt.ModelCompiler(so, str(model), embed_compiled_data_into_model=embed).compile_to_file(str(ctx))
    attrs = ctx_node(ctx)
    assert attrs["embed_mode"] == int(embed) and attrs["source"] == EP_NAME.encode()
    names, refs = reference(model, feeds)
    r = load_in_new_process(tmp_path, ctx, feeds, f"cache_dir={tmp_path / 'cache2'}")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "loaded from EPContext node" in r.stderr and "compiled and cached" not in r.stderr, r.stderr[-3000:]
    out = np.load(tmp_path / "out.npz")
    for i, (oname, want) in enumerate(zip(names, refs)):
        assert_close(out[f"arr_{i}"], want, what=oname)


def xxh3_64(data: bytes) -> int:
    lib = ctypes.CDLL(ctypes.util.find_library("xxhash") or "libxxhash.so.0")
    lib.XXH3_64bits.restype = ctypes.c_uint64
    lib.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    return lib.XXH3_64bits(data, len(data))


def patch_compat(path: Path, old: bytes, new: bytes):
    """Rewrites a string of an artifact's compatibility block (same length) and
    its checksums, as another kiln (or another precision) would have written it
    (docs/file-format.md: compat block at header[24], size at [32], checksum
    at [40]; header checksum at [72] over bytes 0..71)."""
    b = bytearray(path.read_bytes())
    off = int.from_bytes(b[24:32], "little")
    size = int.from_bytes(b[32:40], "little")
    block = bytes(b[off:off + size])
    assert block.count(old) >= 1, (old, block)
    block = block.replace(old, new, 1)
    b[off:off + size] = block
    b[40:48] = xxh3_64(block).to_bytes(8, "little")
    b[72:80] = xxh3_64(bytes(b[0:72])).to_bytes(8, "little")
    path.write_bytes(bytes(b))


@pytest.mark.parametrize("case,words", [
    ("corrupt", ["checksum"]),
    ("version", ["kiln_version", "0.0.9"]),
    ("precision", ["precision", "fp16", "fp32"]),
])
def test_epcontext_bad_artifact_is_an_error_naming_the_field(lib, tmp_path, case, words):
    from conftest import ort as _ort  # noqa: F401  (registers the plugin)
    import onnxruntime as rt_mod  # noqa: F401

    model, ctx, feeds = compile_context(tmp_path, 0, tmp_path / "cache1")
    art = ctx.parent / ctx_node(ctx)["ep_cache_context"].decode()
    if case == "corrupt":
        b = bytearray(art.read_bytes())
        b[len(b) // 2] ^= 0xFF
        art.write_bytes(bytes(b))
    elif case == "version":
        patch_compat(art, b"0.1.0", b"0.0.9")
    else:
        patch_compat(art, b"fp32", b"fp16")
    opts = ["precision=fp32"] if case == "precision" else []
    r = load_in_new_process(tmp_path, ctx, feeds, f"cache_dir={tmp_path / 'cache2'}", *opts)
    assert r.returncode != 0, "a bad artifact loaded"
    assert "Segmentation" not in r.stderr and "core dumped" not in r.stderr
    err = r.stderr[-3000:]
    for w in words:
        assert w in err, err


def test_compatibility_info_is_kiln_s_and_validated_by_the_factory(lib, tmp_path):
    from onnxruntime.capi import onnxruntime_pybind11_state as C

    _, ctx, _ = compile_context(tmp_path, 1, tmp_path / "cache1")
    # ORT stores what GetCompiledModelCompatibilityInfo returned in the model's metadata.
    info = {p.key: p.value for p in onnx.load(str(ctx)).metadata_props}[f"ep_compatibility_info.{EP_NAME}"]
    assert info.startswith("kiln=") and "target=cpu" in info and "precision=fp32" in info, info
    devs = kiln_devices()
    ok = C.get_model_compatibility_for_ep_devices(devs, info)
    bad = C.get_model_compatibility_for_ep_devices(devs, info.replace("kiln=", "kiln=0.0.9-", 1))
    assert "OPTIMAL" in str(ok), ok
    assert "UNSUPPORTED" in str(bad), bad
