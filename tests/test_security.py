# SPDX-License-Identifier: Apache-2.0
"""TLS, mutual TLS and bearer tokens with roles, on every client path.

Certificates come from the `pki` fixture (a test CA made with the `openssl`
command, tests/integration.py). Servers are real (in-process and the binary), on loopback.
"""

import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import reverb_tf as reverb
from integration import TOKENS
from reverb_tf import security

SIGNATURE = {"x": tf.TensorSpec([], tf.int32)}


def _table():
    return reverb.Table(
        "t",
        reverb.selectors.Uniform(),
        reverb.selectors.Fifo(),
        1000,
        reverb.rate_limiters.MinSize(1),
        signature=SIGNATURE,
    )


def _round_trip(client):
    """Insert, sample, update, info: what a writer and a learner do."""
    with client.trajectory_writer(num_keep_alive_refs=1) as writer:
        writer.append({"x": np.int32(7)})
        writer.create_item("t", 1.0, {"x": writer.history["x"][-1]})
    sample = next(client.sample("t", emit_timesteps=False))
    client.mutate_priorities("t", updates={int(sample.info.key): 2.0})
    return client.server_info()["t"].current_size


def test_tls_round_trip_and_plaintext_or_untrusted_clients_are_refused(pki):
    table = _table()
    with reverb.Server(
        [table], tls=security.ServerTls(str(pki / "server.pem"), str(pki / "server.key"))
    ) as server:
        address = f"localhost:{server.port}"
        assert _round_trip(reverb.Client(address, tls=security.ClientTls(str(pki / "ca.pem")))) == 1
        # By IP address, with the name to verify given.
        by_ip = reverb.Client(
            f"127.0.0.1:{server.port}",
            tls=security.ClientTls(str(pki / "ca.pem"), server_name="replay.test"),
        )
        assert by_ip.server_info()["t"].current_size == 1
        with pytest.raises(reverb.errors.UnavailableError):
            reverb.Client(address).server_info()  # plaintext to a TLS server
        with pytest.raises(reverb.errors.UnavailableError):
            reverb.Client(
                address, tls=security.ClientTls(str(pki / "stranger.pem"))
            ).server_info()  # does not trust the server
        assert table.info.current_size == 1  # read in-process: no RPC, no TLS needed


def test_mutual_tls_requires_a_client_certificate_the_ca_signed(pki):
    tls = security.ServerTls(
        str(pki / "server.pem"), str(pki / "server.key"), client_ca_file=str(pki / "ca.pem")
    )
    with reverb.Server([_table()], tls=tls) as server:
        address = f"localhost:{server.port}"
        good = security.ClientTls(
            str(pki / "ca.pem"), str(pki / "client.pem"), str(pki / "client.key")
        )
        assert _round_trip(reverb.Client(address, tls=good)) == 1
        for bad in [
            security.ClientTls(str(pki / "ca.pem")),  # no certificate
            security.ClientTls(str(pki / "ca.pem"), str(pki / "rogue.pem"), str(pki / "rogue.key")),
        ]:  # another CA's
            with pytest.raises(reverb.errors.UnavailableError):
                reverb.Client(address, tls=bad).server_info()


def test_bad_tls_files_are_clear_errors(pki, tmp_path):
    with pytest.raises(reverb.errors.NotFoundError, match="nope.pem"):
        reverb.Server(
            [_table()], tls=security.ServerTls(str(tmp_path / "nope.pem"), str(pki / "server.key"))
        )
    with pytest.raises(reverb.errors.InvalidArgumentError, match="does not belong"):
        reverb.Server(
            [_table()], tls=security.ServerTls(str(pki / "server.pem"), str(pki / "client.key"))
        )
    (tmp_path / "junk.pem").write_text("not a certificate")
    with pytest.raises(reverb.errors.InvalidArgumentError, match="no PEM certificate"):
        reverb.Client("localhost:1", tls=security.ClientTls(str(tmp_path / "junk.pem")))
    with pytest.raises(ValueError):
        security.ClientTls(str(pki / "ca.pem"), cert_file=str(pki / "client.pem"))


