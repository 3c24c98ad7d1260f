# SPDX-License-Identifier: Apache-2.0
"""Table signatures: from nested `tf.TensorSpec`s to flat columns and back.

A table's `signature` is a nested structure of `tf.TensorSpec`. The native
core only knows flat columns, one per leaf, in `tree.flatten` order:

    Column(name='/'-joined path, dtype=numpy dtype, shape=(-1 for None, ...))

and an opaque `nested_structure` blob that it stores and hands back verbatim
(`server_info`), from which any process rebuilds the nested `TensorSpec`s.

The blob is TensorFlow's own `StructuredValue` proto (what
`tf.__internal__.saved_model.encode_structure` produces, the same encoding
dm-reverb stores) behind a short format tag, so that another encoding could
be introduced later without ambiguity. TensorFlow is imported only by the
functions that need `tf.TensorSpec`: `import reverb_tf` stays TF-free.
"""

from typing import Any, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np
import tree


_FORMAT_TAG = b"reverb_tf.tf_structured_value.v1\n"


class Column(NamedTuple):
    """One flat column of a signature.

    Fields:
      name: The '/'-joined path of the leaf in the nested signature ("" for a
        signature that is a single spec).
      dtype: The column's `numpy.dtype` (`object` for strings).
      shape: The column's shape; -1 stands for any size.
    """

    name: str
    dtype: np.dtype
    shape: Tuple[int, ...]


def column_name(path: Sequence[Any]) -> str:
    """Returns the column name of a `tree.flatten_with_path` path.

    Args:
      path: The path of a leaf, e.g. `('observation', 'pixels')` or `(0, 2)`.

    Returns:
      The elements joined by '/', e.g. "observation/pixels".
    """
    return "/".join(str(part) for part in path)


def _tf():
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    return tf


def flatten_signature(signature: Any) -> Optional[Tuple[List[Column], bytes]]:
    """Turns a table's nested signature into flat columns and its encoding.

    Args:
      signature: A nested structure (dicts, lists, tuples, namedtuples) of
        `tf.TensorSpec`, or None / an empty structure for no signature.

    Returns:
      None when there is no signature, otherwise `(columns, nested_structure)`
      with one `Column` per leaf in `tree.flatten` order and the encoded
      structure (see `decode_structure`).

    Raises:
      ValueError: If a leaf is not a `tf.TensorSpec`, has an unknown rank or a
        dtype without a numpy equivalent.
    """
    if signature is None:
        return None
    flat = tree.flatten_with_path(signature)
    if not flat:
        return None
    tf = _tf()
    columns = []
    for path, spec in flat:
        name = column_name(path)
        if not isinstance(spec, tf.TensorSpec):
            raise ValueError(
                f"signature leaf {name!r} must be a tf.TensorSpec, got {spec!r}")
        if spec.shape.rank is None:
            raise ValueError(
                f"signature leaf {name!r} has an unknown rank ({spec!r}); reverb_tf "
                "columns need a known rank (use None for dimensions of any size)")
        try:
            dtype = np.dtype(spec.dtype.as_numpy_dtype)
        except TypeError:
            raise ValueError(
                f"signature leaf {name!r} has dtype {spec.dtype.name}, which has no "
                "numpy equivalent and cannot be stored") from None
        shape = tuple(-1 if d is None else int(d) for d in spec.shape.as_list())
        columns.append(Column(name, dtype, shape))
    return columns, encode_structure(signature)


def encode_structure(signature: Any) -> bytes:
    """Encodes a nested structure of `tf.TensorSpec` as bytes.

    Args:
      signature: The nested structure.

    Returns:
      Bytes that `decode_structure` turns back into an equal structure, in
      this or any other process.

    Raises:
      ValueError: If TensorFlow cannot encode the structure.
    """
    tf = _tf()
    try:
        proto = tf.__internal__.saved_model.encode_structure(signature)
    except Exception as e:  # TF raises its own NotEncodableError.
        raise ValueError(f"cannot encode signature {signature!r}: {e}") from e
    return _FORMAT_TAG + proto.SerializeToString()


def decode_structure(blob: bytes) -> Any:
    """Rebuilds the nested `tf.TensorSpec` structure `encode_structure` encoded.

    Namedtuples come back as namedtuples with the same name and fields (but a
    class created on the fly), as with TensorFlow's own structure coder.

    Args:
      blob: Bytes produced by `encode_structure`.

    Returns:
      The nested structure of `tf.TensorSpec`.

    Raises:
      ValueError: If `blob` is not in a known encoding.
    """
    blob = bytes(blob)
    if not blob.startswith(_FORMAT_TAG):
        raise ValueError(
            "the table's nested_structure is not in an encoding this version of "
            "reverb_tf knows")
    # pylint: disable=g-import-not-at-top
    from tensorflow.core.protobuf import struct_pb2
    return decode_structured_value(
        struct_pb2.StructuredValue.FromString(blob[len(_FORMAT_TAG):]))


def decode_structured_value(proto: Any) -> Any:
    """Decodes a `tensorflow.StructuredValue` with every dict's keys sorted.

    What table signatures and StructuredWriter pattern structures are both
    encoded as.

    Args:
      proto: The `StructuredValue` message.

    Returns:
      The nested structure it encodes.
    """
    return _sorted_dicts(_tf().__internal__.saved_model.decode_proto(proto))


def _sorted_dicts(structure: Any) -> Any:
    """Orders every dict's keys: the encoding (a protobuf map) keeps no order.

    Sorted is the order `tree.flatten` gives the columns, and the order in
    which dm-reverb hands decoded signatures back.
    """
    if isinstance(structure, dict):
        return type(structure)((k, _sorted_dicts(structure[k])) for k in sorted(structure))
    if isinstance(structure, tuple) and hasattr(structure, "_fields"):
        return type(structure)(*[_sorted_dicts(v) for v in structure])
    if isinstance(structure, (list, tuple)):
        return type(structure)(_sorted_dicts(v) for v in structure)
    return structure
