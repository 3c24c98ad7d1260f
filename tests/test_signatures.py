"""Signature flattening, encoding round trips and column checks."""
import collections
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from reverb_tf import errors
from reverb_tf import signatures

Step = collections.namedtuple("Step", ["observation", "reward"])


def nested_signature():
    return {
        "obs": Step(observation=tf.TensorSpec([None, 84, 84], tf.uint8),
                    reward=tf.TensorSpec([], tf.float32)),
        "action": tf.TensorSpec([3], tf.int64, name="act"),
        "info": [tf.TensorSpec([], tf.string), (tf.TensorSpec([2, None], tf.bool),)],
    }


def test_flatten_nested_signature_columns():
    columns, blob = signatures.flatten_signature(nested_signature())
    assert columns == [
        ("action", np.dtype(np.int64), (3,)),
        ("info/0", np.dtype(object), ()),
        ("info/1/0", np.dtype(np.bool_), (2, -1)),
        ("obs/observation", np.dtype(np.uint8), (-1, 84, 84)),
        ("obs/reward", np.dtype(np.float32), ()),
    ]
    assert isinstance(blob, bytes) and blob


def test_encoding_round_trips_to_equal_structure():
    signature = nested_signature()
    decoded = signatures.decode_structure(signatures.encode_structure(signature))
    assert tf.nest.flatten(decoded) == tf.nest.flatten(signature)
    tf.nest.assert_same_structure(decoded, signature, check_types=False)
    assert type(decoded["obs"]).__name__ == "Step"
    assert decoded["obs"]._fields == ("observation", "reward")
    assert decoded["action"].name == "act"


def test_decoding_in_another_process():
    _, blob = signatures.flatten_signature(nested_signature())
    code = (
        "import sys, tensorflow as tf\n"
        "from reverb_tf import signatures\n"
        "s = signatures.decode_structure(sys.stdin.buffer.read())\n"
        "print([(x.shape.as_list(), x.dtype.name) for x in tf.nest.flatten(s)])\n")
    out = subprocess.run([sys.executable, "-c", code], input=blob, capture_output=True,
                         check=True).stdout.decode()
    assert out.strip() == str([([3], "int64"), ([], "string"), ([2, None], "bool"),
                               ([None, 84, 84], "uint8"), ([], "float32")])


def test_single_spec_signature():
    columns, blob = signatures.flatten_signature(tf.TensorSpec([2], tf.float64))
    assert columns == [("", np.dtype(np.float64), (2,))]
    assert signatures.decode_structure(blob) == tf.TensorSpec([2], tf.float64)


@pytest.mark.parametrize("empty", [None, {}, [], ()])
def test_no_signature(empty):
    assert signatures.flatten_signature(empty) is None


@pytest.mark.parametrize("bad,match", [
    ({"a": tf.TensorSpec([1], tf.float32), "b": np.zeros(3)}, "'b' must be a tf.TensorSpec"),
    ({"a": tf.TensorSpec(None, tf.float32)}, "unknown rank"),
    ({"a": {"b": 3}}, "'a/b' must be a tf.TensorSpec"),
])
def test_bad_signatures(bad, match):
    with pytest.raises(ValueError, match=match):
        signatures.flatten_signature(bad)


def test_decode_rejects_unknown_encodings():
    with pytest.raises(ValueError, match="encoding"):
        signatures.decode_structure(b"garbage")


def test_check_columns_accepts_compatible_data():
    expected = [signatures.Column("obs", np.dtype(np.float32), (-1, 4)),
                signatures.Column("r", np.dtype(np.float32), ())]
    signatures.check_columns([(np.dtype(np.float32), (3, 4)), (np.dtype(np.float32), ())],
                             expected, context="item")


@pytest.mark.parametrize("actual,fragment", [
    ([(np.dtype(np.float64), (3, 4)), (np.dtype(np.float32), ())],
     "column 'obs' must be float32[?,4] but is float64[3,4]"),
    ([(np.dtype(np.float32), (3, 5)), (np.dtype(np.float32), ())],
     "column 'obs' must be float32[?,4] but is float32[3,5]"),
    ([(np.dtype(np.float32), (3, 4)), (np.dtype(np.float32), (1,))],
     "column 'r' must be float32[] but is float32[1]"),
    ([(np.dtype(np.float32), (3, 4))], "the signature has 2 columns"),
])
def test_check_columns_names_the_column(actual, fragment):
    expected = [signatures.Column("obs", np.dtype(np.float32), (-1, 4)),
                signatures.Column("r", np.dtype(np.float32), ())]
    with pytest.raises(errors.InvalidArgumentError) as info:
        signatures.check_columns(actual, expected, context="item for table 't'")
    assert fragment in str(info.value)
    assert str(info.value).startswith("item for table 't'")
    assert isinstance(info.value, ValueError)


def test_check_columns_shows_data_paths_that_differ():
    expected = [signatures.Column("obs", np.dtype(np.float32), (4,))]
    with pytest.raises(errors.InvalidArgumentError, match=r"\(data path 'o'\)"):
        signatures.check_columns([(np.dtype(np.int32), (4,))], expected, context="x",
                                 paths=["o"])


def test_describe():
    assert signatures.describe(np.float32, (-1, 4)) == "float32[?,4]"
    assert signatures.describe(object, ()) == "string[]"
    assert signatures.shape_compatible((-1, 2), (7, 2))
    assert not signatures.shape_compatible((-1, 2), (7, 2, 1))
