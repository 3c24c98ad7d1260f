# SPDX-License-Identifier: Apache-2.0
"""dm-reverb's `reverb.platform.default.ensure_tf_install`.

dm-reverb calls `ensure_tf_version()` before it loads its ops. reverb_tf
needs TensorFlow only for its TensorFlow features (datasets, `TFClient`), and
the op library checks its own TensorFlow version when it loads
(`reverb_tf._ops`); this function makes the same check on demand.
"""

# The oldest TensorFlow dm-reverb's check accepts; reverb_tf's op library
# then requires the exact minor version it was built with.
_MINIMUM_TENSORFLOW = (2, 3)


def _release(version: str) -> tuple:
    """(major, minor) of a version string such as "2.21.0" or "2.22.0rc1"."""
    parts = []
    for part in version.split(".")[:2]:
        digits = "".join(c for c in part if c.isdigit()) or "0"
        parts.append(int(digits))
    return tuple(parts)


def ensure_tf_version() -> None:
    """Imports TensorFlow and checks it is new enough.

    Raises:
      ImportError: If TensorFlow cannot be imported (the message says how to
        install it) or is older than 2.3.
    """
    from reverb_tf import _tensorflow  # pylint: disable=g-import-not-at-top

    tf = _tensorflow.import_tensorflow("reverb_tf's TensorFlow features")
    if _release(tf.version.VERSION) < _MINIMUM_TENSORFLOW:
        raise ImportError(
            f"reverb_tf's TensorFlow features need TensorFlow >= "
            f"{'.'.join(map(str, _MINIMUM_TENSORFLOW))}; TensorFlow {tf.version.VERSION} "
            "is installed"
        )


__all__ = ["ensure_tf_version"]
