# SPDX-License-Identifier: Apache-2.0
"""A checkpoint written by an older file format still loads.

`tests/data/checkpoint-format-0/` was written by reverb_tf before the
checkpoint header had a table message and a format version of its own
(format 0: the header held the wire's TableInfo). Two tables: "prio"
(Prioritized/Fifo) with three 3-step items of priorities 2, 3 and 4, one of
them sampled once, and "queue" (Table.queue, 10) with three 2-step items.
A server of today must load it with every item, priority and step, and the
queue's order.
"""

import shutil

import numpy as np

import reverb_tf as reverb

from integration import DATA_DIR


def _tables():
    return [
        reverb.Table(
            "prio",
            reverb.selectors.Prioritized(0.8),
            reverb.selectors.Fifo(),
            100,
            reverb.rate_limiters.MinSize(1),
        ),
        reverb.Table.queue("queue", 10),
    ]


def test_a_format_0_checkpoint_loads_with_every_item(tmp_path):
    shutil.copytree(DATA_DIR / "checkpoint-format-0", tmp_path / "checkpoints")
    checkpointer = reverb.checkpointers.DefaultCheckpointer(str(tmp_path / "checkpoints"))
    with reverb.Server(_tables(), checkpointer=checkpointer) as server:
        assert server._server.loaded_checkpoint  # pylint: disable=protected-access
        client = reverb.Client(f"localhost:{server.port}")
        info = client.server_info()
        assert info["prio"].current_size == 3
        assert info["queue"].current_size == 3
        assert info["prio"].num_unique_samples == 1
        # Every prioritized item, read with its priority and times_sampled.
        seen = {}
        for _ in range(60):
            sample = next(client.sample("prio", emit_timesteps=False))
            last = int(sample.data[0])  # columns flattened: act, obs
            seen[last] = (sample.info.priority, sample.data[1])
        assert sorted(seen) == [2, 3, 4]
        for last, (priority, obs) in seen.items():
            assert priority == float(last)
            np.testing.assert_array_equal(
                obs, np.stack([np.full(3, i, np.float32) for i in range(last - 2, last + 1)])
            )
        # The queue comes back in its order, each item once.
        queued = [
            next(client.sample("queue", emit_timesteps=False)).data[0].tolist() for _ in range(3)
        ]
        assert queued == [[1, 2], [2, 3], [3, 4]]
