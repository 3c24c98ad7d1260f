// SPDX-License-Identifier: Apache-2.0
// Tensors of the elements a dataset iterator returns.
//
// A sample becomes one tensor per info field and per column, most of them a
// few bytes (the info scalars, a small step's columns), and a batch frees
// them all at once. Each such tensor from TensorFlow's allocator costs two
// mallocs (buffer object and data) and two frees, and a batch's burst of
// frees overflows glibc's per-thread cache into fast bins that its next
// large allocation must consolidate: in a profile of a tf.data learner of
// small items that was about a fifth of the learner's CPU.
//
// NewElementTensor gives a tensor of at most kMaxPooledBytes a block from a
// process-wide free list instead: buffer object and data in one block, the
// block back on the list when TensorFlow drops the last reference (from any
// thread). The list keeps at most kMaxFreeBlocks; beyond that a block goes
// back to malloc, so it bounds what it holds at ~4 MiB.
//
// Thread safety: NewElementTensor and the release of its tensors may run on
// any threads at once.
#ifndef REVERB_TF_KERNELS_ELEMENT_TENSOR_H_
#define REVERB_TF_KERNELS_ELEMENT_TENSOR_H_

#include <cstddef>
#include <cstdint>

#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/framework/types.h"

namespace reverb_tf {

// Data bytes a pooled block holds; larger tensors come from TensorFlow's
// allocator, as do strings (their elements own memory of their own).
inline constexpr size_t kMaxPooledBytes = 192;
// Free blocks the pool keeps (each 256 bytes).
inline constexpr int64_t kMaxFreeBlocks = 16384;

// An uninitialized tensor of `dtype` and `shape`, as Tensor(dtype, shape)
// makes, from the pool when it is small and not a string.
tensorflow::Tensor NewElementTensor(tensorflow::DataType dtype,
                                    const tensorflow::TensorShape& shape);

}  // namespace reverb_tf

#endif  // REVERB_TF_KERNELS_ELEMENT_TENSOR_H_