def _every_method(client):
    """Each replay method once, in order of the role it needs."""

    def insert():
        with client.trajectory_writer(num_keep_alive_refs=1) as writer:
            writer.append({"x": np.int32(1)})
            writer.create_item("t", 1.0, {"x": writer.history["x"][-1]})

    return [
        ("reader", "server_info", lambda: client.server_info()),
        ("reader", "sample", lambda: next(client.sample("t", emit_timesteps=False))),
        ("writer", "insert", insert),
        ("writer", "mutate_priorities", lambda: client.mutate_priorities("t", {1: 1.0})),
        ("admin", "reset", lambda: client.reset("t")),
        ("admin", "checkpoint", lambda: client.checkpoint()),
    ]


def test_tokens_and_roles_on_every_method(pki):
    order = ["reader", "writer", "admin"]
    with reverb.Server([_table()], auth_tokens_file=str(pki / "tokens.txt")) as server:
        address = f"localhost:{server.port}"
        _write_one(reverb.Client(address, token=TOKENS["writer"]))
        for token, expected in [
            (None, reverb.errors.UnauthenticatedError),
            ("wrong-token", reverb.errors.UnauthenticatedError),
        ]:
            for _, name, call in _every_method(reverb.Client(address, token=token)):
                with pytest.raises(expected) as raised:
                    call()
                assert "wrong-token" not in str(raised.value), name  # never echoed
        for role in order:
            _write_one(reverb.Client(address, token=TOKENS["writer"]))  # something to sample
            client = reverb.Client(address, token=TOKENS[role])
            for needed, name, call in _every_method(client):
                if order.index(role) >= order.index(needed):
                    call()
                else:
                    with pytest.raises(reverb.errors.PermissionDeniedError, match=f"'{needed}'"):
                        call()


def test_mutate_stream_checks_the_token_of_its_call(pki):
    """The priority-update stream (served apart from the other methods) needs a writer."""
    import grpc  # pylint: disable=import-outside-toplevel

    from reverb_tf.cc.proto import service_pb2 as pb  # pylint: disable=import-outside-toplevel

    with reverb.Server([_table()], auth_tokens_file=str(pki / "tokens.txt")) as server:
        request = pb.MutatePrioritiesRequest(table="t", keys=[1], priorities=[1.0])
        with grpc.insecure_channel(f"localhost:{server.port}") as channel:
            call = channel.stream_stream(
                "/reverb_tf.proto.ReplayService/MutateStream",
                request_serializer=pb.MutatePrioritiesRequest.SerializeToString,
                response_deserializer=pb.MutatePrioritiesResponse.FromString,
            )
            for metadata, code in [
                ((), grpc.StatusCode.UNAUTHENTICATED),
                ((("authorization", "Bearer wrong-token"),), grpc.StatusCode.UNAUTHENTICATED),
                (
                    (("authorization", f"Bearer {TOKENS['reader']}"),),
                    grpc.StatusCode.PERMISSION_DENIED,
                ),
            ]:
                with pytest.raises(grpc.RpcError) as raised:
                    list(call(iter([request]), metadata=metadata, timeout=10))
                assert raised.value.code() == code
            writer = (("authorization", f"Bearer {TOKENS['writer']}"),)
            answers = list(call(iter([request, request]), metadata=writer, timeout=10))
            assert [a.missing for a in answers] == [1, 1]  # served: key 1 is not held


def _write_one(client):
    with client.trajectory_writer(num_keep_alive_refs=1) as writer:
        writer.append({"x": np.int32(3)})
        writer.create_item("t", 1.0, {"x": writer.history["x"][-1]})


_TF_FIRST = textwrap.dedent("""
    import sys
    import tensorflow as tf   # first: its BoringSSL is in the process before our OpenSSL
    import numpy as np
    import reverb_tf as reverb
    address = sys.argv[1]
    # Every path takes TLS and the token from the environment.
    client = reverb.Client(address)
    with client.trajectory_writer(num_keep_alive_refs=1) as writer:
        for i in range(10):
            writer.append({"x": np.int32(i)})
            writer.create_item("t", 1.0, {"x": writer.history["x"][-1]})
    dataset = reverb.ReverbDataset(address, "t", {"x": tf.int32}, {"x": tf.TensorShape([])},
                                   4).batch(5)
    batch = next(iter(dataset))
    tf_client = reverb.TFClient(address)
    tf_client.update_priorities("t", batch.info.key, tf.fill([5], tf.constant(9.0, tf.float64)))
    tf_client.insert([tf.constant(5, tf.int32)], tables=["t"], priorities=[1.0])
    sample = tf_client.sample("t", [tf.int32])
    print("ok", client.server_info()["t"].current_size, int(tf.size(batch.data["x"])))
""")


