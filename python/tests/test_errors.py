"""Each kiln error category raises its own class, with kiln's message naming
the option, input, file or artifact field at fault."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from conftest import save_model


@pytest.mark.parametrize("code,cls", sorted(kiln._errors.BY_CODE.items()))
def test_every_category_maps_to_its_class(code, cls):
    with pytest.raises(cls) as e:
        kiln._kiln._raise(code, f"message of category {code}")
    assert str(e.value) == f"message of category {code}"
    assert type(e.value) is cls and e.value.code == code
    assert isinstance(e.value, kiln.Error)


def test_class_hierarchy():
    assert issubclass(kiln.InvalidInput, ValueError) and issubclass(kiln.InvalidOption, ValueError)
    assert issubclass(kiln.IOError, OSError)
    names = {c.category for c in kiln._errors.BY_CODE.values()}
    assert names == {"internal", "invalid_option", "incompatible_artifact", "invalid_model", "unsupported",
                     "invalid_input", "corrupt_artifact", "io"}


# ---------------------------------------------------------------- invalid_option


@pytest.mark.parametrize("kwargs,named", [
    ({"precision": "fp64"}, "fp64"),
    ({"target": "tpu"}, "tpu"),
    ({"tuning": "slow"}, "slow"),
    ({"dims": {"batch": "8..1"}}, "batch"),
    ({"threads": -1}, "threads"),
    ({"threads": "four"}, "threads"),
    ({"shapes": {"image": "1x3"}}, "shapes"),
    ({"shapes": {"image": [1, 3, 64.5, 64]}}, "shapes"),
    ({"cache_dir": ""}, "cache_dir"),
    ({"out_of_bucket": "maybe"}, "out_of_bucket"),
    ({"precision_check": "sometimes"}, "precision_check"),
    ({"fallback": "gpu"}, "fallback"),
    ({"precision": "fp16"}, "precision"),  # the cpu target is fp32 only
    ({"tuning": "fast"}, "tuning"),  # cpu does not tune
])
def test_invalid_option_names_the_option(demo, tmp_path, kwargs, named):
    with pytest.raises(kiln.InvalidOption) as e:
        kiln.Session(demo, cache_dir=kwargs.pop("cache_dir", tmp_path / "c"), **kwargs)
    assert named in str(e.value), str(e.value)


def test_model_argument_must_be_a_path(tmp_path):
    with pytest.raises(kiln.InvalidOption, match="model must be a path"):
        kiln.Session(42, cache_dir=tmp_path)


def test_session_on_an_artifact_points_to_load(demo, tmp_path):
    art = tmp_path / "demo.kiln"
    kiln.compile(demo, art)
    with pytest.raises(kiln.InvalidOption, match="Session.load"):
        kiln.Session(art)


# ---------------------------------------------------------------- incompatible_artifact


def test_incompatible_artifact_names_the_field(demo, tmp_path):
    art = tmp_path / "demo_ref.kiln"
    kiln.compile(demo, art, target="ref")
    with pytest.raises(kiln.IncompatibleArtifact) as e:
        kiln.Session.load(art, target="cpu")
    msg = str(e.value)
    assert "target" in msg and "ref" in msg and "cpu" in msg, msg
    with pytest.raises(kiln.IncompatibleArtifact, match="target"):
        kiln.check(art, target="cpu", strict=True)


# ---------------------------------------------------------------- invalid_model


def test_invalid_model_names_the_file(tmp_path):
    bad = tmp_path / "garbage.onnx"
    bad.write_bytes(b"this is not a protobuf \x00\xff" * 10)
    with pytest.raises(kiln.InvalidModel) as e:
        kiln.Session(bad, cache_dir=tmp_path / "c")
    assert "garbage.onnx" in str(e.value)


# ---------------------------------------------------------------- unsupported


def test_unsupported_operator_names_the_operator(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    vi = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [2])  # noqa: E731
    graph = helper.make_graph([helper.make_node("Frobnicate", ["x"], ["y"], domain="com.example", name="frob0")],
                              "g", [vi("x")], [vi("y")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.example", 1)])
    model.ir_version = 8
    path = tmp_path / "custom.onnx"
    onnx.save(model, str(path))
    with pytest.raises(kiln.Unsupported) as e:
        kiln.Session(path, cache_dir=tmp_path / "c")
    assert "Frobnicate" in str(e.value), str(e.value)


# ---------------------------------------------------------------- invalid_input


@pytest.fixture(scope="module")
def demo_session(demo, tmp_path_factory):
    return kiln.Session(demo, cache_dir=tmp_path_factory.mktemp("cache"))


def test_wrong_dtype_names_the_input(demo_session):
    with pytest.raises(kiln.InvalidInput) as e:
        demo_session.run({"image": np.zeros((1, 3, 64, 64), np.float64)})
    msg = str(e.value)
    assert "'image'" in msg and "float64" in msg and "float32" in msg, msg


def test_wrong_shape_names_the_input(demo_session):
    with pytest.raises(kiln.InvalidInput) as e:
        demo_session.run({"image": np.zeros((1, 3, 32, 64), np.float32)})
    msg = str(e.value)
    assert "'image'" in msg and "32" in msg, msg
    with pytest.raises(kiln.InvalidInput, match="'image'.*rank"):
        demo_session.run({"image": np.zeros((3, 64, 64), np.float32)})


def test_missing_and_unknown_inputs_are_named(demo_session, demo_input):
    with pytest.raises(kiln.InvalidInput, match="missing input 'image'"):
        demo_session.run({})
    with pytest.raises(kiln.InvalidInput, match="unknown input 'imagee'"):
        demo_session.run({"image": demo_input, "imagee": demo_input})


def test_dtype_kiln_does_not_take_names_the_input(demo_session):
    with pytest.raises(kiln.InvalidInput, match="'image' has dtype <U1"):
        demo_session.run({"image": np.full((1, 3, 64, 64), "a")})
    with pytest.raises(kiln.InvalidInput, match="'image' has dtype complex64"):
        demo_session.run({"image": np.zeros((1, 3, 64, 64), np.complex64)})
    with pytest.raises(kiln.InvalidInput, match="inputs must be a dict"):
        demo_session.run([np.zeros((1, 3, 64, 64), np.float32)])


def test_symbolic_dims_must_agree(add_model, tmp_path):
    s = kiln.Session(add_model, cache_dir=tmp_path / "c")
    with pytest.raises(kiln.InvalidInput, match="batch"):
        s.run({"x": np.zeros((2, 3), np.float32), "y": np.zeros((3, 3), np.float32)})


# ---------------------------------------------------------------- corrupt_artifact


def test_corrupt_artifact(demo, tmp_path):
    art = tmp_path / "demo.kiln"
    kiln.compile(demo, art)
    data = bytearray(art.read_bytes())
    data[len(data) // 2] ^= 0xFF
    art.write_bytes(bytes(data))
    with pytest.raises(kiln.CorruptArtifact) as e:
        kiln.Session.load(art, target="cpu")
    assert "demo.kiln" in str(e.value)
    junk = tmp_path / "junk.kiln"
    junk.write_bytes(b"KILN" + b"\x00" * 40)
    with pytest.raises(kiln.CorruptArtifact, match="junk.kiln"):
        kiln.check(junk)


# ---------------------------------------------------------------- io


def test_missing_file_is_io_error_naming_it(tmp_path):
    missing = tmp_path / "no_such_model.onnx"
    with pytest.raises(kiln.IOError) as e:
        kiln.Session(missing, cache_dir=tmp_path / "c")
    assert "no_such_model.onnx" in str(e.value)
    assert isinstance(e.value, OSError)
    with pytest.raises(kiln.IOError, match="nothing.kiln"):
        kiln.Session.load(tmp_path / "nothing.kiln", target="cpu")


def test_unwritable_output_is_io_error(demo, tmp_path):
    with pytest.raises(kiln.IOError, match="no_dir"):
        kiln.compile(demo, tmp_path / "no_dir" / "sub" / "m.kiln")


def test_bind_takes_device_tensors_only(demo_session, demo_input):
    with pytest.raises(kiln.InvalidInput, match="input 'image' is not a device tensor"):
        demo_session.bind({"image": demo_input})
    with pytest.raises(kiln.InvalidInput, match="dict"):
        demo_session.bind([("image", demo_input)])
