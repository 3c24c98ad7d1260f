# SPDX-License-Identifier: Apache-2.0
"""TLS and bearer tokens for servers and clients (reverb_tf extension).

A server listens on loopback unless told otherwise (`Server(host=...)`).
Exposed to other machines, it should serve TLS and ask for tokens:

    server = reverb.Server(tables, port=8000, host="0.0.0.0",
                           tls=ServerTls("server.pem", "server.key"),
                           auth_tokens_file="tokens.txt")
    client = reverb.Client("replay.internal:8000", tls=ClientTls("ca.pem"),
                           token=os.environ["REPLAY_TOKEN"])

The tokens file has one `ROLE TOKEN` line per token (`#` comments); the
roles are `reader` (sample, server info), `writer` (also insert and update
priorities: what actors and learners need) and `admin` (also reset and
checkpoint); a token may be given as `sha256:<64 hex digits>` of itself.
A call without a known token raises `UnauthenticatedError`, one whose role
may not make it `PermissionDeniedError`. Tokens are compared in constant
time, only their digests are kept, and no message contains one.

Clients that take no arguments for it — `ReverbDataset`, `TFClient`, the
`reverb_tf` command, Ray actors — use the process's defaults: what
`set_client_defaults` set, or else the environment, read when the first
client is made: `REVERB_TF_TLS_CA_FILE`, `REVERB_TF_TLS_CERT_FILE`,
`REVERB_TF_TLS_KEY_FILE`, `REVERB_TF_TLS_SERVER_NAME`, `REVERB_TF_TOKEN`
(or `REVERB_TF_TOKEN_FILE`). A `Client` given `tls` or `token` replaces
those parts of the defaults.
"""

import os
from typing import Any, Dict, Optional

from reverb_tf import _native


def _path(value: Optional[str], what: str) -> Optional[str]:
    if value is None:
        return None
    path = os.fspath(value)
    if not path:
        raise ValueError(f"{what} must be a non-empty path")
    return path


class ServerTls:
    """A server's TLS: its certificate and key, and for mutual TLS a client CA."""

    def __init__(self, cert_file: str, key_file: str, client_ca_file: Optional[str] = None) -> None:
        """Names the PEM files; they are read when the server starts.

        Args:
          cert_file: The server's certificate chain (PEM).
          key_file: Its private key (PEM).
          client_ca_file: A CA (PEM): clients must then present a certificate
            it signed (mutual TLS). None: any client may connect (and prove
            itself with a token).

        Raises:
          ValueError: If a path is empty.
        """
        self.cert_file = _path(cert_file, "cert_file")
        self.key_file = _path(key_file, "key_file")
        self.client_ca_file = _path(client_ca_file, "client_ca_file")

    def native_options(self) -> Dict[str, str]:
        """The native server's keyword arguments."""
        return {
            "tls_cert_file": self.cert_file,
            "tls_key_file": self.key_file,
            "tls_client_ca_file": self.client_ca_file or "",
        }

    def __repr__(self) -> str:
        return (
            f"ServerTls(cert_file={self.cert_file!r}, key_file={self.key_file!r}, "
            f"client_ca_file={self.client_ca_file!r})"
        )


class ClientTls:
    """A client's TLS: the CA that verifies servers, and its own certificate."""

    def __init__(
        self,
        ca_file: str,
        cert_file: Optional[str] = None,
        key_file: Optional[str] = None,
        server_name: Optional[str] = None,
    ) -> None:
        """Names the PEM files; they are read when a client is made.

        Args:
          ca_file: The roots (PEM) that verify the server's certificate.
          cert_file: The client's certificate chain (PEM), for servers that
            require mutual TLS; with `key_file`.
          key_file: Its private key (PEM).
          server_name: The name to verify in the server's certificate when it
            is not the host of the address (e.g. a shard reached by IP).

        Raises:
          ValueError: If a path is empty, or only one of `cert_file` and
            `key_file` is given.
        """
        self.ca_file = _path(ca_file, "ca_file")
        self.cert_file = _path(cert_file, "cert_file")
        self.key_file = _path(key_file, "key_file")
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("cert_file and key_file go together (mutual TLS)")
        self.server_name = server_name

    def __repr__(self) -> str:
        return (
            f"ClientTls(ca_file={self.ca_file!r}, cert_file={self.cert_file!r}, "
            f"key_file={self.key_file!r}, server_name={self.server_name!r})"
        )


def client_security(tls: Optional[ClientTls] = None, token: Optional[str] = None) -> Any:
    """The native client security for `tls` and `token` over the defaults.

    Args:
      tls: Replaces the defaults' TLS settings; None keeps them.
      token: Replaces the defaults' token ("" for none); None keeps it.

    Returns:
      A `_core.ClientSecurity`, or None when both are None (the native
      client then takes the defaults itself).

    Raises:
      NotFoundError, PermissionDeniedError: If a file cannot be read.
      InvalidArgumentError: If a file is not what it should be (e.g. a key
        that does not belong to its certificate).
    """
    if tls is None and token is None:
        return None
    core = _native.core()
    base = core.default_client_security()
    if tls is None:
        return base.derived(token=token)
    return base.derived(
        ca_file=tls.ca_file,
        cert_file=tls.cert_file,
        key_file=tls.key_file,
        server_name=tls.server_name,
        token=token,
    )


def set_client_defaults(tls: Optional[ClientTls] = None, token: Optional[str] = None) -> None:
    """Sets what clients without settings of their own use, in this process.

    Datasets, `TFClient` ops and `Client`s made from here on (and their
    connections) use it; the environment is no longer consulted. Call it
    before making clients: channels already made keep theirs.

    Args:
      tls: TLS settings; None: plaintext.
      token: The bearer token; None: none.

    Raises:
      As `client_security`.
    """
    core = _native.core()
    security = core.ClientSecurity()  # plaintext, no token
    if tls is not None:
        security = security.derived(
            ca_file=tls.ca_file,
            cert_file=tls.cert_file,
            key_file=tls.key_file,
            server_name=tls.server_name,
        )
    core.set_default_client_security(security.derived(token=token or ""))
