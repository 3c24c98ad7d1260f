# SPDX-License-Identifier: Apache-2.0
"""reverb_tf.ray on a real local Ray cluster (2 CPUs, no dashboard).

Shards are Ray actors holding in-process servers; actors and learners are
Ray actors and this test process. Every item carries a value of its shard's
range (shard i: i * 1000 + j), so a sample tells which shard it came from.
"""

import os
import time

import numpy as np
import pytest
import ray
import tensorflow as tf

import reverb_tf as reverb
from reverb_tf import ray as reverb_ray

SIGNATURE = {"x": tf.TensorSpec([], tf.int32)}


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


def _tables():
    return [
        reverb.Table(
            "t",
            reverb.selectors.Uniform(),
            reverb.selectors.Fifo(),
            100_000,
            reverb.rate_limiters.MinSize(1),
            signature=SIGNATURE,
        ),
        reverb.Table(
            "p",
            reverb.selectors.Prioritized(1.0),
            reverb.selectors.Fifo(),
            100_000,
            reverb.rate_limiters.MinSize(1),
            signature=SIGNATURE,
        ),
    ]


@ray.remote(num_cpus=0.1)
class Actor:
    """An actor process with one writer, on whichever shard its client picks."""

    def open(self, addresses, table):
        self._table = table
        self._writer = reverb.Client(addresses).trajectory_writer(num_keep_alive_refs=1)
        self.write([-1])  # the writer's stream is open from here on

    def write(self, values):
        for value in values:
            self._writer.append({"x": np.int32(value)})
            self._writer.create_item(self._table, 1.0, {"x": self._writer.history["x"][-1]})
        self._writer.flush()
        return len(values)

    def close(self):
        self._writer.close()


def _write(address, table, values):
    with reverb.Client(address).trajectory_writer(num_keep_alive_refs=1) as writer:
        for value in values:
            writer.append({"x": np.int32(value)})
            writer.create_item(table, 1.0, {"x": writer.history["x"][-1]})


