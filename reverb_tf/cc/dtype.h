// SPDX-License-Identifier: Apache-2.0
// Element types of tensors in reverb_tf.
//
// This header uses the standard library only: the TF kernels include it next
// to TensorFlow's own headers, where our absl and protobuf must not appear
// (../../docs/native_linking.md).
#ifndef REVERB_TF_CC_DTYPE_H_
#define REVERB_TF_CC_DTYPE_H_

#include <cstdint>

namespace reverb_tf {

// Element types. The numbering equals TensorFlow's DataType enum so that the
// TF kernels convert with a range check instead of a table; the core itself
// never includes TF. tests/native/tf_dtype_compat_test.cc checks the
// numbering against the installed TensorFlow's headers.
enum class DType : int32_t {
  kInvalid = 0,
  kFloat = 1,
  kDouble = 2,
  kInt32 = 3,
  kUint8 = 4,
  kInt16 = 5,
  kInt8 = 6,
  kString = 7,
  kComplex64 = 8,
  kInt64 = 9,
  kBool = 10,
  kBfloat16 = 14,
  kUint16 = 17,
  kComplex128 = 18,
  kHalf = 19,
  kUint32 = 22,
  kUint64 = 23,
};

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_DTYPE_H_
