// SPDX-License-Identifier: Apache-2.0
// Registration of reverb_tf's tf.data ops: the trajectory source (kernel in
// kernels/trajectory_dataset_kernel.cc) and the PatternDataset (kernel in
// kernels/pattern_dataset_kernel.cc).
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"

REGISTER_OP("ReverbTfTrajectoryDataset")
    .Input("server_address: string")
    .Input("table: string")
    .Attr("max_in_flight_samples_per_worker: int = 100")
    .Attr("num_workers_per_iterator: int = -1")
    .Attr("max_samples_per_stream: int = -1")
    .Attr("max_samples: int = -1")
    .Attr("rate_limiter_timeout_ms: int = -1")
    .Attr("unsqueeze: bool = false")
    .Attr("sampling_stats: bool = false")
    .Attr("column_names: list(string) = []")
    .Attr("dtypes: list(type) >= 1")
    .Attr("shapes: list(shape) >= 1")
    .Output("dataset: variant")
    .SetIsStateful()
    .SetShapeFn(tensorflow::shape_inference::ScalarShape)
    .Doc(R"doc(
A tf.data source streaming samples of a reverb_tf table.

Each element is the sampled item's key (uint64), probability (float64),
table_size (int64), priority (float64) and times_sampled (int32), followed by
its columns in the table's flattened signature order; `dtypes` and `shapes`
describe all of them (the first five included). With `sampling_stats`, two
more float64 info fields follow times_sampled: the table's total sampling
weight and the smallest probability of any of its items at that moment.

server_address: "host:port" of the reverb_tf server, or a target naming
  several shards of the table (a comma-separated list, "ipv4:a,b", or a
  "dns:///name:port" resolving to several addresses).
table: Name of the table to sample.
max_in_flight_samples_per_worker: Samples each stream requests ahead of
  consumption.
num_workers_per_iterator: Streams per iterator, each decoded by a thread of
  its own, at least one per shard; -1: one per shard. A table whose sampler
  hands items out in order (fifo, lifo, heaps) keeps one stream per shard.
max_samples_per_stream: Samples after which a stream is ended and a new one
  opened (the iterator goes on); -1: no limit.
max_samples: Samples after which the iterator ends; -1: unlimited. No more
  are requested from the servers.
rate_limiter_timeout_ms: If the table's rate limiter blocks sampling for this
  long, the iterator ends (end of sequence); -1: wait forever.
column_names: Paths of the data columns, to name them in errors.
unsqueeze: Give single-step (squeezed) columns back their time dimension of
  1, so every column has one (what TimestepDataset splits on).
sampling_stats: Emit table_weight and min_probability after times_sampled
  (importance-sampling weights).
)doc");

REGISTER_OP("ReverbTfPatternDataset")
    .Input("input_dataset: variant")
    .Input("other_arguments: Targuments")
    .Output("handle: variant")
    .Attr("is_end_of_episode: func")
    .Attr("Targuments: list(type) >= 0")
    .Attr("dtypes: list(type) >= 1")
    .Attr("shapes: list(shape) >= 1")
    .Attr("configs: list(string) >= 1")
    .Attr("clear_after_episode: bool")
    .SetShapeFn(tensorflow::shape_inference::ScalarShape)
    .Doc(R"doc(
Applies StructuredWriter configs to a dataset of steps (PatternDataset).

Each input element is one step (its flattened columns). After every step,
each config that applies (reverb_tf/cc/patterns/pattern_engine.h) produces
one output element, the tensors its pattern nodes take in flat order (a
single step as is, a slice of steps stacked along a new leading dimension).
The kernel is in kernels/pattern_dataset_kernel.cc.

input_dataset: The steps.
other_arguments: Captured inputs of `is_end_of_episode`.
is_end_of_episode: Maps a step to a scalar bool: the step ends its episode
  (end-of-episode configs are then applied).
dtypes: Dtypes of the produced elements' flat components.
shapes: Shapes of the produced elements' flat components.
configs: Serialized StructuredWriterConfig protos (same pattern structure).
clear_after_episode: Forget the steps of an episode when it ends, so that no
  element spans two episodes.
)doc");
