# SPDX-License-Identifier: Apache-2.0
"""Module paths dm-reverb code imports (`reverb.platform.checkpointers_lib`)."""
