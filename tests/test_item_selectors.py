# SPDX-License-Identifier: Apache-2.0
"""Selector descriptions and their validation (no server needed)."""

import math

import pytest

from reverb_tf import item_selectors as selectors


@pytest.mark.parametrize(
    "cls,kind",
    [
        (selectors.Uniform, "uniform"),
        (selectors.Fifo, "fifo"),
        (selectors.Lifo, "lifo"),
        (selectors.MinHeap, "min_heap"),
        (selectors.MaxHeap, "max_heap"),
    ],
)
def test_parameterless_selectors_core_options(cls, kind):
    assert cls()._key() == (kind, 1.0)
    assert cls()._core_options.kind.name == kind
    assert cls().kind == kind
    assert cls() == cls() and hash(cls()) == hash(cls())


@pytest.mark.parametrize("exponent", [0, 0.6, 1, 2.5])
def test_prioritized_core_options(exponent):
    selector = selectors.Prioritized(exponent)
    assert selector._key() == ("prioritized", float(exponent))
    assert selector.priority_exponent == exponent
    assert selectors.Prioritized(priority_exponent=exponent) == selector
    assert "Prioritized" in repr(selector)


@pytest.mark.parametrize("bad", [-0.1, -1, math.nan, math.inf, -math.inf])
def test_prioritized_rejects_bad_exponents(bad):
    with pytest.raises(ValueError, match="priority_exponent"):
        selectors.Prioritized(bad)


@pytest.mark.parametrize("bad", ["x", None, True])
def test_prioritized_rejects_exponents_of_the_wrong_type(bad):
    # A TypeError, as dm-reverb's binding raises.
    with pytest.raises(TypeError, match="priority_exponent must be a number"):
        selectors.Prioritized(bad)


def test_prioritized_requires_exponent():
    with pytest.raises(TypeError):
        selectors.Prioritized()  # pylint: disable=no-value-for-parameter


def test_different_selectors_differ():
    assert selectors.Fifo() != selectors.Lifo()
    assert selectors.Prioritized(0.5) != selectors.Prioritized(0.6)
    assert selectors.MinHeap() != selectors.MaxHeap()


def test_base_class_is_abstract():
    with pytest.raises(TypeError):
        selectors.ItemSelector()


def _reported(selector):
    """The message a table's info reports for `selector` as its sampler."""
    import reverb_tf

    table = reverb_tf.Table(
        "t",
        sampler=selector,
        remover=selectors.Fifo(),
        max_size=10,
        rate_limiter=reverb_tf.rate_limiters.MinSize(1),
    )
    return table.info.sampler_options


def test_table_info_reports_selectors_like_dm_reverb_protos():
    proto = _reported
    prioritized = proto(selectors.Prioritized(0.8))
    assert prioritized.WhichOneof("distribution") == "prioritized"
    assert prioritized.prioritized.priority_exponent == 0.8
    assert not prioritized.is_deterministic and not prioritized.fifo
    min_heap = proto(selectors.MinHeap())
    assert min_heap.heap.min_heap and min_heap.is_deterministic
    max_heap = proto(selectors.MaxHeap())
    assert max_heap.HasField("heap") and not max_heap.heap.min_heap
    assert proto(selectors.Fifo()).fifo
    assert proto(selectors.Lifo()).lifo
    uniform = proto(selectors.Uniform())
    assert uniform.uniform and not uniform.is_deterministic
    assert proto(selectors.HeapSelector(True)) == min_heap


def test_selectors_alias_module():
    import reverb_tf
    from reverb_tf.selectors import MaxHeap  # noqa: F401  (must import)

    assert reverb_tf.selectors is selectors


@pytest.mark.parametrize(
    "selector, short",
    [
        (selectors.Uniform(), "Uniform"),
        (selectors.Fifo(), "Fifo"),
        (selectors.Lifo(), "Lifo"),
        (selectors.MinHeap(), "MinHeap"),
        (selectors.MaxHeap(), "MaxHeap"),
        (selectors.Prioritized(0.8), "Prioritized(0.8)"),
    ],
)
def test_reported_options_round_trip_and_describe(selector, short):
    # The message a table reports for a selector (filled in by the native
    # core) reads back as the same selector (server_from_proto) and prints as
    # the CLI shows it.
    message = _reported(selector)
    back = selectors.from_options_proto(message)
    assert back == selector and type(back) is type(selector)
    assert selectors.describe(message) == short


def test_from_options_proto_refuses_a_false_flag_and_no_distribution():
    from reverb_tf.cc import schema_pb2

    with pytest.raises(ValueError, match="'fifo' is chosen but set to false"):
        selectors.from_options_proto(_false_fifo(schema_pb2))
    with pytest.raises(NotImplementedError, match="distribution=None"):
        selectors.from_options_proto(schema_pb2.KeyDistributionOptions())


def _false_fifo(schema_pb2):
    # A oneof member set to its default still counts as chosen once touched.
    message = schema_pb2.KeyDistributionOptions()
    message.fifo = True
    message.fifo = False
    return message
