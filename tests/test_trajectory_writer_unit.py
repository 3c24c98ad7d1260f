# SPDX-License-Identifier: Apache-2.0
"""TrajectoryWriter's Python adapter, checked against what it hands the native writer.

`RecordingCoreWriter` wraps a real `_core.TrajectoryWriter` (of a client of
an in-process server) and records what the adapter passes it, so these tests
pin down how steps become column rows and how history references become
`(column, steps, squeeze)` entries, while the native writer does what it
does in production: numbering steps, keeping the keep-alive window, checking
values and signatures, serving `numpy()`. Behaviour against the server's
tables is in test_writer_integration.py.
"""

import collections

import numpy as np
import pytest

import reverb_tf
from reverb_tf import errors
from reverb_tf import signatures
from reverb_tf import trajectory_writer
from integration import GeneralPathOnly


@pytest.fixture(scope="module")
def server():
    server = reverb_tf.Server(
        [reverb_tf.Table.queue("t", 1000), reverb_tf.Table.queue("free", 1000)]
    )
    yield server
    server.stop()


class RecordingCoreWriter(GeneralPathOnly):
    """Forwards to a real native writer, recording the adapter's calls.

    The native common-case paths are declined, so that the general
    conversion is what these tests record; test_writer_integration checks
    that the common paths store the same.
    """

    def __init__(self, core):
        super().__init__(core)
        self.calls = []
        self.rows = []
        self.items = []

    def append(self, columns, partial_step=False):
        was_open = self._core.step_open
        step = self._core.append(columns, partial_step)
        self.calls.append(("append", partial_step))
        if was_open:
            self.rows[-1].extend([None] * (len(columns) - len(self.rows[-1])))
            for i, value in enumerate(columns):
                if value is not None:
                    self.rows[-1][i] = value
        else:
            self.rows.append(list(columns))
        return step

    def create_item(self, table, priority, columns):
        self._core.create_item(table, priority, columns)
        self.items.append((table, priority, columns))

    def flush(self, block_until_num_items, timeout_s):
        self.calls.append(("flush", block_until_num_items, timeout_s))
        self._core.flush(block_until_num_items, timeout_s)

    def end_episode(self, clear_buffers, timeout_s):
        self.calls.append(("end_episode", clear_buffers, timeout_s))
        self._core.end_episode(clear_buffers, timeout_s)

    def configure(self, column, num_keep_alive_refs, max_chunk_length):
        self.calls.append(("configure", column, num_keep_alive_refs, max_chunk_length))
        self._core.configure(column, num_keep_alive_refs, max_chunk_length)

    def close(self):
        self.calls.append(("close",))
        self._core.close()


@pytest.fixture
def make_writer(server):
    client = reverb_tf.Client(f"localhost:{server.port}")
    writers = []

    def make(keep_alive=5, signature=None):
        core = RecordingCoreWriter(client._client.new_writer(keep_alive, None, 1 << 20))  # pylint: disable=protected-access
        get_signature = None if signature is None else (lambda table: signature.get(table))
        writer = trajectory_writer.TrajectoryWriter(core, get_signature)
        writers.append(writer)
        return writer, core

    yield make
    for writer in writers:
        writer.close()


def test_steps_become_rows_of_flat_columns(make_writer):
    writer, core = make_writer()
    writer.append({"obs": np.arange(3, dtype=np.float32), "a": 1})
    writer.append({"obs": np.ones(3, np.float32), "a": 2})
    # Columns are created in tree.flatten order of the first step.
    assert [np.asarray(r[0]).tolist() for r in core.rows] == [1, 2]
    assert [np.asarray(r[1]).tolist() for r in core.rows] == [[0, 1, 2], [1, 1, 1]]
    # The native writer holds the values: numpy() reads them back from it.
    np.testing.assert_array_equal(writer.history["a"][:].numpy(), [1, 2])
    assert writer.episode_steps == 2


