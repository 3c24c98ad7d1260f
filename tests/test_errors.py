# SPDX-License-Identifier: Apache-2.0
"""The status-code -> exception mapping of reverb_tf.errors."""

import pytest

from reverb_tf import errors

# Canonical absl/gRPC codes, the class each maps to, and the builtin exception
# a dm-reverb user catches for it.
CASES = [
    (1, errors.CancelledError, RuntimeError),
    (2, errors.UnknownError, RuntimeError),
    (3, errors.InvalidArgumentError, ValueError),
    (4, errors.DeadlineExceededError, TimeoutError),
    (5, errors.NotFoundError, RuntimeError),
    (6, errors.AlreadyExistsError, RuntimeError),
    (7, errors.PermissionDeniedError, RuntimeError),
    (8, errors.ResourceExhaustedError, IndexError),
    (9, errors.FailedPreconditionError, RuntimeError),
    (10, errors.AbortedError, RuntimeError),
    (11, errors.OutOfRangeError, RuntimeError),
    (12, errors.UnimplementedError, NotImplementedError),
    (13, errors.InternalError, RuntimeError),
    (14, errors.UnavailableError, RuntimeError),
    (15, errors.DataLossError, RuntimeError),
    (16, errors.UnauthenticatedError, RuntimeError),
]


@pytest.mark.parametrize("code,cls,builtin", CASES)
def test_every_code_maps_to_its_class(code, cls, builtin):
    error = errors.from_status(code, "some message")
    assert type(error) is cls
    assert isinstance(error, errors.ReverbError)
    assert isinstance(error, builtin)
    assert error.code == code
    assert str(error) == "some message"


def test_mapping_is_one_to_one():
    classes = [cls for _, cls, _ in CASES]
    assert len(set(classes)) == len(classes) == 16


@pytest.mark.parametrize("code", [0, 17, -1, 1000])
def test_unknown_codes_become_unknown_error_keeping_the_message(code):
    error = errors.from_status(code, "boom")
    assert type(error) is errors.UnknownError
    assert "boom" in str(error) and str(code) in str(error)


@pytest.mark.parametrize(
    "message", ["Deadline Exceeded", "Timeout exceeded", "not found", "invalid argument", ""]
)
def test_class_depends_on_code_only_never_on_message(message):
    # A message that names another error must not change the class.
    assert type(errors.from_status(5, message)) is errors.NotFoundError
    assert type(errors.from_status(3, message)) is errors.InvalidArgumentError


def test_deadline_exceeded_is_exported_at_top_level():
    import reverb_tf

    assert reverb_tf.DeadlineExceededError is errors.DeadlineExceededError
    assert reverb_tf.ReverbError is errors.ReverbError
    with pytest.raises(TimeoutError):
        raise errors.from_status(4, "late")
