// SPDX-License-Identifier: Apache-2.0
// Items, trajectories and table signatures.
//
// An Item is what a table stores and samples: a key, a priority and a
// trajectory. The trajectory is a list of columns; each column is a list of
// slices of chunks (chunk_store.h) that, concatenated along dimension 0, give
// the column's steps. Items hold shared references to chunks, so many items
// in many tables can reference the same data without copying it.
//
// Thread safety: value types; the Table guards the items it stores.
#ifndef REVERB_TF_CC_ITEM_H_
#define REVERB_TF_CC_ITEM_H_

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "reverb_tf/cc/chunk_store.h"
#include "reverb_tf/cc/item_key.h"
#include "reverb_tf/cc/platform/export.h"

namespace reverb_tf {

// Steps [offset, offset + length) of one chunk.
struct ChunkSlice {
  ChunkRef chunk;
  int32_t offset = 0;
  int32_t length = 0;
};

// One column of a stored item: slices of chunks, concatenated in order. (The
// writer's reference to the steps it will become is an ItemColumn; Python's
// TrajectoryColumn is that reference.)
//
// 24 bytes, because a table holds one per column of every item: almost every
// column is a single slice, kept inline; more slices go to one heap array.
// (An absl::InlinedVector<ChunkSlice, 1> and a bool would take 32.)
class REVERB_TF_EXPORT SlicedColumn {
 public:
  SlicedColumn() : heap_{nullptr, 0} {}
  SlicedColumn(std::initializer_list<ChunkSlice> slices, bool squeeze);
  SlicedColumn(const SlicedColumn& other);
  SlicedColumn(SlicedColumn&& other) noexcept;
  SlicedColumn& operator=(const SlicedColumn& other);
  SlicedColumn& operator=(SlicedColumn&& other) noexcept;
  ~SlicedColumn() { Clear(); }

  absl::Span<const ChunkSlice> slices() const { return {data(), size_}; }
  absl::Span<ChunkSlice> mutable_slices() { return {data(), size_}; }
  void add_slice(ChunkSlice slice);
  // Keeps the first `n` slices, or adds slices without a chunk up to `n`.
  void resize_slices(size_t n);

  // A squeezed column must have exactly one step and is returned without its
  // time dimension (what `history[col][-1]` produces in the Python writer).
  bool squeeze() const { return squeeze_; }
  void set_squeeze(bool squeeze) { squeeze_ = squeeze; }

  int64_t num_steps() const;

 private:
  struct HeapSlices {
    ChunkSlice* data;
    uint32_t capacity;
  };

  ChunkSlice* data() { return on_heap_ ? heap_.data : &inline_; }
  const ChunkSlice* data() const { return on_heap_ ? heap_.data : &inline_; }
  size_t capacity() const { return on_heap_ ? heap_.capacity : 1; }
  void Reserve(size_t n);
  // Copies `slices` after the present ones, growing the array at most once.
  void AddSlices(absl::Span<const ChunkSlice> slices);
  // Destroys every slice and frees the heap array: back to empty and inline.
  void Clear();
  // Takes `other`'s slices; this column must be empty and inline.
  void TakeFrom(SlicedColumn& other) noexcept;

  // inline_ is alive iff !on_heap_ && size_ == 1; heap_.data holds size_
  // live slices of heap_.capacity iff on_heap_.
  union {
    ChunkSlice inline_;
    HeapSlices heap_;
  };
  uint32_t size_ = 0;
  bool on_heap_ = false;
  bool squeeze_ = false;
};

using Trajectory = std::vector<SlicedColumn>;

// Checks that every slice is non-empty and inside its chunk and that squeezed
// columns have exactly one step.
REVERB_TF_EXPORT absl::Status ValidateTrajectory(const Trajectory& trajectory);

struct Item {
  Key key = 0;
  double priority = 0;
  Trajectory trajectory;
  int32_t times_sampled = 0;
  // Made by dm-reverb's legacy Writer: see ValidateAgainstSignature. Only
  // read when the item is inserted (it fits in the struct's padding).
  bool legacy_steps = false;
  // Written by a writer made with validate_items=False (dm-reverb's way to
  // insert what does not match a table's signature): the table accepts it
  // either way and counts it if it does not match (TableCounters).
  bool unchecked = false;
};

// What a table promises about the trajectory of every item it accepts.
struct ColumnSpec {
  std::string name;
  DType dtype = DType::kInvalid;
  // Dimensions; -1 means any size. For unsqueezed columns dimension 0 is the
  // number of steps.
  std::vector<int64_t> shape;

  bool operator==(const ColumnSpec& other) const {
    return name == other.name && dtype == other.dtype && shape == other.shape;
  }
};

struct TableSignature {
  std::vector<ColumnSpec> columns;
  // Opaque to the core: the client's encoding of the nested structure the
  // flat columns come from, returned verbatim by server_info.
  std::string nested_structure;
};

// Checks `trajectory` against `signature`; the error names the column and the
// expected and actual dtype/shape. With `legacy_steps` (items of dm-reverb's
// legacy Writer) a column also matches a signature that describes one of its
// steps, which is what dm-reverb accepts for such items: a table whose
// signature is `int64[]` takes `Client.insert(np.int64(0), ...)`, sampled
// back as `int64[1]`.
REVERB_TF_EXPORT absl::Status ValidateAgainstSignature(
    const Trajectory& trajectory, const TableSignature& signature,
    bool legacy_steps = false);

// The per-column part of ValidateAgainstSignature, for callers that know a
// column's dtype and materialized shape without holding its chunks (the
// client's writer, before it sends an item). `data_name`, if not empty, is
// the caller's name for the column, shown when it differs from the spec's.
REVERB_TF_EXPORT absl::Status CheckColumnAgainstSpec(
    const ColumnSpec& spec, size_t index, DType dtype,
    absl::Span<const int64_t> shape, bool squeeze, bool legacy_steps,
    absl::string_view data_name = "");

// The column-count part of ValidateAgainstSignature.
REVERB_TF_EXPORT absl::Status CheckColumnCount(size_t num_columns,
                                               const TableSignature& signature);

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_ITEM_H_
