// SPDX-License-Identifier: Apache-2.0
// The key that names an item in a table, chosen by the writer (unique per
// table; a key written again replaces the item). Its own header so that the
// selectors, which only see keys, need not depend on items and chunks.
#ifndef REVERB_TF_CC_ITEM_KEY_H_
#define REVERB_TF_CC_ITEM_KEY_H_

#include <cstdint>

namespace reverb_tf {

using Key = uint64_t;

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_ITEM_KEY_H_
