# SPDX-License-Identifier: Apache-2.0
"""Black-box protocol fuzzing: hostile bytes on every RPC never take the server down.

Each method of the replay service gets random byte strings and mutated
serializations of valid requests (bit flips, truncations, splices, extreme
field values), sent with plain grpcio and no reverb_tf client code in the
path. After every batch the server must still answer a normal round trip
(insert, sample, server_info) through the regular client. The case count and
the time are bounded; the seed is fixed so that a failure reproduces.
"""

import contextlib
import random
import time

import grpc
import numpy as np
import pytest

import reverb_tf as reverb
from reverb_tf.cc.proto import data_pb2
from reverb_tf.cc.proto import service_pb2 as pb

_SERVICE = "/reverb_tf.proto.ReplayService/"
_CASES_PER_METHOD = 400
_RPC_TIMEOUT_S = 2.0


def _valid_requests():
    """One valid serialized request per method, plus hostile-but-well-formed ones."""
    tensor = data_pb2.Tensor(dtype=1, shape=[1, 2], data=b"\0" * 8, uncompressed_size=8)
    chunk = data_pb2.Chunk(key=11, tensor=tensor)
    item = data_pb2.Item(
        key=5,
        table="t",
        priority=1.0,
        columns=[data_pb2.Column(slices=[data_pb2.Slice(chunk_key=11, length=1)])],
    )
    # A lane chunk: two environments' step, row b being environment b's.
    lanes = data_pb2.Chunk(key=13, tensor=tensor, lane_episode_ids=[7, 8])
    lane_item = data_pb2.Item(
        key=9,
        table="t",
        priority=1.0,
        columns=[data_pb2.Column(slices=[data_pb2.Slice(chunk_key=13, offset=1, length=1)])],
    )
    return {
        "InsertStream": [
            pb.InsertRequest(chunks=[chunk], items=[item]),
            pb.InsertRequest(chunks=[lanes], items=[lane_item]),
            pb.InsertRequest(
                chunks=[lanes],
                item_batches=[
                    data_pb2.ItemBatch(
                        table="t",
                        keys=[30, 31],
                        priorities=[1.0, 2.0],
                        lanes=[0, 1],
                        columns=[data_pb2.Column(slices=[data_pb2.Slice(chunk_key=13, length=1)])],
                    )
                ],
            ),
            # Three lanes cannot share one row.
            pb.InsertRequest(
                chunks=[data_pb2.Chunk(key=14, tensor=tensor, lane_episode_ids=[1, 2, 3])]
            ),
            pb.InsertRequest(items=[item]),  # chunk never sent
            pb.InsertRequest(
                chunks=[
                    data_pb2.Chunk(
                        key=12,
                        tensor=data_pb2.Tensor(
                            dtype=1, shape=[1, 2**32, 2**32], uncompressed_size=0
                        ),
                    )
                ]
            ),
            pb.InsertRequest(
                chunks=[chunk],
                items=[
                    data_pb2.Item(
                        key=6,
                        table="t",
                        priority=float("nan"),
                        columns=[
                            data_pb2.Column(
                                slices=[data_pb2.Slice(chunk_key=11, offset=-3, length=9)]
                            )
                        ],
                    )
                ],
            ),
        ],
        "SampleStream": [
            pb.SampleRequest(table="t", num_samples=2),
            pb.SampleRequest(table="t", num_samples=2**62, flexible_batch_size=2**31 - 1),
            pb.SampleRequest(table="t", num_samples=-5),
            pb.SampleRequest(table="x" * 10_000, num_samples=1),
        ],
        "MutatePriorities": [
            pb.MutatePrioritiesRequest(table="t", keys=[1, 2], priorities=[1.0, 2.0], deletes=[3]),
            pb.MutatePrioritiesRequest(table="t", keys=[1], priorities=[]),
        ],
        "MutateStream": [
            pb.MutatePrioritiesRequest(table="t", keys=[1, 2], priorities=[1.0, 2.0], deletes=[3]),
            pb.MutatePrioritiesRequest(table="t", keys=[1], priorities=[]),
            pb.MutatePrioritiesRequest(table="t", keys=[1], priorities=[float("nan")]),
        ],
        "Reset": [pb.ResetRequest(table="nope")],
        "ServerInfo": [pb.ServerInfoRequest()],
        "Checkpoint": [pb.CheckpointRequest()],
    }


