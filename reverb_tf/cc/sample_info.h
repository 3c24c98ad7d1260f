// SPDX-License-Identifier: Apache-2.0
// What a sample tells about the item it returns and the table it came from:
// one struct from the table that chose the item to the Python, TensorFlow
// and wire layers that report it. It holds plain numbers only (no absl), so
// that the TensorFlow facade (client/tf_facade.h), whose users see no header
// of ours but the standard library's, can carry it too.
//
// Thread safety: a value type.
#ifndef REVERB_TF_CC_SAMPLE_INFO_H_
#define REVERB_TF_CC_SAMPLE_INFO_H_

#include <cstdint>

#include "reverb_tf/cc/item_key.h"

namespace reverb_tf {

struct SampleInfo {
  Key key = 0;
  double priority = 0;
  // Including this sample.
  int32_t times_sampled = 0;
  // Probability with which the sampler chose the item.
  double probability = 0;
  // Table size when the item was chosen.
  int64_t table_size = 0;
  // The sampler's total weight when the item was chosen (ItemSelector::
  // TotalWeight): the size for most samplers, the sum of priority^exponent
  // for a prioritized one.
  double table_weight = 0;
  // The smallest probability any item of the table had when this one was
  // chosen: (probability / min_probability)^-beta is the item's
  // importance-sampling weight normalised by the largest. With several
  // shards, this, probability and table_size are those of one table holding
  // every shard's items (client/sharded_sampler.h), except for queue-like
  // tables, whose samples keep their shard's.
  double min_probability = 0;
  // True if the call had to wait for the rate limiter.
  bool rate_limited = false;
};

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_SAMPLE_INFO_H_
