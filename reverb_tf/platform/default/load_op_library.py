# SPDX-License-Identifier: Apache-2.0
"""dm-reverb's `reverb.platform.default.load_op_library`.

dm-reverb wraps the "undefined symbol" error of loading an op library built
for another TensorFlow into an `ImportError` that explains the mismatch.
reverb_tf checks the version before loading (`reverb_tf._ops`); this module
offers the same wrapping for code that loads a library itself.
"""

from typing import NoReturn

# Imported on demand only: it names the installed TensorFlow, like dm-reverb's.
from reverb_tf import _tensorflow

_tf = _tensorflow.import_tensorflow("reverb_tf.platform.default.load_op_library")

UNDEFINED_SYMBOL_ERROR_MESSAGE = (
    "A reverb_tf op library was loaded, but it lacks symbols of the installed "
    "TensorFlow: it was built for another TensorFlow version. Rebuild it against "
    f"TensorFlow {_tf.__version__} (`bash scripts/setup.sh` in a checkout) or install a "
    "reverb_tf wheel built for it."
)


def reraise_wrapped_error(error: Exception) -> NoReturn:
    """Raises `error`, as an explaining `ImportError` if it is a symbol mismatch.

    Call it while handling the error of `tf.load_op_library`.

    Args:
      error: The exception.

    Raises:
      ImportError: If `error`'s message names an undefined symbol.
      Exception: `error` itself otherwise.
    """
    if "undefined symbol" in str(error).lower():
        raise ImportError(f"{UNDEFINED_SYMBOL_ERROR_MESSAGE}\nOriginal error:\n{error}") from error
    raise error


__all__ = ["UNDEFINED_SYMBOL_ERROR_MESSAGE", "reraise_wrapped_error"]