def _mutations(rng, valid):
    """Yields hostile byte strings: random, and mutated from `valid`."""
    for _ in range(_CASES_PER_METHOD):
        kind = rng.randrange(5)
        base = bytearray(rng.choice(valid).SerializeToString())
        if kind == 0 or not base:
            yield bytes(rng.getrandbits(8) for _ in range(rng.randrange(0, 64)))
        elif kind == 1:  # bit flips
            for _ in range(rng.randrange(1, 4)):
                i = rng.randrange(len(base))
                base[i] ^= 1 << rng.randrange(8)
            yield bytes(base)
        elif kind == 2:  # truncation
            yield bytes(base[: rng.randrange(len(base))])
        elif kind == 3:  # splice of random bytes
            i = rng.randrange(len(base) + 1)
            yield bytes(base[:i]) + bytes(rng.getrandbits(8) for _ in range(8)) + bytes(base[i:])
        else:  # a huge varint where a length or number was
            i = rng.randrange(len(base) + 1)
            yield bytes(base[:i]) + b"\xff" * 9 + b"\x01" + bytes(base[i:])


def _round_trip(address):
    client = reverb.Client(address)
    client.insert(np.float32(1.5), {"t": 1.0})
    sample = next(client.sample("t", emit_timesteps=False))
    assert len(sample.data) == 1  # items the fuzzer got in are valid items too
    assert client.server_info(timeout=5)["t"].current_size >= 1


