# SPDX-License-Identifier: Apache-2.0
"""The main job: a replay server, actors writing trajectories, a TF learner.

Runs a reverb_tf server in this process, two actor threads writing episodes
of a toy environment as overlapping 3-step trajectories into a prioritized
table (rate limited to 4 samples per insert), and a learner that reads
batches through the tf.data source `ReverbDataset` (a C++ kernel streaming
from the server), computes a toy TD-error in a `tf.function` and writes it
back as priorities, then prints what happened.
"""

import tempfile
import threading
import time

import numpy as np
import tensorflow as tf

import reverb_tf as reverb

TRAJECTORY = 3
EPISODES_PER_ACTOR = 40
EPISODE_LENGTH = 50


def actor(client: reverb.Client, seed: int) -> None:
    rng = np.random.default_rng(seed)
    with client.trajectory_writer(num_keep_alive_refs=TRAJECTORY) as writer:
        for _ in range(EPISODES_PER_ACTOR):
            observation = rng.normal(size=4).astype(np.float32)
            for t in range(EPISODE_LENGTH):
                action = np.int32(rng.integers(2))
                writer.append(
                    {
                        "observation": observation,
                        "action": action,
                        "reward": np.float32(rng.normal()),
                    }
                )
                observation = observation + rng.normal(scale=0.1, size=4).astype(np.float32)
                if t + 1 >= TRAJECTORY:
                    writer.create_item(
                        "replay",
                        priority=1.0,
                        trajectory={
                            "observation": writer.history["observation"][-TRAJECTORY:],
                            "action": writer.history["action"][-TRAJECTORY:],
                            "reward": writer.history["reward"][-TRAJECTORY:],
                        },
                    )
            writer.end_episode(timeout_ms=60_000)


def make_table() -> reverb.Table:
    return reverb.Table(
        name="replay",
        sampler=reverb.selectors.Prioritized(priority_exponent=0.8),
        remover=reverb.selectors.Fifo(),
        max_size=10_000,
        rate_limiter=reverb.rate_limiters.SampleToInsertRatio(
            samples_per_insert=4.0, min_size_to_sample=100, error_buffer=400.0
        ),
        signature={
            "observation": tf.TensorSpec([TRAJECTORY, 4], tf.float32),
            "action": tf.TensorSpec([TRAJECTORY], tf.int32),
            "reward": tf.TensorSpec([TRAJECTORY], tf.float32),
        },
    )


def main() -> None:
    checkpointer = reverb.checkpointers.DefaultCheckpointer(
        tempfile.mkdtemp(prefix="reverb_tf_demo_")
    )
    with reverb.Server(tables=[make_table()], checkpointer=checkpointer) as server:
        address = f"localhost:{server.port}"
        print(f"server listening on {address}")
        start = time.time()
        actors = [
            threading.Thread(target=actor, args=(reverb.Client(address), seed)) for seed in range(2)
        ]
        for thread in actors:
            thread.start()

        learner = reverb.Client(address)
        # The dataset ends when the rate limiter has held it back for 2 s,
        # i.e. once the actors are done and the ratio is reached.
        dataset = reverb.ReverbDataset.from_table_signature(
            address, "replay", max_in_flight_samples_per_worker=256, rate_limiter_timeout_ms=2000
        ).batch(64)

        @tf.function
        def td_error(batch):
            values = tf.reduce_sum(batch.data["observation"], axis=-1)  # [B, T]
            target = batch.data["reward"][:, 0] + 0.99 * values[:, 1]
            return tf.abs(target - values[:, 0]) + 1e-3

        sampled = updates = 0
        expected_items = 2 * EPISODES_PER_ACTOR * (EPISODE_LENGTH - TRAJECTORY + 1)
        for batch in dataset:
            priorities = td_error(batch).numpy()
            keys = batch.info.key.numpy()
            learner.mutate_priorities(
                "replay", updates={int(k): float(p) for k, p in zip(keys, priorities)}
            )
            sampled += len(keys)
            updates += len(keys)
        for thread in actors:
            thread.join()

        info = learner.server_info()["replay"]
        seconds = time.time() - start
        stats = info.rate_limiter_info
        print(
            f"{stats.insert_stats.completed} items written by 2 actors "
            f"(expected {expected_items}), {sampled} sampled and {updates} priorities "
            f"updated by the tf.data learner in {seconds:.1f} s"
        )
        print(
            f"table size {info.current_size} / {info.max_size}; server-side samples per insert "
            f"{stats.sample_stats.completed / max(1, stats.insert_stats.completed):.2f}"
            f" (target 4)"
        )
        start = time.time()
        path = learner.checkpoint()
        print(
            f"checkpoint of {info.current_size} items written to {path} "
            f"in {time.time() - start:.2f} s"
        )

    # A new server with the same checkpointer starts from that checkpoint.
    start = time.time()
    with reverb.Server(tables=[make_table()], checkpointer=checkpointer) as server:
        restored = reverb.Client(f"localhost:{server.port}").server_info()["replay"]
        print(
            f"restarted from {server.loaded_checkpoint} in {time.time() - start:.2f} s: "
            f"{restored.current_size} items"
        )


if __name__ == "__main__":
    main()
