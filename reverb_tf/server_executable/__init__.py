# SPDX-License-Identifier: Apache-2.0
"""The replay server as a program: configuration messages and builders.

`reverb_tf_server` (the binary) reads a `ReverbServerConfig` in text format;
`server_from_proto` turns the same messages into `Table`s for a Python
`Server`.
"""
