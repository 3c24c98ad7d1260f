# SPDX-License-Identifier: Apache-2.0
"""Generated protocol buffer modules, at dm-reverb's paths (`reverb.cc.*_pb2`).

The C++ sources beside this file are not Python; the `*_pb2.py` modules are
generated from `proto/*.proto` by the build and copied here (scripts/setup.sh
in a checkout, the wheel builder in a package).
"""
