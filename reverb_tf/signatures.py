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
be introduced later without ambiguity.

TensorFlow is optional. A signature's leaves may be `tf.TensorSpec`s or,
without TensorFlow, `ArraySpec`s (or any object with a `shape` and a numpy
`dtype`, such as dm_env's `specs.Array` or `jax.ShapeDtypeStruct`). Both are
encoded as the same `StructuredValue`, so a table made without TensorFlow
reads back as `tf.TensorSpec`s in a process that has it, and a table made
with it reads back as `ArraySpec`s in a process that has not.
"""

import collections
import sys
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np
import tree

from reverb_tf import _tensorflow


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
    return _tensorflow.import_tensorflow("a signature of tf.TensorSpec")


def flatten_signature(signature: Any) -> Optional[Tuple[List[Column], bytes]]:
    """Turns a table's nested signature into flat columns and its encoding.

    Args:
      signature: A nested structure (dicts, lists, tuples, namedtuples) of
        `tf.TensorSpec` or `ArraySpec`, or None / an empty structure for no
        signature.

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
    columns = []
    for path, spec in flat:
        name = column_name(path)
        dtype = spec_dtype(spec, name)
        shape = spec_shape(spec, name)
        columns.append(Column(name, dtype, tuple(-1 if d is None else d for d in shape)))
    return columns, encode_structure(signature)


def _is_tf_spec(value: Any) -> bool:
    """True for a `tf.TensorSpec` (TensorFlow is imported if one can exist)."""
    if not _tensorflow.is_imported():
        return False  # no TensorSpec can have been made in this process
    return isinstance(value, sys.modules["tensorflow"].TensorSpec)


def spec_dtype(spec: Any, name: str = "") -> np.dtype:
    """The numpy dtype of a signature leaf.

    Args:
      spec: A `tf.TensorSpec`, an `ArraySpec` or another object with `shape`
        and `dtype` attributes.
      name: The leaf's column name, for messages.

    Returns:
      The leaf's `numpy.dtype` (`object` for strings).

    Raises:
      ValueError: If `spec` is no spec or its dtype has no numpy equivalent.
    """
    if isinstance(spec, np.ndarray) or not (hasattr(spec, "shape") and hasattr(spec, "dtype")):
        raise ValueError(
            f"Unsupported signature spec: {spec!r} (signature leaf {name!r} must be a "
            "tf.TensorSpec or a reverb_tf.ArraySpec: any object with a shape and a dtype)"
        )
    dtype = spec.dtype
    try:
        if hasattr(dtype, "as_numpy_dtype"):  # a tf.DType
            return np.dtype(dtype.as_numpy_dtype)
        dtype = np.dtype(dtype)
    except TypeError:
        raise ValueError(
            f"signature leaf {name!r} has dtype {getattr(dtype, 'name', dtype)}, which has "
            "no numpy equivalent and cannot be stored"
        ) from None
    if dtype.kind in "USa":  # numpy strings: stored as TF strings are (bytes objects)
        return np.dtype(object)
    return dtype


def spec_shape(spec: Any, name: str = "") -> Tuple[Optional[int], ...]:
    """The shape of a signature leaf, None for dimensions of any size.

    Args:
      spec: A signature leaf (see `spec_dtype`).
      name: The leaf's column name, for messages.

    Returns:
      The shape as a tuple.

    Raises:
      ValueError: If the rank is unknown or a dimension is negative.
    """
    shape = spec.shape
    if getattr(shape, "rank", 0) is None:
        raise ValueError(
            f"signature leaf {name!r} has an unknown rank ({spec!r}); reverb_tf "
            "columns need a known rank (use None for dimensions of any size)"
        )
    dims = tuple(
        None if d is None or d == -1 else int(d)
        for d in (shape.as_list() if hasattr(shape, "as_list") else shape)
    )
    if any(d is not None and d < 0 for d in dims):
        raise ValueError(f"signature leaf {name!r} has a negative dimension: {dims}")
    return dims


class ArraySpec:
    """The dtype and shape of a column, without TensorFlow.

    What signatures are made of where TensorFlow is not installed, and what
    they are read back as there (where TensorFlow is installed they read
    back as `tf.TensorSpec`, as dm-reverb's do). Immutable; equal when shape,
    dtype and name are.
    """

    __slots__ = ("_shape", "_dtype", "_name")

    def __init__(
        self, shape: Sequence[Optional[int]], dtype: Any, name: Optional[str] = None
    ) -> None:
        """Creates a spec.

        Args:
          shape: The dimensions; None (or -1) for a dimension of any size.
          dtype: Anything `numpy.dtype` accepts (`object` or `bytes` for
            strings).
          name: An optional name.

        Raises:
          ValueError: If the dtype is unknown or a dimension is negative.
        """
        try:
            self._dtype = np.dtype(dtype)
        except TypeError:
            raise ValueError(f"unknown dtype {dtype!r}") from None
        if self._dtype.kind in "USa":
            self._dtype = np.dtype(object)
        self._shape = tuple(None if d is None or d == -1 else int(d) for d in shape)
        if any(d is not None and d < 0 for d in self._shape):
            raise ValueError(f"dimensions must be >= 0 or None, got {tuple(shape)}")
        self._name = name

    @property
    def shape(self) -> Tuple[Optional[int], ...]:
        return self._shape

    @property
    def dtype(self) -> np.dtype:
        return self._dtype

    @property
    def name(self) -> Optional[str]:
        return self._name

    def is_compatible_with(self, value: Any) -> bool:
        """True if an array-like `value` fits this spec's dtype and shape."""
        array = np.asarray(value)
        if array.dtype != self._dtype or array.ndim != len(self._shape):
            return False
        return all(d is None or d == n for d, n in zip(self._shape, array.shape))

    def __eq__(self, other: Any) -> bool:
        return (
            isinstance(other, ArraySpec)
            and self._shape == other._shape
            and self._dtype == other._dtype
            and self._name == other._name
        )

    def __hash__(self) -> int:
        return hash((self._shape, self._dtype, self._name))

    def __repr__(self) -> str:
        return f"ArraySpec(shape={self._shape}, dtype={self._dtype.name}, name={self._name!r})"

    def __reduce__(self) -> Any:
        return ArraySpec, (self._shape, self._dtype, self._name)


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
    leaves = tree.flatten(signature)
    if leaves and all(_is_tf_spec(leaf) for leaf in leaves):
        tf = _tf()
        try:
            proto = tf.__internal__.saved_model.encode_structure(signature)
        except Exception as e:  # TF raises its own NotEncodableError.
            raise ValueError(f"cannot encode signature {signature!r}: {e}") from e
    else:
        proto = encode_structured_value(signature)
    return _FORMAT_TAG + proto.SerializeToString()


# numpy dtype name -> TensorFlow DataType name, where not "DT_" + upper().
_DATA_TYPE_NAMES = {
    "float32": "DT_FLOAT",
    "float64": "DT_DOUBLE",
    "float16": "DT_HALF",
    "object": "DT_STRING",
}


def _data_type_value(dtype: np.dtype) -> int:
    from reverb_tf.cc.proto import tf_struct  # pylint: disable=g-import-not-at-top

    name = _DATA_TYPE_NAMES.get(dtype.name, "DT_" + dtype.name.upper())
    value = tf_struct.DataType.values_by_name.get(name)
    if value is None:
        raise ValueError(f"dtype {dtype.name} cannot be stored in a signature")
    return value.number


def _numpy_dtype(data_type: int) -> np.dtype:
    from reverb_tf.cc.proto import tf_struct  # pylint: disable=g-import-not-at-top

    value = tf_struct.DataType.values_by_number.get(data_type)
    name = None if value is None else value.name
    for numpy_name, tf_name in _DATA_TYPE_NAMES.items():
        if tf_name == name:
            return np.dtype(numpy_name)
    if name == "DT_BFLOAT16":
        import ml_dtypes  # pylint: disable=g-import-not-at-top

        return np.dtype(ml_dtypes.bfloat16)
    try:
        return np.dtype(name[len("DT_") :].lower())
    except (TypeError, AttributeError):
        raise ValueError(
            f"the signature has a dtype numpy cannot hold ({name or data_type})"
        ) from None


def encode_structured_value(structure: Any) -> Any:
    """Encodes a nested structure as a `tensorflow.StructuredValue`, without TensorFlow.

    Handles what signatures and pattern structures are made of: None, dicts
    with string keys, lists, tuples, namedtuples and spec leaves (see
    `spec_dtype`), each encoded as TensorFlow's own structure coder does, so
    TensorFlow decodes the result into the same structure of `tf.TensorSpec`.

    Args:
      structure: The nested structure.

    Returns:
      The `StructuredValue` message (of `reverb_tf.cc.proto.tf_struct`).

    Raises:
      ValueError: If a part of the structure cannot be encoded.
    """
    from reverb_tf.cc.proto import tf_struct  # pylint: disable=g-import-not-at-top

    message = tf_struct.StructuredValue()
    _encode_into(structure, message, ())
    return message


def _encode_into(value: Any, message: Any, path: Tuple[Any, ...]) -> None:
    if value is None:
        message.none_value.SetInParent()
    elif isinstance(value, dict):
        message.dict_value.SetInParent()
        for key in value:
            if not isinstance(key, str):
                raise ValueError(
                    f"cannot encode a dict key that is not a str: {key!r} at "
                    f"{column_name(path) or 'the top'}"
                )
            _encode_into(value[key], message.dict_value.fields[key], path + (key,))
    elif isinstance(value, tuple) and hasattr(value, "_fields"):
        named = message.named_tuple_value
        named.name = type(value).__name__
        for field in value._fields:
            pair = named.values.add()
            pair.key = field
            _encode_into(getattr(value, field), pair.value, path + (field,))
    elif isinstance(value, (list, tuple)):
        values = message.list_value if isinstance(value, list) else message.tuple_value
        values.SetInParent()
        for i, item in enumerate(value):
            _encode_into(item, values.values.add(), path + (i,))
    else:
        name = column_name(path)
        spec = message.tensor_spec_value
        spec_name = getattr(value, "name", None)
        if spec_name:
            spec.name = str(spec_name)
        spec.shape.SetInParent()
        for d in spec_shape(value, name):
            spec.shape.dim.add(size=-1 if d is None else d)
        spec.dtype = _data_type_value(spec_dtype(value, name))


def _decode_value(message: Any) -> Any:
    kind = message.WhichOneof("kind")
    if kind == "none_value" or kind is None:
        return None
    if kind == "dict_value":
        return {
            key: _decode_value(message.dict_value.fields[key])
            for key in sorted(message.dict_value.fields)
        }
    if kind == "named_tuple_value":
        named = message.named_tuple_value
        cls = _namedtuple_class(named.name, tuple(pair.key for pair in named.values))
        return cls(*[_decode_value(pair.value) for pair in named.values])
    if kind == "list_value":
        return [_decode_value(v) for v in message.list_value.values]
    if kind == "tuple_value":
        return tuple(_decode_value(v) for v in message.tuple_value.values)
    if kind == "tensor_spec_value":
        spec = message.tensor_spec_value
        if spec.shape.unknown_rank:
            raise ValueError("the signature has a spec of unknown rank")
        return ArraySpec(
            [None if d.size < 0 else d.size for d in spec.shape.dim],
            _numpy_dtype(spec.dtype),
            spec.name or None,
        )
    raise ValueError(
        f"this reverb_tf cannot decode a signature holding a {kind} without TensorFlow"
    )


_NAMEDTUPLES: Dict[Tuple[str, Tuple[str, ...]], type] = {}


def _namedtuple_class(name: str, fields: Tuple[str, ...]) -> type:
    """One class per name and fields, so decoded signatures compare equal."""
    key = (name, fields)
    if key not in _NAMEDTUPLES:
        _NAMEDTUPLES[key] = collections.namedtuple(name, fields)
    return _NAMEDTUPLES[key]


def decode_structure(blob: bytes) -> Any:
    """Rebuilds the nested `tf.TensorSpec` structure `encode_structure` encoded.

    Namedtuples come back as namedtuples with the same name and fields (but a
    class created on the fly), as with TensorFlow's own structure coder.

    Args:
      blob: Bytes produced by `encode_structure`.

    Returns:
      The nested structure of `tf.TensorSpec` (`ArraySpec` where TensorFlow
      is not installed).

    Raises:
      ValueError: If `blob` is not in a known encoding.
    """
    blob = bytes(blob)
    if not blob.startswith(_FORMAT_TAG):
        raise ValueError(
            "the table's nested_structure is not in an encoding this version of reverb_tf knows"
        )
    from reverb_tf.cc.proto import tf_struct  # pylint: disable=g-import-not-at-top

    return decode_structured_value(tf_struct.StructuredValue.FromString(blob[len(_FORMAT_TAG) :]))


def decode_structured_value(proto: Any) -> Any:
    """Decodes a `tensorflow.StructuredValue` with every dict's keys sorted.

    What table signatures and StructuredWriter pattern structures are both
    encoded as.

    Args:
      proto: The `StructuredValue` message.

    Returns:
      The nested structure it encodes: with `tf.TensorSpec` leaves where
      TensorFlow is installed (as dm-reverb returns them), `ArraySpec` leaves
      where it is not.
    """
    if _tensorflow.is_installed():
        return _sorted_dicts(_tf().__internal__.saved_model.decode_proto(proto))
    return _decode_value(proto)


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
