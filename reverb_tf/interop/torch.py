# SPDX-License-Identifier: Apache-2.0
"""Replay batches as PyTorch tensors: a `torch.utils.data.IterableDataset`.

    dataset = reverb_tf.interop.torch.TorchDataset(address, "replay", batch_size=256)
    for batch in torch.utils.data.DataLoader(dataset, batch_size=None):
        loss = model(batch.data["obs"]).mean()              # torch.Tensors
        ...
        client.mutate_priorities("replay", dict(zip(batch.info.key, priorities)))

Batches are assembled in C++ by `NumpyDataset` and handed to torch without a
copy (`torch.from_numpy`), so use the DataLoader with `batch_size=None` and
no worker processes: a background thread already samples ahead. Worker
processes, if wanted, must be started with the "spawn" (or "forkserver")
multiprocessing context: gRPC cannot be used in a forked child; each worker
then samples on streams of its own.
"""

from typing import Any, Iterator, Optional, Sequence, Union

from reverb_tf import numpy_dataset
from reverb_tf import replay_sample
from reverb_tf.interop import _batches


def _torch() -> Any:
    return _batches.import_framework("torch", "reverb_tf.interop.torch")


def to_tensors(batch: replay_sample.ReplaySample) -> replay_sample.ReplaySample:
    """One batch as tensors sharing the numpy arrays' memory.

    `info.key` stays a numpy uint64 array (what `Client.mutate_priorities`
    takes); string columns stay numpy object arrays.

    Args:
      batch: A `ReplaySample` of numpy arrays.

    Returns:
      The batch with its numeric arrays as `torch.Tensor`s.
    """
    return _batches.map_arrays(batch, _torch().from_numpy)


def _iterable_dataset_base() -> type:
    return _torch().utils.data.IterableDataset


class TorchDataset(_iterable_dataset_base()):  # type: ignore[misc]
    """Batches of a table as `ReplaySample`s of `torch.Tensor`s.

    Takes `reverb_tf.NumpyDataset`'s arguments; each iteration opens its own
    sampling streams. Picklable (it holds only its arguments), so it can be
    handed to DataLoader workers started with "spawn".
    """

    def __init__(
        self, server_address: Union[str, Sequence[str]], table: str, batch_size: int, **kwargs: Any
    ) -> None:
        """Describes the batches (see `NumpyDataset` for the arguments).

        Args:
          server_address: As for `NumpyDataset`.
          table: As for `NumpyDataset`.
          batch_size: As for `NumpyDataset`.
          **kwargs: `NumpyDataset`'s keyword arguments.

        Raises:
          ValueError: If an argument is out of range (checked now).
        """
        super().__init__()
        self._arguments = (server_address, table, batch_size)
        self._kwargs = kwargs
        self._numpy: Optional[numpy_dataset.NumpyDataset] = None
        self._numpy_dataset()  # checks the arguments now, not in a worker

    def _numpy_dataset(self) -> numpy_dataset.NumpyDataset:
        if self._numpy is None:
            self._numpy = numpy_dataset.NumpyDataset(*self._arguments, **self._kwargs)
        return self._numpy

    def __getstate__(self) -> Any:
        return {"_arguments": self._arguments, "_kwargs": self._kwargs, "_numpy": None}

    def __iter__(self) -> Iterator[replay_sample.ReplaySample]:
        iterator = iter(self._numpy_dataset())
        try:
            for batch in iterator:
                yield to_tensors(batch)
        finally:
            iterator.close()
