# SPDX-License-Identifier: Apache-2.0
"""dm-reverb's `reverb.cc.checkpointing` package path (Python modules only).

The C++ sources beside this file are reverb_tf's checkpointer; the Python
module here gives dm-reverb's checkpoint messages their import path.
"""
