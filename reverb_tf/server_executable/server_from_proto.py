# SPDX-License-Identifier: Apache-2.0
"""Builds `Table`s from configuration messages (dm-reverb's server_from_proto).

config = text_format.Parse(text, reverb_config_pb2.ReverbServerConfig())
server = reverb_tf.Server(tables_from_proto(config.tables), port=config.port)
"""

from typing import Sequence

from reverb_tf import item_selectors
from reverb_tf import rate_limiters
from reverb_tf import reverb_types
from reverb_tf import server as server_lib
from reverb_tf.cc import schema_pb2


def selector_from_proto(s: schema_pb2.KeyDistributionOptions) -> reverb_types.SelectorType:
    """Returns the selector a `KeyDistributionOptions` message describes.

    Args:
      s: The message.

    Returns:
      The `reverb_tf.selectors` object.

    Raises:
      ValueError: If the chosen boolean option (fifo, lifo, uniform) is false.
      NotImplementedError: If no distribution is set.
    """
    return item_selectors.from_options_proto(s)


def rate_limiter_from_proto(proto: schema_pb2.RateLimiterCheckpoint) -> rate_limiters.RateLimiter:
    """Returns the rate limiter a `RateLimiterCheckpoint` message describes.

    Args:
      proto: The message; its counters are ignored.

    Returns:
      A `rate_limiters.RateLimiter` with the message's four parameters.
    """
    return rate_limiters.RateLimiter(
        samples_per_insert=proto.samples_per_insert,
        min_size_to_sample=proto.min_size_to_sample,
        min_diff=proto.min_diff,
        max_diff=proto.max_diff,
    )


def tables_from_proto(
    configs: Sequence[schema_pb2.PriorityTableCheckpoint],
) -> Sequence[server_lib.Table]:
    """Returns one `Table` per `PriorityTableCheckpoint` message.

    Args:
      configs: The messages, e.g. `ReverbServerConfig.tables`.

    Returns:
      The tables (without signatures: the messages carry none).

    Raises:
      ValueError: As `selector_from_proto` and the `Table` constructor.
    """
    return [
        server_lib.Table(
            name=config.table_name,
            sampler=selector_from_proto(config.sampler),
            remover=selector_from_proto(config.remover),
            max_size=config.max_size,
            rate_limiter=rate_limiter_from_proto(config.rate_limiter),
            max_times_sampled=config.max_times_sampled,
        )
        for config in configs
    ]