def test_shards_serve_one_dataset_in_proportion_and_info_adds_up(tmp_path):
    with reverb_ray.ReplayCluster(_tables(), 3, str(tmp_path), cpus_per_shard=0.25) as cluster:
        assert len(set(cluster.addresses)) == 3
        assert [s["index"] for s in cluster.status()] == [0, 1, 2]
        for i, count in enumerate([100, 200, 300]):
            _write(cluster.addresses[i], "t", range(i * 1000, i * 1000 + count))
        # Actor processes coming up one after another open their writers on
        # the shard with the fewest, so three of them take one shard each.
        actors = [Actor.remote() for _ in range(3)]
        for actor in actors:
            ray.get(actor.open.remote(cluster.addresses, "p"))
        ray.get([a.write.remote(range(9)) for a in actors])
        ray.get([a.close.remote() for a in actors])
        by_shard = cluster.client().server_info_by_shard(timeout=30)
        assert sorted(info["p"].current_size for info in by_shard.values()) == [10, 10, 10]
        total = cluster.client().server_info(timeout=30)
        assert total["t"].current_size == 600 and total["p"].current_size == 30

        dataset = reverb.ReverbDataset.from_table_signature(
            cluster.addresses, "t", max_in_flight_samples_per_worker=32
        ).batch(100)
        values = np.concatenate([b.data["x"].numpy() for b in dataset.take(60)])
        np.testing.assert_allclose(
            np.bincount(values // 1000, minlength=3) / len(values), [1 / 6, 1 / 3, 1 / 2], atol=0.03
        )


def test_priority_updates_from_a_sharded_dataset_change_only_the_owning_shard(tmp_path):
    with reverb_ray.ReplayCluster(_tables(), 2, str(tmp_path), cpus_per_shard=0.25) as cluster:
        for i in range(2):
            _write(cluster.addresses[i], "p", range(i * 1000, i * 1000 + 50))
        dataset = reverb.ReverbDataset.from_table_signature(
            cluster.addresses, "p", max_in_flight_samples_per_worker=16
        ).batch(25)
        tf_client = reverb.TFClient(cluster.addresses)

        @tf.function
        def learner_step(batch):
            # Only shard 0's items are given priority 50.
            mine = tf.equal(batch.data["x"] // 1000, 0)
            keys = tf.boolean_mask(batch.info.key, mine)
            tf_client.update_priorities(
                "p", keys, tf.fill(tf.shape(keys), tf.constant(50.0, tf.float64))
            )
            return keys

        updated = set()
        for batch in dataset.take(10):
            updated.update(int(k) for k in learner_step(batch).numpy())
        assert updated
        for i, address in enumerate(cluster.addresses):
            for sample in reverb.Client(address).sample(
                "p", 300, emit_timesteps=False, unpack_as_table_signature=True
            ):
                assert int(sample.data["x"]) // 1000 == i
                want = 50.0 if int(sample.info.key) in updated else 1.0
                assert sample.info.priority == want
        # Sampling now favours shard 0 by its priority sum.
        merged = [
            int(s.data["x"]) // 1000
            for s in cluster.client().sample(
                "p", 400, emit_timesteps=False, unpack_as_table_signature=True
            )
        ]
        assert merged.count(0) > 300


@pytest.mark.parametrize("how", ["sigkill", "ray.kill"])
def test_a_dead_shard_is_restarted_by_ray_from_its_checkpoint(tmp_path, how):
    with reverb_ray.ReplayCluster(_tables(), 2, str(tmp_path), cpus_per_shard=0.25) as cluster:
        addresses = cluster.addresses
        for i in range(2):
            _write(addresses[i], "t", range(i * 1000, i * 1000 + 100))
        paths = cluster.checkpoint()
        assert [os.path.dirname(p) for p in paths] == [
            str(tmp_path / "shard-0"),
            str(tmp_path / "shard-1"),
        ]
        _write(addresses[1], "t", range(1100, 1110))  # after the checkpoint: lost
        iterator = iter(
            reverb.TrajectoryDataset(
                addresses, "t", tf.int32, tf.TensorShape([]), max_in_flight_samples_per_worker=8
            )
        )
        seen = {0: 0, 1: 0}
        while min(seen.values()) < 50:
            seen[int(next(iterator).data) // 1000] += 1
        writer = reverb.Client(addresses[1]).trajectory_writer(num_keep_alive_refs=1)
        writer.append({"x": np.int32(1500)})
        writer.create_item("t", 1.0, {"x": writer.history["x"][-1]})
        writer.flush()

        before = cluster.status()[1]
        killed_at = time.monotonic()
        if how == "sigkill":
            os.kill(before["pid"], 9)
        else:
            ray.kill(cluster.shards[1], no_restart=False)
        # The dataset goes on from shard 0 meanwhile: no hang, no error.
        for _ in range(300):
            next(iterator)
        # The writer of the dead shard raises a clear, catchable error.
        with pytest.raises(reverb.errors.UnavailableError):
            writer.append({"x": np.int32(1501)})
            writer.create_item("t", 1.0, {"x": writer.history["x"][-1]})
            writer.flush()
        cluster.wait_until_serving(timeout=60)
        restarted_in = time.monotonic() - killed_at
        after = cluster.status()[1]
        print(f"shard 1 served again {restarted_in:.1f} s after {how}")
        assert after["pid"] != before["pid"]
        assert after["starts"] == before["starts"] + 1
        assert after["address"] == before["address"] == addresses[1]
        assert after["loaded_checkpoint"] == paths[1]
        # Its checkpointed items are back (those written after it are not).
        info = reverb.Client(addresses[1]).server_info(timeout=30)["t"]
        assert info.current_size == 100
        # The dataset samples the restarted shard again.
        deadline = time.monotonic() + 30
        while int(next(iterator).data) // 1000 != 1:
            assert time.monotonic() < deadline
        # New writers work, on both shards again.
        actors = [Actor.remote() for _ in range(2)]
        for actor in actors:
            ray.get(actor.open.remote(addresses, "t"))
        ray.get([a.close.remote() for a in actors])
        sizes = [
            info["t"].current_size
            for info in cluster.client().server_info_by_shard(timeout=30).values()
        ]
        assert sizes == [101, 101]


def test_shards_with_tls_and_tokens_serve_authorised_clients_only(tmp_path, pki):
    from integration import TOKENS  # pylint: disable=g-import-not-at-top
    from reverb_tf import security  # pylint: disable=g-import-not-at-top

    client_tls = security.ClientTls(str(pki / "ca.pem"), server_name="replay.test")
    with reverb_ray.ReplayCluster(
        _tables(),
        2,
        str(tmp_path),
        cpus_per_shard=0.25,
        tls=security.ServerTls(str(pki / "server.pem"), str(pki / "server.key")),
        auth_tokens_file=str(pki / "tokens.txt"),
        client_tls=client_tls,
        client_token=TOKENS["admin"],
    ) as cluster:
        writer_client = reverb.Client(cluster.addresses, tls=client_tls, token=TOKENS["writer"])
        with writer_client.trajectory_writer(num_keep_alive_refs=1) as writer:
            for i in range(20):
                writer.append({"x": np.int32(i)})
                writer.create_item("t", 1.0, {"x": writer.history["x"][-1]})
        assert cluster.client().server_info(timeout=30)["t"].current_size == 20
        assert len(cluster.checkpoint()) == 2  # the admin token may
        with pytest.raises(reverb.errors.PermissionDeniedError):
            writer_client.checkpoint()
        with pytest.raises(reverb.errors.UnauthenticatedError):
            reverb.Client(cluster.addresses, tls=client_tls, token="").server_info(timeout=30)
        with pytest.raises(reverb.errors.UnavailableError):
            reverb.Client(cluster.addresses, token=TOKENS["admin"]).server_info()  # plaintext
        # A dataset over the shards, with the process's defaults.
        try:
            security.set_client_defaults(tls=client_tls, token=TOKENS["reader"])
            dataset = reverb.ReverbDataset.from_table_signature(cluster.addresses, "t", 8)
            assert len(list(dataset.take(50))) == 50
        finally:
            security.set_client_defaults()