def test_tls_and_tokens_in_a_process_that_imported_tensorflow_first(pki, server_binary):
    """The binary with mutual TLS and tokens; a TF-first client on every path."""
    config = (
        'port: 0 tables { table_name: "t" sampler { uniform: true } remover { fifo: true } '
        "max_size: 1000 rate_limiter { samples_per_insert: 1 min_size_to_sample: 1 "
        "min_diff: -1e300 max_diff: 1e300 } }"
    )
    process = subprocess.Popen(
        [
            server_binary,
            "--config=" + config,
            f"--tls_cert_file={pki / 'server.pem'}",
            f"--tls_key_file={pki / 'server.key'}",
            f"--tls_client_ca_file={pki / 'ca.pem'}",
            f"--auth_tokens_file={pki / 'tokens.txt'}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        port = int(re.search(r"on port (\d+)", process.stdout.readline()).group(1))
        env = dict(
            os.environ,
            REVERB_TF_TLS_CA_FILE=str(pki / "ca.pem"),
            REVERB_TF_TLS_CERT_FILE=str(pki / "client.pem"),
            REVERB_TF_TLS_KEY_FILE=str(pki / "client.key"),
            REVERB_TF_TOKEN=TOKENS["writer"],
            TF_CPP_MIN_LOG_LEVEL="2",
        )
        result = subprocess.run(
            [sys.executable, "-c", _TF_FIRST, f"localhost:{port}"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        assert result.stdout.split() == ["ok", "11", "5"], result.stdout
        # The CLI, with flags; a writer token may not checkpoint.
        from reverb_tf import cli  # pylint: disable=g-import-not-at-top

        token_file = pki / "admin.token"
        token_file.write_text(TOKENS["admin"] + "\n")
        flags = [
            f"localhost:{port}",
            f"--tls_ca_file={pki / 'ca.pem'}",
            f"--tls_cert_file={pki / 'client.pem'}",
            f"--tls_key_file={pki / 'client.key'}",
        ]
        assert cli.main(["info", *flags, f"--token_file={token_file}", "--json"]) == 0
        assert cli.main(["info", *flags]) == 1  # no token
        writer_token = pki / "writer.token"
        writer_token.write_text(TOKENS["writer"])
        assert cli.main(["checkpoint", *flags, f"--token_file={writer_token}"]) == 1
    finally:
        process.kill()
        process.wait()
    assert "tok-" not in process.stderr.read()  # the server never logs a token


def test_client_defaults_reach_datasets_and_tf_ops(pki):
    """set_client_defaults: what datasets and TFClient ops (no arguments) use."""
    with reverb.Server(
        [_table()],
        tls=security.ServerTls(str(pki / "server.pem"), str(pki / "server.key")),
        auth_tokens_file=str(pki / "tokens.txt"),
    ) as server:
        address = f"localhost:{server.port}"
        tls = security.ClientTls(str(pki / "ca.pem"))
        _write_one(reverb.Client(address, tls=tls, token=TOKENS["writer"]))
        try:
            security.set_client_defaults(tls=tls, token=TOKENS["reader"])
            batch = next(iter(reverb.ReverbDataset.from_table_signature(address, "t", 2)))
            assert int(batch.data["x"]) == 3
            tf_client = reverb.TFClient(address)
            with pytest.raises(tf.errors.PermissionDeniedError):
                tf_client.update_priorities("t", [batch.info.key], tf.constant([1.0], tf.float64))
            # The defaults as they are at each call, also for an eager update
            # made without the op.
            security.set_client_defaults(tls=tls, token=TOKENS["writer"])
            tf_client.update_priorities("t", [batch.info.key], tf.constant([2.0], tf.float64))
            security.set_client_defaults(tls=tls, token=TOKENS["reader"])
            with pytest.raises(tf.errors.PermissionDeniedError):
                tf_client.update_priorities("t", [batch.info.key], tf.constant([3.0], tf.float64))
            sample = next(reverb.Client(address, tls=tls, token=TOKENS["reader"]).sample("t"))
            assert sample[0].info.priority == 2.0
        finally:
            security.set_client_defaults()  # plaintext, no token, for the other tests
        with pytest.raises((tf.errors.UnavailableError, reverb.errors.UnavailableError)):
            next(iter(reverb.ReverbDataset.from_table_signature(address, "t", 2)))
