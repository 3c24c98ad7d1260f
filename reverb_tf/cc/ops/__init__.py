# SPDX-License-Identifier: Apache-2.0
"""dm-reverb's `reverb.cc.ops` package path: `gen_reverb_ops`, the raw ops."""
