# SPDX-License-Identifier: Apache-2.0
"""NumpyDataset: batches of a table as numpy arrays, without TensorFlow.

What JAX and PyTorch programs read replay with. Each batch is assembled in
C++ (reverb_tf/cc/client/sample_batch.h) with the GIL released: the samples
of one batch are copied, column by column, into one array per column, so a
batch of B items costs one native call and no Python work per item. A
background thread keeps `prefetch` batches ready while the program trains.

    dataset = reverb_tf.NumpyDataset(address, "replay", batch_size=256)
    for batch in dataset:          # ReplaySample of stacked numpy arrays
        train(batch.data["obs"], batch.info.key)

The knobs are `TrajectoryDataset`'s, and mean the same:
`max_in_flight_samples_per_worker`, `num_workers_per_iterator`,
`max_samples_per_stream`, `rate_limiter_timeout_ms`, `max_samples`,
`sampling_stats`; the target may name several shards. `reverb_tf.interop`
adapts it to JAX (`jax_iterator`) and PyTorch (`TorchDataset`).
"""

import queue
import threading
from typing import Any, Callable, Iterator, List, Optional, Sequence, Union

from reverb_tf import client as client_lib
from reverb_tf import errors
from reverb_tf import replay_sample
from reverb_tf import security

ServerAddress = Union[str, Sequence[str]]

# What the producer thread hands over once the sampler ended (a failure
# crosses to the consuming thread as the exception itself).
_END = object()


class NumpyDataset:
    """An iterable of batches of a table, as `ReplaySample`s of numpy arrays.

    Each iteration (`iter(dataset)`) opens its own sampling streams, as a
    tf.data iterator does. A batch is `ReplaySample(info, data)`: `info`
    holds one array of `batch_size` per field (`key` uint64, `probability`
    float64, ...), `data` the columns, each stacked to `[batch_size, ...]`,
    in the structure of the table's signature (a list of columns for a table
    without one). Every item of a batch must have the same shapes.
    """

    def __init__(
        self,
        server_address: ServerAddress,
        table: str,
        batch_size: int,
        *,
        max_in_flight_samples_per_worker: Optional[int] = None,
        num_workers_per_iterator: int = -1,
        max_samples_per_stream: int = -1,
        rate_limiter_timeout_ms: int = -1,
        max_samples: int = -1,
        sampling_stats: bool = False,
        drop_remainder: bool = False,
        prefetch: int = 2,
        tls: Optional["security.ClientTls"] = None,
        token: Optional[str] = None,
    ) -> None:
        """Describes the batches; nothing is sampled before iteration.

        Args:
          server_address: "host:port" of the server, or its shards (a list,
            a comma-separated string, or a "dns:///name:port"), as for
            `Client`.
          table: Name of the table to sample.
          batch_size: Items per batch.
          max_in_flight_samples_per_worker: Samples each stream requests
            ahead of consumption; None: `max(batch_size, 256)`.
          num_workers_per_iterator: Streams per iterator, each decoded by a
            thread of its own; -1 (auto): one per shard.
          max_samples_per_stream: After this many samples a stream is ended
            and a new one opened; -1: no limit.
          rate_limiter_timeout_ms: End the iteration if the table's rate
            limiter blocks sampling for this long; -1: never.
          max_samples: End the iteration after this many items; no more are
            requested from the servers. -1: unlimited.
          sampling_stats: If True, `info` is a `SampleInfoWithStats` (the
            table's total weight and smallest probability, for
            importance-sampling weights).
          drop_remainder: If True, a last batch smaller than `batch_size`
            (when `max_samples` or the rate limiter ends the iteration) is
            dropped rather than yielded.
          prefetch: Batches assembled ahead by a background thread; 0 samples
            in the iterating thread.
          tls: As for `Client`.
          token: As for `Client`.

        Raises:
          ValueError: If an argument is out of range.
        """
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if max_in_flight_samples_per_worker is None:
            max_in_flight_samples_per_worker = max(batch_size, 256)
        client_lib.check_sampler_arguments(
            max_in_flight_samples_per_worker,
            num_workers_per_iterator,
            max_samples_per_stream,
            max_samples,
            rate_limiter_timeout_ms,
        )
        if prefetch < 0:
            raise ValueError(f"prefetch must be >= 0, got {prefetch}")
        self._client = client_lib.Client(server_address, tls=tls, token=token)
        self._table = table
        self._batch_size = batch_size
        self._max_in_flight = max_in_flight_samples_per_worker
        self._num_streams = num_workers_per_iterator
        self._max_samples_per_stream = max_samples_per_stream
        self._timeout_s = None if rate_limiter_timeout_ms < 0 else rate_limiter_timeout_ms / 1000
        self._max_samples = max_samples
        self._info_type = replay_sample.info_type(sampling_stats)
        self._drop_remainder = drop_remainder
        self._prefetch = prefetch

    @property
    def batch_size(self) -> int:
        """Items per batch."""
        return self._batch_size

    @property
    def signature(self) -> Optional[Any]:
        """The table's signature (nested specs), or None; asks the server once."""
        return self._client._signatures(None).get(self._table)  # pylint: disable=protected-access

    def __iter__(self) -> "NumpyIterator":
        # The table is looked up first: an unknown table is a NotFoundError
        # here, and the signature gives the batches their structure.
        unflatten = self._client._unflattener(self._table)  # pylint: disable=protected-access
        sampler = self._client._client.new_sampler(  # pylint: disable=protected-access
            self._table,
            self._max_samples,
            self._max_in_flight,
            self._timeout_s,
            self._num_streams,
            self._max_samples_per_stream,
        )
        return NumpyIterator(
            sampler,
            self._batch_size,
            self._info_type,
            unflatten,
            drop_remainder=self._drop_remainder,
            prefetch=self._prefetch,
            end_on_timeout=self._timeout_s is not None,
        )