def test_history_indexing_to_entries(make_writer):
    writer, core = make_writer()
    for i in range(4):
        writer.append({"x": np.float32(i), "y": np.int32(i)})
    h = writer.history
    writer.create_item(
        "t",
        2.0,
        {
            "last": h["x"][-1],
            "first": h["y"][0],
            "all": h["x"][:],
            "pair": h["y"][[0, 3]],
            "mid": h["x"][1:3],
        },
    )
    table, priority, columns = core.items[0]
    assert (table, priority) == ("t", 2.0)
    # tree.flatten order of the trajectory: all, first, last, mid, pair.
    assert columns == [
        (0, [0, 1, 2, 3], False),
        (1, [0], True),
        (0, [3], True),
        (0, [1, 2], False),
        (1, [0, 3], False),
    ]


def test_trajectory_column_shape_dtype_numpy_and_copying(make_writer):
    writer, _ = make_writer()
    obs = np.zeros(2, np.float32)
    for i in range(3):
        obs[:] = i  # The caller reuses its buffer.
        writer.append({"obs": obs})
    column = writer.history["obs"][-2:]
    assert column.shape == (2, 2) and column.dtype == np.float32
    np.testing.assert_array_equal(column.numpy(), [[1, 1], [2, 2]])
    last = writer.history["obs"][-1]
    assert last.shape == (2,) and last.is_squeezed
    np.testing.assert_array_equal(last.numpy(), [2, 2])
    assert len(column) == 2 and column[0].is_squeezed and column[0].shape == (2,)
    assert column[1:]._entry == (0, [2], False)


def test_keep_alive_window(make_writer):
    writer, _ = make_writer(keep_alive=2)
    for i in range(4):
        writer.append({"x": i})
    assert writer.history["x"][-2:]._entry == (0, [2, 3], False)
    assert writer.history["x"][2]._entry == (0, [2], True)
    with pytest.raises(ValueError, match="keep-alive"):
        writer.history["x"][-3]
    with pytest.raises(ValueError, match="keep-alive"):
        writer.history["x"][0:2]
    with pytest.raises(IndexError):
        writer.history["x"][4]
    with pytest.raises(IndexError):
        writer.history["x"][-5]
    assert len(writer.history["x"]) == 4


def test_new_fields_and_missing_fields(make_writer):
    writer, core = make_writer()
    writer.append({"obs": 1})
    writer.append({"obs": 2, "action": 10})
    writer.append({"action": 11})
    assert [len(r) for r in core.rows] == [1, 2, 2]
    assert core.rows[2][0] is None and np.asarray(core.rows[0][0]).tolist() == 1
    h = writer.history
    assert set(h) == {"obs", "action"}
    with pytest.raises(ValueError, match="no value"):
        h["action"][0]  # Before the field existed.
    with pytest.raises(ValueError, match="no value"):
        h["obs"][-1]  # Omitted in the last step.
    assert h["action"][1:]._entry == (1, [1, 2], False)


def test_nested_steps_and_history_structure(make_writer):
    Step = collections.namedtuple("Step", ["o", "r"])
    writer, core = make_writer()
    writer.append({"s": Step(o=np.zeros(2), r=0.0), "l": [1, 2]})
    writer.append({"s": Step(o=np.ones(2), r=1.0), "l": [3, 4]})
    h = writer.history
    assert isinstance(h["s"], Step) and len(h["l"]) == 2
    writer.create_item("t", 1.0, [h["s"].o[-1], h["l"][1][:]])
    # Columns in flatten order of the first step: l/0, l/1, s/o, s/r.
    assert core.items[0][2] == [(2, [1], True), (1, [0, 1], False)]
    # A whole sub-structure given as None is missing in that step.
    writer.append({"s": None, "l": [5, 6]})
    assert core.rows[-1][2] is None and core.rows[-1][3] is None


def test_dtype_and_shape_fixed_by_first_value(make_writer):
    writer, _ = make_writer()
    writer.append({"obs": np.zeros(3, np.float32)})
    with pytest.raises(
        errors.InvalidArgumentError,
        match=r"wrong dtype provided for column \('obs',\)\. Got double but expected float\.",
    ):
        writer.append({"obs": np.zeros(3, np.float64)})
    with pytest.raises(
        ValueError,
        match=r"incompatible shape provided for column \('obs',\)\. Got "
        r"\[4\] which is incompatible with \[3\]\.",
    ):
        writer.append({"obs": np.zeros(4, np.float32)})


