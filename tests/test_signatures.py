# SPDX-License-Identifier: Apache-2.0
"""Signature flattening, encoding round trips and column checks."""

import collections
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from reverb_tf import signatures

Step = collections.namedtuple("Step", ["observation", "reward"])


def nested_signature():
    return {
        "obs": Step(
            observation=tf.TensorSpec([None, 84, 84], tf.uint8),
            reward=tf.TensorSpec([], tf.float32),
        ),
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
        "print([(x.shape.as_list(), x.dtype.name) for x in tf.nest.flatten(s)])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], input=blob, capture_output=True, check=True
    ).stdout.decode()
    assert out.strip() == str(
        [
            ([3], "int64"),
            ([], "string"),
            ([2, None], "bool"),
            ([None, 84, 84], "uint8"),
            ([], "float32"),
        ]
    )


def test_single_spec_signature():
    columns, blob = signatures.flatten_signature(tf.TensorSpec([2], tf.float64))
    assert columns == [("", np.dtype(np.float64), (2,))]
    assert signatures.decode_structure(blob) == tf.TensorSpec([2], tf.float64)


@pytest.mark.parametrize("empty", [None, {}, [], ()])
def test_no_signature(empty):
    assert signatures.flatten_signature(empty) is None


@pytest.mark.parametrize(
    "bad,match",
    [
        ({"a": tf.TensorSpec([1], tf.float32), "b": np.zeros(3)}, "'b' must be a tf.TensorSpec"),
        ({"a": tf.TensorSpec(None, tf.float32)}, "unknown rank"),
        ({"a": {"b": 3}}, "'a/b' must be a tf.TensorSpec"),
    ],
)
def test_bad_signatures(bad, match):
    with pytest.raises(ValueError, match=match):
        signatures.flatten_signature(bad)


def test_decode_rejects_unknown_encodings():
    with pytest.raises(ValueError, match="encoding"):
        signatures.decode_structure(b"garbage")