class NumpyIterator(Iterator[replay_sample.ReplaySample]):
    """Batches from one set of sampling streams; made by `iter(NumpyDataset)`.

    Close it (or use it as a context manager) to end its streams at once;
    otherwise they end when it is garbage-collected. Use from one thread.
    """

    def __init__(
        self,
        sampler: Any,
        batch_size: int,
        info_type: type,
        unflatten: Optional[Callable[[List[Any]], Any]],
        *,
        drop_remainder: bool,
        prefetch: int,
        end_on_timeout: bool,
    ) -> None:
        self._sampler = sampler
        self._batch_size = batch_size
        self._info_type = info_type
        self._num_info_fields = len(info_type._fields)
        self._unflatten = unflatten
        self._drop_remainder = drop_remainder
        self._end_on_timeout = end_on_timeout
        self._finished = False
        # What ended a short batch, for the next call: the error to raise,
        # or _END when a rate limiter timeout ends the iteration.
        self._pending: Any = None
        self._closed = threading.Event()
        self._queue: Optional["queue.Queue[Any]"] = None
        self._thread: Optional[threading.Thread] = None
        if prefetch > 0:
            self._queue = queue.Queue(maxsize=prefetch)
            self._thread = threading.Thread(
                target=self._produce, daemon=True, name="reverb_tf.NumpyIterator"
            )
            self._thread.start()

    def _next_raw(self) -> Any:
        """The next stacked batch as the native module gives it, or _END."""
        if self._pending is not None:
            pending, self._pending = self._pending, None
            if pending is _END:
                return _END
            raise pending
        try:
            raw, error = self._sampler.next_stacked(self._batch_size)
        except errors.DeadlineExceededError:
            if not self._end_on_timeout:
                raise
            return _END  # the rate limiter timed out: the end, as for the datasets
        if error is not None:
            # The samples that came before the error were taken from the
            # table: hand them on first (unless dropped below), then end or
            # raise.
            timed_out = self._end_on_timeout and isinstance(error, errors.DeadlineExceededError)
            self._pending = _END if timed_out else error
        if raw is None:
            return _END
        if self._drop_remainder and len(raw[0][0]) < self._batch_size:
            return _END
        return raw

    def _produce(self) -> None:
        while not self._closed.is_set():
            try:
                item = self._next_raw()
            except BaseException as e:  # pylint: disable=broad-except
                item = e
            while not self._closed.is_set():
                try:
                    self._queue.put(item, timeout=0.1)
                    break
                except queue.Full:
                    continue
            if item is _END or isinstance(item, BaseException):
                return

    def __next__(self) -> replay_sample.ReplaySample:
        if self._finished:
            raise StopIteration
        if self._queue is None:
            item = self._next_raw()
        else:
            item = self._queue.get()
        if item is _END:
            self._finished = True
            raise StopIteration
        if isinstance(item, BaseException):
            self._finished = True
            raise item
        infos, columns, _ = item
        info = self._info_type(*infos[: self._num_info_fields])
        data = columns if self._unflatten is None else self._unflatten(columns)
        return replay_sample.ReplaySample(info, data)

    def close(self) -> None:
        """Ends the streams; a blocked or later `next()` then stops."""
        if self._closed.is_set():
            return
        self._closed.set()
        self._finished = True
        self._sampler.cancel()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> "NumpyIterator":
        return self

    def __exit__(self, *unused_exc_info: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # pylint: disable=broad-except
            pass  # interpreter shutdown
