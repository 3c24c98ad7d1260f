# SPDX-License-Identifier: Apache-2.0
"""`python -m reverb_tf`: the `reverb_tf` command (reverb_tf/cli.py)."""

import sys

from reverb_tf import cli

sys.exit(cli.main())
