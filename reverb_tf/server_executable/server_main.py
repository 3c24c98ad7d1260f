# SPDX-License-Identifier: Apache-2.0
"""dm-reverb's `reverb.server_executable.server_main`: a server program in Python.

    python -m reverb_tf.server_executable.server_main --config='port: 8000 tables { ... }'

Reads a `ReverbServerConfig` (text format) from `--config`, starts a
`reverb_tf.Server` with its tables and serves until stopped. The server
listens on loopback, as every `reverb_tf.Server` does by default
(docs/compatibility.md); the native `reverb_tf_server` binary (`--bind`)
serves other machines.
"""

from typing import Sequence

from absl import app
from absl import flags
from absl import logging

from reverb_tf import server as server_lib
from reverb_tf.platform.default import server_main_command_line_args
from reverb_tf.server_executable import server_from_proto

FLAGS = flags.FLAGS


def main(unused_argv: Sequence[str]) -> None:
    """Runs the server the `--config` flag describes until it is stopped.

    Args:
      unused_argv: The remaining command line, ignored.

    Raises:
      google.protobuf.text_format.ParseError: If `--config` is not a
        `ReverbServerConfig`.
      ValueError: If a table's configuration is invalid.
    """
    del unused_argv
    config = server_main_command_line_args.get_server_config_proto()
    tables = server_from_proto.tables_from_proto(config.tables)
    logging.info("Starting a reverb_tf server with %d tables", len(tables))
    # Port 0 (the proto's default) means any free port, as None does.
    server = server_lib.Server(tables=tables, port=config.port or None)
    logging.info("reverb_tf server listening on port %d", server.port)
    server.wait()


def app_run_main() -> None:
    """Parses the flags and runs `main` (the program's entry point)."""
    app.run(main)


if __name__ == "__main__":
    app_run_main()
