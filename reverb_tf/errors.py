# SPDX-License-Identifier: Apache-2.0
"""Exceptions raised by reverb_tf, and the one table that maps status codes to them.

Every failure that crosses from the native core (`reverb_tf._core`) or from the
server into Python arrives as an absl/gRPC canonical status code plus a
message. `from_status` turns that pair into an exception using only the code:
nothing in reverb_tf inspects message text to decide what to raise.

Each class derives from `ReverbError` and, where dm-reverb raised a builtin
exception for the same status, from that builtin too, so existing handlers
keep working:

* INVALID_ARGUMENT   -> `InvalidArgumentError`   (also `ValueError`)
* RESOURCE_EXHAUSTED -> `ResourceExhaustedError` (also `IndexError`)
* UNIMPLEMENTED      -> `UnimplementedError`     (also `NotImplementedError`)
* DEADLINE_EXCEEDED  -> `DeadlineExceededError`  (also `TimeoutError`)
* every other code   -> a class that is also a `RuntimeError`, which is what
  dm-reverb raised for them.
"""

from typing import Dict, Type


class ReverbError(Exception):
    """Base class of every error reverb_tf raises for a failed operation.

    Attributes:
      code: The absl/gRPC canonical status code number of the failure (2,
        UNKNOWN, when the error did not come from a status).
    """

    code: int = 2


class CancelledError(ReverbError, RuntimeError):
    """The operation was cancelled, e.g. because the server was stopped."""

    code = 1


class UnknownError(ReverbError, RuntimeError):
    """A failure without a more specific status code."""

    code = 2


class InvalidArgumentError(ReverbError, ValueError):
    """An argument was invalid (bad option, priority, dtype or shape)."""

    code = 3


class DeadlineExceededError(ReverbError, TimeoutError):
    """A call did not complete within its timeout."""

    code = 4


class NotFoundError(ReverbError, RuntimeError):
    """A named entity (e.g. a table) does not exist."""

    code = 5


class AlreadyExistsError(ReverbError, RuntimeError):
    """The entity that an operation tried to create already exists."""

    code = 6


class PermissionDeniedError(ReverbError, RuntimeError):
    """The caller may not perform the operation."""

    code = 7


class ResourceExhaustedError(ReverbError, IndexError):
    """A resource (memory, message size, quota) ran out."""

    code = 8


class FailedPreconditionError(ReverbError, RuntimeError):
    """The system is not in a state in which the operation can run."""

    code = 9


class AbortedError(ReverbError, RuntimeError):
    """The operation was aborted, e.g. by a concurrency conflict."""

    code = 10


class OutOfRangeError(ReverbError, RuntimeError):
    """An operation went past a valid range."""

    code = 11


class UnimplementedError(ReverbError, NotImplementedError):
    """The operation is not implemented or not supported."""

    code = 12


class InternalError(ReverbError, RuntimeError):
    """An invariant of reverb_tf itself was broken: a bug."""

    code = 13


class UnavailableError(ReverbError, RuntimeError):
    """The server could not be reached (not started, stopped, network)."""

    code = 14


class DataLossError(ReverbError, RuntimeError):
    """Unrecoverable data loss or corruption."""

    code = 15


class UnauthenticatedError(ReverbError, RuntimeError):
    """The request lacked valid authentication credentials."""

    code = 16


# The only place where status codes meet exception classes.
_CODE_TO_ERROR: Dict[int, Type[ReverbError]] = {
    cls.code: cls
    for cls in (
        CancelledError,
        UnknownError,
        InvalidArgumentError,
        DeadlineExceededError,
        NotFoundError,
        AlreadyExistsError,
        PermissionDeniedError,
        ResourceExhaustedError,
        FailedPreconditionError,
        AbortedError,
        OutOfRangeError,
        UnimplementedError,
        InternalError,
        UnavailableError,
        DataLossError,
        UnauthenticatedError,
    )
}


def from_status(code: int, message: str) -> ReverbError:
    """Builds the exception for a failed status.

    The native module calls this for every non-OK status it raises, so this
    table is the single mapping between status codes and Python exceptions.

    Args:
      code: The absl/gRPC canonical status code number (1..16).
      message: The status message; kept verbatim as the exception's message.

    Returns:
      An instance of the `ReverbError` subclass for `code`. Codes outside
      1..16 (including 0, OK, which is not a failure) give an `UnknownError`,
      as gRPC itself does for codes it does not know; its message says so.
    """
    cls = _CODE_TO_ERROR.get(code)
    if cls is None:
        return UnknownError(f"(status code {code}) {message}")
    return cls(message)
