# SPDX-License-Identifier: Apache-2.0
"""Replay batches as JAX arrays, transferred while the next ones are sampled.

    dataset = reverb_tf.NumpyDataset(address, "replay", batch_size=256)
    for batch in reverb_tf.interop.jax.device_put_iterator(dataset):
        params, td_error = train_step(params, batch.data)   # jax.Arrays
        client.mutate_priorities("replay", dict(zip(batch.info.key, td_error)))

`jax.device_put` only starts a transfer, so keeping `buffer_size` batches
put ahead overlaps the transfers with the training step, while the dataset's
own thread assembles the following batches in C++ (numpy_dataset.py).
"""

import collections
from typing import Any, Iterable, Iterator, Optional

from reverb_tf import replay_sample
from reverb_tf.interop import _batches


def _jax() -> Any:
    return _batches.import_framework("jax", "reverb_tf.interop.jax")


def to_device(
    batch: replay_sample.ReplaySample, target: Optional[Any] = None
) -> replay_sample.ReplaySample:
    """Starts the transfer of one batch to a device.

    `info.key` stays a numpy uint64 array on the host: keys are what
    `Client.mutate_priorities` takes, and JAX without x64 would truncate
    them. String columns (numpy object arrays) stay on the host too.

    Args:
      batch: A `ReplaySample` of numpy arrays (from `NumpyDataset`).
      target: What `jax.device_put` takes: a device, a sharding, or None
        for the default device.

    Returns:
      The batch with its numeric arrays as `jax.Array`s.
    """
    jax = _jax()
    return _batches.map_arrays(batch, lambda array: jax.device_put(array, target))


def device_put_iterator(
    batches: Iterable[replay_sample.ReplaySample],
    *,
    target: Optional[Any] = None,
    buffer_size: int = 2,
) -> Iterator[replay_sample.ReplaySample]:
    """Yields `batches` on a device, `buffer_size` transfers started ahead.

    Args:
      batches: A `NumpyDataset` (or any iterable of numpy `ReplaySample`s).
      target: A device or sharding for `jax.device_put`; None: the default
        device.
      buffer_size: Batches whose transfer is started before they are
        yielded (>= 1).

    Yields:
      `ReplaySample`s of `jax.Array`s (see `to_device`).

    Raises:
      ValueError: If `buffer_size` < 1.
      ImportError: If JAX is not installed.
    """
    if buffer_size < 1:
        raise ValueError(f"buffer_size must be >= 1, got {buffer_size}")
    _jax()
    iterator = iter(batches)
    ready: "collections.deque[replay_sample.ReplaySample]" = collections.deque()
    try:
        for batch in iterator:
            ready.append(to_device(batch, target))
            if len(ready) > buffer_size:
                yield ready.popleft()
        while ready:
            yield ready.popleft()
    finally:
        close = getattr(iterator, "close", None)
        if close is not None:
            close()