def test_strings_are_object_columns(make_writer):
    writer, core = make_writer()
    writer.append({"s": "ab"})
    writer.append({"s": "longer"})
    assert writer.history["s"][-1].dtype == object
    assert writer.history["s"][:].numpy().tolist() == [b"ab", b"longer"]


def test_structure_change_between_leaf_and_nest_is_rejected(make_writer):
    writer, _ = make_writer()
    writer.append({"a": 1})
    with pytest.raises(errors.InvalidArgumentError, match="'a'"):
        writer.append({"a": {"b": 1}})


def test_partial_steps_fill_the_same_step(make_writer):
    writer, core = make_writer()
    writer.append({"obs": 1}, partial_step=True)
    assert writer.episode_steps == 0
    # The open step's cells can be referenced at once.
    writer.create_item("t", 1.0, writer.history["obs"][-1])
    writer.append({"action": 7})
    assert writer.episode_steps == 1
    assert (
        len(core.rows) == 1
        and np.asarray(core.rows[0][0]).tolist() == 1
        and np.asarray(core.rows[0][1]).tolist() == 7
    )
    assert core.calls[:2] == [("append", True), ("append", False)]
    assert writer.history["action"][-1]._entry == (1, [0], True)
    writer.append({"obs": 2}, partial_step=True)
    with pytest.raises(
        errors.InvalidArgumentError,
        match=r"Field \('obs',\) has already been set in the active step",
    ):
        writer.append({"obs": 3})
    with pytest.raises(errors.FailedPreconditionError):
        writer.end_episode()


def test_end_episode_clears_history_and_invalidates_old_references(make_writer):
    writer, core = make_writer()
    writer.append({"x": 1})
    writer.append({"x": 2})
    old = writer.history["x"][-1]
    writer.end_episode(timeout_ms=1500)
    assert core.calls[-1] == ("end_episode", True, 1.5)
    assert writer.episode_steps == 0 and len(writer.history["x"]) == 0
    with pytest.raises(IndexError):
        writer.history["x"][-1]
    writer.append({"x": 3})
    with pytest.raises(ValueError, match="end_episode"):
        writer.create_item("t", 1.0, old)
    writer.create_item("t", 1.0, writer.history["x"][-1])
    # Step ids run on across episodes: the new episode's first step is the
    # writer's third.
    assert core.items[-1][2] == [(0, [2], True)]


def test_end_episode_keeping_buffers(make_writer):
    writer, core = make_writer()
    writer.append({"x": 1})
    writer.end_episode(clear_buffers=False)
    assert core.calls[-1] == ("end_episode", False, None)
    assert writer.episode_steps == 0 and len(writer.history["x"]) == 1
    writer.history["x"][-1]


def test_create_item_rejects_non_columns(make_writer):
    writer, _ = make_writer()
    writer.append({"x": 1})
    with pytest.raises(TypeError, match="TrajectoryColumn"):
        writer.create_item("t", 1.0, {"x": np.zeros(1)})
    other, _ = make_writer()
    other.append({"x": 1})
    with pytest.raises(ValueError, match="another writer"):
        writer.create_item("t", 1.0, other.history["x"][-1])


def test_signature_check_names_the_column(make_writer):
    signature = {
        "t": [
            signatures.Column("obs", np.dtype(np.float32), (-1, 4)),
            signatures.Column("r", np.dtype(np.float32), ()),
        ],
        "free": None,
    }
    writer, core = make_writer(signature=signature)
    for _ in range(3):
        writer.append(
            {"obs": np.zeros(4, np.float32), "r": np.float32(0), "bad": np.zeros(5, np.float32)}
        )
    h = writer.history
    writer.create_item("t", 1.0, {"obs": h["obs"][-3:], "r": h["r"][-1]})
    writer.create_item("t", 1.0, {"obs": h["obs"][-2:], "r": h["r"][-1]})
    with pytest.raises(
        errors.InvalidArgumentError,
        match=r"table 't'.*column 'obs' must be float32\[-1, 4\] .* but the item has float32\[4\]",
    ):
        writer.create_item("t", 1.0, {"obs": h["obs"][-1], "r": h["r"][-1]})
    with pytest.raises(
        errors.InvalidArgumentError, match=r"'obs' \(data path 'bad'\) .* float32\[2, 5\]"
    ):
        writer.create_item("t", 1.0, {"obs": h["bad"][-2:], "r": h["r"][-1]})
    with pytest.raises(errors.InvalidArgumentError, match="column 'obs' \\(data path 'bad'\\)"):
        writer.create_item("t", 1.0, [h["bad"][-2:], h["r"][-1]])
    with pytest.raises(errors.InvalidArgumentError, match="2 columns"):
        writer.create_item("t", 1.0, {"obs": h["obs"][-2:]})
    writer.create_item("free", 1.0, h["bad"][-1])
    assert len(core.items) == 3


