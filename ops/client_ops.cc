// SPDX-License-Identifier: Apache-2.0
// Registration of the ops behind reverb_tf.TFClient. Kernels:
// kernels/tf_client_kernels.cc.
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"

REGISTER_OP("ReverbTfUpdatePriorities")
    .Input("server_address: string")
    .Input("table: string")
    .Input("keys: uint64")
    .Input("priorities: double")
    .SetIsStateful()
    .SetShapeFn(tensorflow::shape_inference::NoOutputs)
    .Doc(R"doc(
Sets the priorities of items of `table`; keys no longer in the table are
skipped. `keys` and `priorities` are vectors of the same length.
)doc");

REGISTER_OP("ReverbTfInsert")
    .Input("server_address: string")
    .Input("tables: string")
    .Input("priorities: double")
    .Input("data: T")
    .Attr("T: list(type) >= 1")
    .SetIsStateful()
    .SetShapeFn(tensorflow::shape_inference::NoOutputs)
    .Doc(R"doc(
Inserts `data` as one single-step item into each of `tables` (a vector) with
the matching entry of `priorities`, and returns once the server stored them
(blocking while a rate limiter holds the insert back).
)doc");

REGISTER_OP("ReverbTfSample")
    .Input("server_address: string")
    .Input("table: string")
    .Output("key: uint64")
    .Output("probability: double")
    .Output("table_size: int64")
    .Output("priority: double")
    .Output("times_sampled: int32")
    .Output("table_weight: double")
    .Output("min_probability: double")
    .Output("data: dtypes")
    .Attr("dtypes: list(type) >= 1")
    .SetIsStateful()
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) {
      for (int i = 0; i < 7; ++i) c->set_output(i, c->Scalar());
      for (int i = 7; i < c->num_outputs(); ++i)
        c->set_output(i, c->UnknownShape());
      return absl::OkStatus();
    })
    .Doc(R"doc(
Samples one item of `table` (blocking while its rate limiter holds sampling
back; cancelling the step aborts the wait). Outputs its info (with the
table's total sampling weight and smallest sampling probability, for
importance-sampling weights) and its columns, which must have `dtypes`.
)doc");
