// SPDX-License-Identifier: Apache-2.0
// Registration of the ops behind reverb_tf.TFTrajectoryWriter: a writer
// resource over the C++ TrajectoryWriter, so that a tf.function actor
// writes overlapping trajectories that share chunks, as the Python writer
// does, without leaving the graph. Kernels:
// kernels/trajectory_writer_kernels.cc.
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"

REGISTER_OP("ReverbTfTrajectoryWriter")
    .Input("server_address: string")
    .Output("handle: resource")
    .Attr("num_keep_alive_refs: int")
    .Attr("max_chunk_length: int = 0")
    .Attr("max_in_flight_items: int = 128")
    .Attr("validate_items: bool = true")
    .Attr("container: string = ''")
    .Attr("shared_name: string = ''")
    .SetIsStateful()
    .SetShapeFn(tensorflow::shape_inference::ScalarShape)
    .Doc(R"doc(
The writer named `shared_name` (created on the first run, connected to
`server_address`, one server or several shards). Destroying the resource
(DestroyResourceOp) closes it.
)doc");

REGISTER_OP("ReverbTfTrajectoryWriterAppend")
    .Input("handle: resource")
    .Input("values: T")
    .Output("step: int64")
    .Attr("T: list(type) >= 1")
    .Attr("columns: list(int) >= 1")
    .Attr("names: list(string) >= 1")
    .Attr("partial_step: bool = false")
    .SetIsStateful()
    .SetShapeFn(tensorflow::shape_inference::ScalarShape)
    .Doc(R"doc(
Appends one step: values[i] to column columns[i] (named names[i] in errors),
the writer's other columns missing in it. With partial_step the step stays
open for more columns. Returns the step's index.
)doc");

REGISTER_OP("ReverbTfTrajectoryWriterCreateItem")
    .Input("handle: resource")
    .Input("table: string")
    .Input("priority: double")
    .Attr("columns: list(int) >= 1")
    .Attr("starts: list(int) >= 1")
    .Attr("stops: list(int) >= 1")
    .Attr("has_starts: list(bool) >= 1")
    .Attr("has_stops: list(bool) >= 1")
    .Attr("squeeze: list(bool) >= 1")
    .SetIsStateful()
    .SetShapeFn(tensorflow::shape_inference::NoOutputs)
    .Doc(R"doc(
Queues an item for `table` whose i-th column is history entries
[starts[i], stops[i]) of column columns[i] (Python slice semantics; an open
end where has_starts/has_stops is false), or with squeeze[i] the single
entry starts[i]. Blocks while the writer's in-flight items are at their
limit.
)doc");

REGISTER_OP("ReverbTfTrajectoryWriterFlush")
    .Input("handle: resource")
    .Input("block_until_num_items: int32")
    .Input("timeout_ms: int64")
    .SetIsStateful()
    .SetShapeFn(tensorflow::shape_inference::NoOutputs)
    .Doc(R"doc(
Waits until at most `block_until_num_items` items are unconfirmed
(timeout_ms < 0: without a limit; DEADLINE_EXCEEDED after it).
)doc");

REGISTER_OP("ReverbTfTrajectoryWriterEndEpisode")
    .Input("handle: resource")
    .Input("clear_buffers: bool")
    .Input("timeout_ms: int64")
    .SetIsStateful()
    .SetShapeFn(tensorflow::shape_inference::NoOutputs)
    .Doc(R"doc(
Ends the episode (the next step is step 0 of a new one) and flushes; with
clear_buffers the history is emptied.
)doc");

REGISTER_OP("ReverbTfTrajectoryWriterEpisodeSteps")
    .Input("handle: resource")
    .Output("steps: int32")
    .SetIsStateful()
    .SetShapeFn(tensorflow::shape_inference::ScalarShape)
    .Doc(R"doc(
Steps appended since the last end of an episode.
)doc");