def test_flush_configure_close(make_writer):
    writer, core = make_writer(keep_alive=4)
    writer.configure(("x",), num_keep_alive_refs=2, max_chunk_length=1)
    writer.append({"x": 1, "y": 2})
    assert ("configure", 0, 2, 1) in core.calls
    writer.configure(("y",), num_keep_alive_refs=3, max_chunk_length=None)
    assert core.calls[-1] == ("configure", 1, 3, None)
    for i in range(3):
        writer.append({"x": i, "y": i})
    with pytest.raises(ValueError, match="keep-alive"):
        writer.history["x"][-3]
    writer.history["y"][-3]
    with pytest.raises(ValueError):
        writer.configure(("x",), num_keep_alive_refs=0, max_chunk_length=None)
    with pytest.raises(ValueError):
        writer.configure(("x",), num_keep_alive_refs=2, max_chunk_length=3)
    writer.flush(block_until_num_items=3, timeout_ms=250)
    assert core.calls[-1] == ("flush", 3, 0.25)
    with pytest.raises(ValueError):
        writer.flush(-1)
    with writer:
        pass
    # Leaving the block flushes, then closes the stream.
    assert core.calls[-2:] == [("flush", 0, None), ("close",)]
    writer.close()
    writer.close()
    assert core.calls.count(("close",)) == 1


def test_history_before_append(make_writer):
    writer, _ = make_writer()
    with pytest.raises(RuntimeError):
        writer.history


def test_cells_and_columns_read_their_values_from_the_native_writer(make_writer):
    writer, _ = make_writer(keep_alive=2)
    writer.append({"x": np.array([1, 2], np.int16)})
    writer.append({"x": np.array([3, 4], np.int16)})
    column = writer.history["x"][np.int64(-2) :]
    cells = list(column)
    assert [c.shape for c in cells] == [[2], [2]] and cells[0].dtype == np.int16
    assert not any(c.expired for c in cells)
    np.testing.assert_array_equal(cells[1].numpy(), [3, 4])
    np.testing.assert_array_equal(column[[1, 0]].numpy(), [[3, 4], [1, 2]])
    np.testing.assert_array_equal(column[np.int64(0)].numpy(), [1, 2])
    np.testing.assert_array_equal(writer.history["x"][np.array([0, 1])].numpy(), [[1, 2], [3, 4]])
    assert column[:0].numpy().shape == (0, 2)
    assert "steps=[0, 1]" in repr(column) and "'x'" in repr(cells[0])
    with pytest.raises(TypeError):
        column["a"]
    with pytest.raises(TypeError):
        writer.history["x"]["a"]
    with pytest.raises(TypeError):
        trajectory_writer.TrajectoryColumn()
    # Step 0 leaves the window: its cell expires and its data is gone, from
    # the native writer as from dm-reverb's.
    writer.append({"x": np.array([5, 6], np.int16)})
    assert cells[0].expired and not cells[1].expired
    with pytest.raises(RuntimeError, match="no longer holds step 0"):
        column.numpy()
    with pytest.raises(RuntimeError, match="WeakCellRef"):
        cells[0].numpy()
    np.testing.assert_array_equal(column[1:].numpy(), [[3, 4]])
    # A clear expires everything cut before it.
    kept = writer.history["x"][-1]
    writer.end_episode()
    assert list(kept)[0].expired
    with pytest.raises(RuntimeError, match="TrajectoryColumn"):
        kept.numpy()
