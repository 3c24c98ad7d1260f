# SPDX-License-Identifier: Apache-2.0
"""dm-reverb's `reverb.platform.default.server_main_command_line_args`.

Defines the `--config` flag (absl) of the Python server program
(`reverb_tf.server_executable.server_main`): a `ReverbServerConfig` in
protobuf text format.
"""

from absl import flags
from google.protobuf import text_format

from reverb_tf.server_executable import reverb_config_pb2

_CONFIG = flags.DEFINE_string(
    "config", None, "The server's ReverbServerConfig, in protobuf text format.", required=True
)


def get_server_config_proto() -> reverb_config_pb2.ReverbServerConfig:
    """Parses the `--config` flag.

    Returns:
      The `ReverbServerConfig` it holds.

    Raises:
      google.protobuf.text_format.ParseError: If the text is not one.
    """
    config = reverb_config_pb2.ReverbServerConfig()
    text_format.Parse(_CONFIG.value, config)
    return config


__all__ = ["get_server_config_proto"]
