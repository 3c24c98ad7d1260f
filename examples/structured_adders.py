# SPDX-License-Identifier: Apache-2.0
"""Acme-style adders written with the StructuredWriter, read back as datasets.

Two adders share one writer, as Acme's structured adders do:

* N-step transitions: at every step with N steps of history, the transition
  (observation, action, the N rewards and discounts that follow, the
  observation N steps later); at the end of an episode, the shorter
  transitions (1..N-1 steps) that start in its last steps.
* Overlapping sequences: every `period` steps, the last `sequence_length`
  steps.

Each table's signature is inferred from its configs (`infer_signature`), the
items are read back through `TrajectoryDataset.from_table_signature`, and
everything observable is printed in a canonical form, so that the output is
byte-identical under dm-reverb 0.14 and reverb_tf (a differential scenario,
tests/compat/scenarios/structured.py, checks that):

    .venv/bin/python examples/structured_adders.py
    /root/.cache/reverb_tf/dm-reverb-venv/bin/python examples/structured_adders.py --module reverb
"""

import argparse
import hashlib
import importlib
from typing import Any, List

import numpy as np
import tensorflow as tf
import tree

N_STEP = 3
SEQUENCE_LENGTH = 4
PERIOD = 2
EPISODE_LENGTHS = (7, 2, 5)


def step_spec() -> Any:
    return {
        "observation": tf.TensorSpec([3], tf.float32),
        "action": tf.TensorSpec([], tf.int32),
        "reward": tf.TensorSpec([], tf.float32),
        "discount": tf.TensorSpec([], tf.float32),
    }


def n_step_transition_configs(reverb: Any, n_step: int, table: str) -> List[Any]:
    """Configs of an N-step transition adder."""
    sw = reverb.structured_writer

    def transition(step, n):
        return {
            "observation": step["observation"][-n - 1],
            "action": step["action"][-n - 1],
            "reward": step["reward"][-n - 1 : -1],
            "discount": step["discount"][-n - 1 : -1],
            "next_observation": step["observation"][-1],
        }

    full = sw.create_config(
        sw.pattern_from_transform(step_spec(), lambda step: transition(step, n_step)),
        table,
        conditions=[sw.Condition.step_index() >= n_step],
        priority=sw.td_error(0.5, step_spec(), lambda step: step["reward"]),
    )
    # At the end of an episode, the transitions that start in its last
    # n_step - 1 steps, shortened to the steps that are left.
    tails = [
        sw.create_config(
            sw.pattern_from_transform(step_spec(), lambda step, n=n: transition(step, n)),
            table,
            conditions=[sw.Condition.is_end_episode(), sw.Condition.step_index() >= n],
        )
        for n in range(1, n_step)
    ]
    return [full] + tails


def sequence_configs(reverb: Any, length: int, period: int, table: str) -> List[Any]:
    """Configs of a sequence adder: `length` steps every `period` steps."""
    sw = reverb.structured_writer
    pattern = sw.pattern_from_transform(
        step_spec(), lambda step: tree.map_structure(lambda column: column[-length:], step)
    )
    return [
        sw.create_config(
            pattern,
            table,
            conditions=[
                sw.Condition.step_index() >= length - 1,
                sw.Condition.steps_since_applied() >= period,
            ],
        )
    ]


def _environment_step(episode: int, t: int) -> Any:
    """A deterministic toy environment."""
    return {
        "observation": np.array([episode, t, episode * 10 + t], np.float32),
        "action": np.int32((t * 7 + episode) % 4),
        "reward": np.float32((t % 3) - 1.0 + 0.25 * episode),
        "discount": np.float32(0.0 if t == EPISODE_LENGTHS[episode] - 1 else 0.99),
    }


def _describe(value: Any) -> str:
    array = np.asarray(value)
    return f"{array.dtype}{list(array.shape)} {array.ravel().tolist()}"


def run(reverb: Any) -> str:
    """Writes the episodes, reads both tables back; returns the printout."""
    sw = reverb.structured_writer
    nstep = n_step_transition_configs(reverb, N_STEP, "nstep")
    sequences = sequence_configs(reverb, SEQUENCE_LENGTH, PERIOD, "sequence")
    signatures = {
        "nstep": sw.infer_signature(nstep, step_spec()),
        "sequence": sw.infer_signature(sequences, step_spec()),
    }
    tables = [
        reverb.Table(
            name,
            reverb.selectors.Fifo(),
            reverb.selectors.Fifo(),
            1000,
            reverb.rate_limiters.MinSize(1),
            max_times_sampled=1,
            signature=signature,
        )
        for name, signature in signatures.items()
    ]
    lines = []
    server = reverb.Server(tables)
    try:
        address = f"localhost:{server.port}"
        client = reverb.Client(address)
        writer = client.structured_writer(nstep + sequences)
        for episode, length in enumerate(EPISODE_LENGTHS):
            for t in range(length):
                writer.append(_environment_step(episode, t))
            writer.end_episode()
        writer.flush()
        for name, signature in signatures.items():
            lines.append(f"table {name}")
            for path, spec in tree.flatten_with_path(signature):
                lines.append(
                    f"  spec {'/'.join(map(str, path))}: {spec.dtype.name}{spec.shape.as_list()}"
                )
            size = client.server_info()[name].current_size
            dataset = reverb.TrajectoryDataset.from_table_signature(
                address, name, max_in_flight_samples_per_worker=4
            )
            for sample in dataset.take(size):
                lines.append(f"  item priority={float(sample.info.priority.numpy())!r}")
                for path, value in tree.flatten_with_path(sample.data):
                    lines.append(f"    {'/'.join(map(str, path))}: {_describe(value.numpy())}")
    finally:
        server.stop()
    text = "\n".join(lines) + "\n"
    return text + f"sha256 {hashlib.sha256(text.encode()).hexdigest()}\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--module", choices=["reverb", "reverb_tf"], default="reverb_tf")
    args = parser.parse_args()
    print(run(importlib.import_module(args.module)), end="")


if __name__ == "__main__":
    main()
