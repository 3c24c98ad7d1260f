# SPDX-License-Identifier: Apache-2.0
"""The small-item workload of our benchmarks (the replay benchmark's scenario a).

Each step is `{observation: f32[4], action: i32, reward: f32}`, written with
`num_keep_alive_refs=1` and one item per step, flushing every 24 items, as
the team's side-by-side replay benchmark does.
"""

import numpy as np

COLUMNS = ("observation", "action", "reward")


def write_small_items(writer, table: str, n: int, start: int = 0) -> None:
    """Appends `n` steps to `writer` and creates one item per step in `table`.

    Args:
      writer: A `TrajectoryWriter` made with `num_keep_alive_refs=1`.
      table: The table the items go to.
      n: How many steps (and items).
      start: Value of the first step (steps differ, as in the harness).
    """
    for i in range(start, start + n):
        writer.append(
            {
                "observation": np.full(4, i, np.float32),
                "action": np.int32(i),
                "reward": np.float32(1),
            }
        )
        writer.create_item(table, 1.0, {k: writer.history[k][-1] for k in COLUMNS})
        if (i - start) % 24 == 23:
            writer.flush(block_until_num_items=24)
    writer.flush()
