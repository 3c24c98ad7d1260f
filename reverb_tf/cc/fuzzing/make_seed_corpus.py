# SPDX-License-Identifier: Apache-2.0
"""Writes the wire fuzzer's seed corpus: valid requests of every kind.

Each file is one fuzzer input: a selector byte (0 insert, 1 sample response,
2 priority mutation; see wire_fuzzer.cc) followed by a serialized message.

  python make_seed_corpus.py OUT_DIR
"""

import pathlib
import subprocess
import sys

import numpy as np

from reverb_tf.cc.proto import data_pb2
from reverb_tf.cc.proto import service_pb2 as pb

_FLOAT, _INT32 = 1, 3  # wire dtype numbers of float32 and int32


def _tensor(array: np.ndarray, dtype: int, compress: bool = False) -> data_pb2.Tensor:
    data = array.tobytes()
    tensor = data_pb2.Tensor(
        dtype=dtype, shape=list(array.shape), uncompressed_size=len(data), data=data
    )
    if compress:
        tensor.compression = 1
        # --stream-size: the frame must declare its content size, as ours do.
        tensor.data = subprocess.run(
            ["zstd", "-q", "-c", f"--stream-size={len(data)}", "-"],
            input=data,
            check=True,
            capture_output=True,
        ).stdout
    return tensor


def _inserts():
    steps = np.arange(12, dtype=np.float32).reshape(6, 2)
    ints = np.arange(6, dtype=np.int32)
    chunks = [
        data_pb2.Chunk(key=1, tensor=_tensor(steps, _FLOAT)),
        data_pb2.Chunk(key=2, tensor=_tensor(ints, _INT32)),
        data_pb2.Chunk(key=3, tensor=_tensor(np.tile(steps, (40, 1)), _FLOAT, compress=True)),
    ]
    column = lambda key, offset, length, squeeze=False: data_pb2.Column(  # noqa: E731
        slices=[data_pb2.Slice(chunk_key=key, offset=offset, length=length)], squeeze=squeeze
    )
    yield pb.InsertRequest(
        chunks=chunks[:1],
        items=[data_pb2.Item(key=1, table="t", priority=1.0, columns=[column(1, 0, 6)])],
    )
    yield pb.InsertRequest(
        chunks=chunks,
        items=[
            data_pb2.Item(
                key=2,
                table="s",
                priority=1.0,
                columns=[column(1, 2, 3), column(2, 4, 1, squeeze=True)],
            ),
            data_pb2.Item(
                key=3, table="p", priority=0.5, columns=[column(3, 10, 100), column(2, 0, 6)]
            ),
            data_pb2.Item(
                key=4,
                table="t",
                priority=2.0,
                legacy_steps=True,
                columns=[
                    data_pb2.Column(
                        slices=[
                            data_pb2.Slice(chunk_key=1, offset=0, length=2),
                            data_pb2.Slice(chunk_key=3, offset=5, length=3),
                        ]
                    )
                ],
            ),
        ],
    )
    # Lane chunks: three environments' steps, row t * 3 + b environment b's
    # step t; items reference one environment's rows.
    lanes = [
        data_pb2.Chunk(key=5, tensor=_tensor(steps, _FLOAT), lane_episode_ids=[7, 8, 9]),
        data_pb2.Chunk(key=6, tensor=_tensor(ints, _INT32), lane_episode_ids=[7, 8, 9]),
    ]
    lane_column = lambda key, rows: data_pb2.Column(  # noqa: E731
        slices=[data_pb2.Slice(chunk_key=key, offset=row, length=1) for row in rows]
    )
    yield pb.InsertRequest(
        chunks=lanes,
        items=[
            data_pb2.Item(
                key=10 + b,
                table="t",
                priority=1.0,
                columns=[lane_column(5, [b, b + 3]), lane_column(6, [b + 3])],
            )
            for b in range(3)
        ],
    )
    # The same items as one batch: lane b's rows are lane 0's plus b.
    yield pb.InsertRequest(
        chunks=lanes,
        item_batches=[
            data_pb2.ItemBatch(
                table="t",
                keys=[20, 21, 22],
                priorities=[1.0, 2.0, 0.5],
                lanes=[0, 1, 2],
                columns=[lane_column(5, [0, 3]), lane_column(6, [3])],
            )
        ],
    )


def _responses():
    steps = np.arange(8, dtype=np.float32).reshape(4, 2)
    yield pb.SampleResponse(
        chunks=[
            data_pb2.Chunk(key=9, tensor=_tensor(steps, _FLOAT)),
            data_pb2.Chunk(key=8, tensor=_tensor(np.tile(steps, (30, 1)), _FLOAT, compress=True)),
        ],
        items=[
            pb.SampledItem(
                info=pb.SampleInfo(key=1, probability=0.5, table_size=2),
                columns=[
                    data_pb2.Column(slices=[data_pb2.Slice(chunk_key=9, length=4)]),
                    data_pb2.Column(
                        slices=[data_pb2.Slice(chunk_key=8, offset=3, length=1)], squeeze=True
                    ),
                ],
            )
        ],
    )


def _mutations():
    yield pb.MutatePrioritiesRequest(
        table="p", keys=[1, 2, 3], priorities=[0.1, 5.0, 2.0], deletes=[4, 8]
    )
    yield pb.MutatePrioritiesRequest(table="t", keys=[9], priorities=[1.0], deletes=[1, 1])


def main() -> None:
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for selector, messages in ((0, _inserts()), (1, _responses()), (2, _mutations())):
        for i, message in enumerate(messages):
            (out / f"seed-{selector}-{i}").write_bytes(
                bytes([selector]) + message.SerializeToString()
            )


if __name__ == "__main__":
    main()