@pytest.mark.parametrize(
    "method",
    [
        "InsertStream",
        "SampleStream",
        "MutatePriorities",
        "MutateStream",
        "Reset",
        "ServerInfo",
        "Checkpoint",
    ],
)
def test_hostile_bytes_never_take_the_server_down(method):
    rng = random.Random(f"reverb_tf-{method}")
    table = reverb.Table(
        "t",
        sampler=reverb.selectors.Uniform(),
        remover=reverb.selectors.Fifo(),
        max_size=100,
        rate_limiter=reverb.rate_limiters.MinSize(1),
    )
    with reverb.Server([table]) as server:
        address = f"localhost:{server.port}"
        _round_trip(address)
        identity = lambda b: b  # pylint: disable=unnecessary-lambda-assignment
        codes = {}
        started = time.monotonic()
        with grpc.insecure_channel(address) as channel:
            if method.endswith("Stream"):
                call = channel.stream_stream(
                    _SERVICE + method, request_serializer=identity, response_deserializer=identity
                )
            else:
                call = channel.unary_unary(
                    _SERVICE + method, request_serializer=identity, response_deserializer=identity
                )
            for i, payload in enumerate(_mutations(rng, _valid_requests()[method])):
                try:
                    if method.endswith("Stream"):
                        # Several messages per stream: a good one between bad ones.
                        messages = [payload, payload[: len(payload) // 2], payload]
                        for _ in call(iter(messages), timeout=_RPC_TIMEOUT_S):
                            pass
                    else:
                        call(payload, timeout=_RPC_TIMEOUT_S)
                    code = grpc.StatusCode.OK
                except grpc.RpcError as e:
                    code = e.code()
                codes[code] = codes.get(code, 0) + 1
                if i % 40 == 39:
                    _round_trip(address)
        _round_trip(address)
        # Bounded: a hostile request is answered within its deadline.
        assert time.monotonic() - started < _CASES_PER_METHOD * (_RPC_TIMEOUT_S + 0.5)
        assert sum(codes.values()) == _CASES_PER_METHOD, codes
        print(method, {code.name: n for code, n in codes.items()})


@contextlib.contextmanager
def _queue_server_insert_stream():
    """A server with a queue table "t", and its InsertStream over typed messages.

    Yields:
      (address, call): the server's address, and the stream's callable.
    """
    with reverb.Server([reverb.Table.queue("t", 10)]) as server:
        address = f"localhost:{server.port}"
        with grpc.insecure_channel(address) as channel:
            call = channel.stream_stream(
                _SERVICE + "InsertStream",
                request_serializer=pb.InsertRequest.SerializeToString,
                response_deserializer=pb.InsertResponse.FromString,
            )
            yield address, call


def test_lane_chunks_from_the_wire_are_checked_and_stored():
    """A lane chunk's rows must divide among its lanes; an item gets its lane's row."""
    rows = np.array([[1, 2], [3, 4]], np.float32)  # row b: environment b's step
    tensor = data_pb2.Tensor(dtype=1, shape=[2, 2], data=rows.tobytes(), uncompressed_size=16)
    uneven = data_pb2.Chunk(key=21, tensor=tensor, lane_episode_ids=[1, 2, 3])
    lanes = data_pb2.Chunk(key=22, tensor=tensor, lane_episode_ids=[7, 8])
    item = data_pb2.Item(
        key=9,
        table="t",
        priority=1.0,
        columns=[
            data_pb2.Column(slices=[data_pb2.Slice(chunk_key=22, offset=1, length=1)], squeeze=True)
        ],
    )
    with _queue_server_insert_stream() as (address, call):
        with pytest.raises(grpc.RpcError) as refused:
            list(call(iter([pb.InsertRequest(chunks=[uneven])]), timeout=5))
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "is not a multiple" in refused.value.details()
        request = pb.InsertRequest(chunks=[lanes], items=[item])
        responses = list(call(iter([request]), timeout=5))
        assert [key for r in responses for key in r.keys] == [9]
        client = reverb.Client(address)
        assert client.server_info()["t"].num_episodes == 1
        (sample,) = client.sample("t", emit_timesteps=False)
        np.testing.assert_array_equal(sample.data[0], rows[1])


def test_item_batches_from_the_wire_store_one_item_per_lane():
    """An ItemBatch is its lanes' items; a malformed one is refused precisely."""
    rows = np.array([[1, 2], [3, 4], [5, 6], [7, 8]], np.float32)  # 2 steps of 2 lanes
    tensor = data_pb2.Tensor(dtype=1, shape=[4, 2], data=rows.tobytes(), uncompressed_size=32)
    lanes = data_pb2.Chunk(key=40, tensor=tensor, lane_episode_ids=[1, 2])
    # Lane 0's steps 0 and 1 are rows 0 and 2; lane b's are those plus b.
    batch = data_pb2.ItemBatch(
        table="t",
        keys=[50, 51],
        priorities=[1.0, 1.0],
        lanes=[1, 0],
        columns=[
            data_pb2.Column(
                slices=[
                    data_pb2.Slice(chunk_key=40, offset=0, length=1),
                    data_pb2.Slice(chunk_key=40, offset=2, length=1),
                ]
            )
        ],
    )
    uneven = data_pb2.ItemBatch(table="t", keys=[1, 2], priorities=[1.0], lanes=[0, 1])
    with _queue_server_insert_stream() as (address, call):
        request = pb.InsertRequest(chunks=[lanes], item_batches=[batch])
        responses = list(call(iter([request]), timeout=5))
        assert [key for r in responses for key in r.keys] == [50, 51]
        assert all(r.takes_item_batches for r in responses)
        with pytest.raises(grpc.RpcError) as refused:
            list(call(iter([pb.InsertRequest(item_batches=[uneven])]), timeout=5))
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "must match" in refused.value.details()
        client = reverb.Client(address)
        assert client.server_info()["t"].num_episodes == 2
        got = [s.data[0] for s in client.sample("t", 2, emit_timesteps=False)]
        np.testing.assert_array_equal(got[0], rows[[1, 3]])  # key 50: lane 1
        np.testing.assert_array_equal(got[1], rows[[0, 2]])
