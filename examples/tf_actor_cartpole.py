# SPDX-License-Identifier: Apache-2.0
"""A TensorFlow actor and learner, each one tf.function, over a prioritized table.

The actor runs CartPole written in TensorFlow ops entirely inside one
`tf.function` (a `tf.while_loop` per episode) and writes N-step transitions
through `reverb_tf.TFTrajectoryWriter`: the writer's ops append each step
and create an item of the last N steps, whose chunks overlapping items
share. The learner reads batches through
`TrajectoryDataset.from_table_signature`, takes a gradient step on a linear
Q-function and sets each sampled item's priority to its TD error with
`TFClient.update_priorities`, also inside a `tf.function`. Nothing leaves
the graph per step.

    .venv/bin/python examples/tf_actor_cartpole.py --rounds 5
"""

import argparse
import math

import tensorflow as tf

import reverb_tf as reverb

N_STEP = 3
GAMMA = 0.99
BATCH = 32


class CartPole:
    """The classic cart-pole dynamics (Barto, Sutton and Anderson), in TF ops."""

    GRAVITY, CART_MASS, POLE_MASS, HALF_LENGTH = 9.8, 1.0, 0.1, 0.5
    FORCE, TAU = 10.0, 0.02
    X_LIMIT, THETA_LIMIT = 2.4, 12 * 2 * math.pi / 360

    def reset(self) -> tf.Tensor:
        return tf.random.uniform([4], -0.05, 0.05)

    def step(self, state: tf.Tensor, action: tf.Tensor):
        """Returns (next state, done) after pushing the cart left (0) or right (1)."""
        x, x_dot, theta, theta_dot = tf.unstack(state)
        total_mass = self.CART_MASS + self.POLE_MASS
        pole_moment = self.POLE_MASS * self.HALF_LENGTH
        force = tf.where(tf.equal(action, 1), self.FORCE, -self.FORCE)
        cos, sin = tf.cos(theta), tf.sin(theta)
        temp = (force + pole_moment * theta_dot**2 * sin) / total_mass
        theta_acc = (self.GRAVITY * sin - cos * temp) / (
            self.HALF_LENGTH * (4.0 / 3.0 - self.POLE_MASS * cos**2 / total_mass)
        )
        x_acc = temp - pole_moment * theta_acc * cos / total_mass
        next_state = tf.stack(
            [
                x + self.TAU * x_dot,
                x_dot + self.TAU * x_acc,
                theta + self.TAU * theta_dot,
                theta_dot + self.TAU * theta_acc,
            ]
        )
        done = tf.logical_or(
            tf.abs(next_state[0]) > self.X_LIMIT, tf.abs(next_state[2]) > self.THETA_LIMIT
        )
        return next_state, done


def make_table() -> reverb.Table:
    return reverb.Table(
        name="replay",
        sampler=reverb.selectors.Prioritized(0.6),
        remover=reverb.selectors.Fifo(),
        max_size=100_000,
        rate_limiter=reverb.rate_limiters.MinSize(1),
        signature={
            "observation": tf.TensorSpec([N_STEP, 4], tf.float32),
            "action": tf.TensorSpec([N_STEP], tf.int32),
            "reward": tf.TensorSpec([N_STEP], tf.float32),
            "discount": tf.TensorSpec([N_STEP], tf.float32),
        },
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="actor episodes = learner rounds")
    parser.add_argument("--learner_steps", type=int, default=10, help="learner steps per round")
    parser.add_argument("--max_episode_steps", type=int, default=200)
    flags = parser.parse_args()

    with reverb.Server([make_table()]) as server:
        address = f"localhost:{server.port}"
        env = CartPole()
        weights = tf.Variable(tf.random.normal([4, 2], stddev=0.1))
        writer = reverb.TFTrajectoryWriter(address, num_keep_alive_refs=N_STEP)

        @tf.function
        def run_episode() -> tf.Tensor:
            def body(t, state, done):
                q = tf.linalg.matvec(weights, state, transpose_a=True)
                greedy = tf.cast(tf.argmax(q), tf.int32)
                explore = tf.random.uniform([]) < 0.1
                action = tf.where(explore, tf.random.uniform([], 0, 2, tf.int32), greedy)
                next_state, next_done = env.step(state, action)
                writer.append(
                    {
                        "observation": state,
                        "action": action,
                        "reward": tf.constant(1.0),
                        "discount": tf.where(next_done, 0.0, GAMMA),
                    }
                )

                def create_item():
                    history = writer.history
                    writer.create_item(
                        "replay",
                        priority=1.0,
                        trajectory={key: history[key][-N_STEP:] for key in history},
                    )
                    return tf.constant(True)

                tf.cond(t >= N_STEP - 1, create_item, lambda: tf.constant(False))
                return t + 1, next_state, next_done

            steps, _, _ = tf.while_loop(
                lambda t, _, done: tf.logical_and(
                    tf.logical_not(done), t < flags.max_episode_steps
                ),
                body,
                (tf.constant(0), env.reset(), tf.constant(False)),
            )
            writer.end_episode()
            return steps

        tf_client = reverb.TFClient(address)

        @tf.function
        def learn(sample) -> tf.Tensor:
            data = sample.data
            with tf.GradientTape() as tape:
                q_all = tf.einsum("bd,da->ba", data["observation"][:, 0], weights)
                q = tf.gather(q_all, data["action"][:, 0], batch_dims=1)
                # The N-step return, bootstrapped from the window's last step.
                discounts = tf.math.cumprod(data["discount"], axis=1, exclusive=True)
                returns = tf.reduce_sum(data["reward"] * discounts, axis=1)
                bootstrap = tf.reduce_max(
                    tf.einsum("bd,da->ba", data["observation"][:, -1], weights), axis=1
                )
                last = tf.reduce_prod(data["discount"], axis=1)
                td = tf.stop_gradient(returns + last * bootstrap) - q
                loss = tf.reduce_mean(td**2)
            weights.assign_sub(0.01 * tape.gradient(loss, weights))
            tf_client.update_priorities(
                "replay", sample.info.key, tf.cast(tf.abs(td) + 1e-3, tf.float64)
            )
            return loss

        dataset = reverb.TrajectoryDataset.from_table_signature(
            address, "replay", max_in_flight_samples_per_worker=2 * BATCH
        ).batch(BATCH)
        iterator = None
        total_steps = 0
        for _ in range(flags.rounds):
            total_steps += int(run_episode())
            if iterator is None:
                iterator = iter(dataset)
            for _ in range(flags.learner_steps):
                learn(next(iterator))

        info = reverb.Client(address).server_info()["replay"]
        print(
            f"actor: {flags.rounds} episodes, {total_steps} steps, {info.current_size} items "
            f"({info.num_episodes} episodes in the table)"
        )
        expected = total_steps - flags.rounds * (N_STEP - 1)
        assert info.current_size == expected, (info.current_size, expected)
        priorities = [
            s[0].info.priority
            for s in reverb.Client(address).sample("replay", num_samples=info.current_size)
        ]
        updated = sum(1 for p in priorities if p != 1.0)
        print(
            f"learner: {flags.rounds * flags.learner_steps} steps; {updated} of "
            f"{len(priorities)} sampled items carry a TD-error priority"
        )
        assert updated > 0


if __name__ == "__main__":
    main()
