// SPDX-License-Identifier: Apache-2.0
// Compile-time proof that reverb_tf's DType numbering equals the installed
// TensorFlow's DataType enum, which the TF kernels rely on to convert dtypes
// with a cast. Only std-only headers of ours may sit next to TF's here.
#include "reverb_tf/cc/dtype.h"
#include "tensorflow/core/framework/types.pb.h"

namespace {

#define REVERB_TF_CHECK_DTYPE(ours, theirs)                   \
  static_assert(static_cast<int>(::reverb_tf::DType::ours) == \
                    static_cast<int>(::tensorflow::theirs),   \
                #ours " must equal tensorflow::" #theirs)

REVERB_TF_CHECK_DTYPE(kFloat, DT_FLOAT);
REVERB_TF_CHECK_DTYPE(kDouble, DT_DOUBLE);
REVERB_TF_CHECK_DTYPE(kInt32, DT_INT32);
REVERB_TF_CHECK_DTYPE(kUint8, DT_UINT8);
REVERB_TF_CHECK_DTYPE(kInt16, DT_INT16);
REVERB_TF_CHECK_DTYPE(kInt8, DT_INT8);
REVERB_TF_CHECK_DTYPE(kString, DT_STRING);
REVERB_TF_CHECK_DTYPE(kComplex64, DT_COMPLEX64);
REVERB_TF_CHECK_DTYPE(kInt64, DT_INT64);
REVERB_TF_CHECK_DTYPE(kBool, DT_BOOL);
REVERB_TF_CHECK_DTYPE(kBfloat16, DT_BFLOAT16);
REVERB_TF_CHECK_DTYPE(kUint16, DT_UINT16);
REVERB_TF_CHECK_DTYPE(kComplex128, DT_COMPLEX128);
REVERB_TF_CHECK_DTYPE(kHalf, DT_HALF);
REVERB_TF_CHECK_DTYPE(kUint32, DT_UINT32);
REVERB_TF_CHECK_DTYPE(kUint64, DT_UINT64);

}  // namespace

int main() { return 0; }
