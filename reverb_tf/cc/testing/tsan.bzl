# SPDX-License-Identifier: Apache-2.0
"""Dependencies a test needs to run under ThreadSanitizer (--config=tsan)."""

# Empty outside the TSan build; there, the absl annotations (see
# tsan_absl_annotations.cc). Tests that run under TSan are tagged "tsan".
TSAN_DEPS = select({
    "//reverb_tf/cc/testing:tsan_build": ["//reverb_tf/cc/testing:tsan_absl_annotations"],
    "//conditions:default": [],
})
