# SPDX-License-Identifier: Apache-2.0
"""The wire format's Python modules (generated: see BUILD)."""
