# SPDX-License-Identifier: Apache-2.0
"""The `reverb_tf_server` command: runs the native server binary.

The binary sits next to this module: the wheel packs it there
(pip_package/), and scripts/setup.sh copies Bazel's build there in a
checkout. The wheel's console entry point `reverb_tf_server` and
`python -m reverb_tf._server_binary` both come here, which replaces the
Python process with the binary, so signals (SIGTERM, SIGINT) and the exit
status are the binary's own.
"""

import os
import pathlib
import sys


def path() -> pathlib.Path:
    """Returns the path of the packaged `reverb_tf_server` binary.

    Returns:
      The path, whether or not the file exists.
    """
    return pathlib.Path(__file__).resolve().parent / "reverb_tf_server"


def main() -> None:
    """Execs the server binary with this process's arguments.

    Does not return; exits with status 2 if the binary is missing.
    """
    binary = path()
    if not os.access(binary, os.X_OK):
        print(
            f"reverb_tf_server: {binary} is missing or not executable; build it with "
            "`bash scripts/setup.sh` (a checkout) or reinstall the reverb_tf wheel",
            file=sys.stderr,
        )
        sys.exit(2)
    os.execv(binary, [str(binary), *sys.argv[1:]])


if __name__ == "__main__":
    main()
