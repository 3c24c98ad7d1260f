# SPDX-License-Identifier: Apache-2.0
"""An Ape-X-style job on Ray: K actor processes, N replay shards, one learner.

* `ReplayCluster` starts N replay shards as Ray actors (one prioritized table
  each, checkpointed every few seconds).
* K actors, each a Ray actor process, run a toy environment and write
  overlapping 3-step trajectories with priorities through one
  `TrajectoryWriter`; every writer lands on the shard with the fewest.
* The learner (this process) reads one `ReverbDataset` over all shards,
  computes a toy TD error in a `tf.function` and writes it back as new
  priorities through `TFClient.update_priorities`.
* At the end it checks, shard by shard, that every item the learner updated
  carries the priority the learner gave it: updates landed on the shard that
  holds the key, and none was skipped.

Run it from a checkout (after `bash scripts/setup.sh`):

    .venv/bin/python examples/apex_ray.py --shards 3 --actors 3
"""

import argparse
import tempfile
import time

import numpy as np
import ray
import tensorflow as tf

import reverb_tf as reverb
from reverb_tf import ray as reverb_ray

OBS = 4
SIGNATURE = {"obs": tf.TensorSpec([3, OBS], tf.float32), "reward": tf.TensorSpec([3], tf.float32)}


@ray.remote(num_cpus=0.1)
class Actor:
    """One actor process: a toy environment and one writer."""

    def run(self, addresses, actor_id, steps):
        rng = np.random.default_rng(actor_id)
        client = reverb.Client(addresses)
        with client.trajectory_writer(num_keep_alive_refs=3) as writer:
            for t in range(steps):
                writer.append(
                    {
                        "obs": rng.normal(size=OBS).astype(np.float32) + actor_id,
                        "reward": np.float32(rng.random()),
                    }
                )
                if t % 50 >= 2:  # 50-step episodes; items from their third step on
                    writer.create_item(
                        "replay",
                        priority=float(1 + rng.random()),
                        trajectory={
                            "obs": writer.history["obs"][-3:],
                            "reward": writer.history["reward"][-3:],
                        },
                    )
                if t % 50 == 49:
                    writer.end_episode()
            writer.flush()
        return steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shards", type=int, default=3)
    parser.add_argument("--actors", type=int, default=3)
    parser.add_argument("--steps", type=int, default=2000, help="per actor")
    parser.add_argument("--learner_steps", type=int, default=40)
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    table = reverb.Table(
        "replay",
        reverb.selectors.Prioritized(0.6),
        reverb.selectors.Fifo(),
        max_size=100_000,
        rate_limiter=reverb.rate_limiters.MinSize(100),
        signature=SIGNATURE,
    )
    with (
        tempfile.TemporaryDirectory() as root,
        reverb_ray.ReplayCluster(
            [table], args.shards, root, cpus_per_shard=0.2, checkpoint_interval=5.0
        ) as cluster,
    ):
        print(f"{args.shards} shards: {', '.join(cluster.addresses)}")
        started = time.monotonic()
        actors = [Actor.remote() for _ in range(args.actors)]
        runs = [a.run.remote(cluster.addresses, i, args.steps) for i, a in enumerate(actors)]
        # The learner starts while the actors write (MinSize(100) per shard
        # holds its first samples back until a shard has that many).
        dataset = (
            reverb.ReverbDataset.from_table_signature(
                cluster.addresses, "replay", max_in_flight_samples_per_worker=2 * args.batch
            )
            .batch(args.batch)
            .prefetch(2)
        )
        tf_client = reverb.TFClient(cluster.addresses)

        @tf.function
        def learner_step(batch):
            # A toy TD error: the spread of the trajectory's rewards.
            td_error = tf.math.reduce_std(batch.data["reward"], axis=1) + 1e-3
            priorities = tf.cast(td_error, tf.float64)
            tf_client.update_priorities("replay", batch.info.key, priorities)
            return batch.info.key, priorities

        given = {}
        for batch in dataset.take(args.learner_steps):
            keys, priorities = learner_step(batch)
            given.update(zip(keys.numpy().tolist(), priorities.numpy().tolist()))
        ray.get(runs)
        elapsed = time.monotonic() - started
        info = cluster.client().server_info_by_shard(timeout=30)
        sizes = {address: tables["replay"].current_size for address, tables in info.items()}
        print(
            f"{args.actors} actors wrote {sum(sizes.values())} items in {elapsed:.1f} s; "
            f"per shard: {sizes}"
        )
        print(f"the learner updated {len(given)} distinct items in {args.learner_steps} steps")

        # Each shard: the items the learner updated carry what it gave them.
        # The learner's last value of a key is the one its last update set.
        checked = 0
        for address, size in sizes.items():
            if size < 100:  # MinSize(100): nothing to sample there
                continue
            for sample in reverb.Client(address).sample(
                "replay", 2000, emit_timesteps=False, rate_limiter_timeout_ms=10_000
            ):
                key = int(sample.info.key)
                if key in given:
                    assert abs(sample.info.priority - given[key]) < 1e-9, (address, key)
                    checked += 1
        assert checked > 0
        print(
            f"checked {checked} sampled items against the learner's updates: "
            "every update landed on the shard that holds its key"
        )


if __name__ == "__main__":
    main()
