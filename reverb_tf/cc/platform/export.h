// SPDX-License-Identifier: Apache-2.0
// REVERB_TF_EXPORT marks the classes and functions that form the interface of
// libreverb_tf.so. Everything else is compiled with -fvisibility=hidden (see
// .bazelrc), which keeps inline protobuf/gRPC/absl code that lands in our
// objects from leaking out of a shared object and colliding with
// TensorFlow's globally exported copies.
#ifndef REVERB_TF_CC_PLATFORM_EXPORT_H_
#define REVERB_TF_CC_PLATFORM_EXPORT_H_

#define REVERB_TF_EXPORT __attribute__((visibility("default")))

#endif  // REVERB_TF_CC_PLATFORM_EXPORT_H_
