// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/item.h"

#include <algorithm>
#include <new>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/types/span.h"

namespace reverb_tf {
namespace {

// The shape a column of `trajectory` has once materialized.
Shape ColumnShape(const SlicedColumn& column) {
  const absl::Span<const int64_t> chunk_shape =
      column.slices().front().chunk->shape();
  Shape shape;
  if (!column.squeeze()) shape.push_back(column.num_steps());
  shape.insert(shape.end(), chunk_shape.begin() + 1, chunk_shape.end());
  return shape;
}

bool ShapeCompatible(absl::Span<const int64_t> spec,
                     absl::Span<const int64_t> actual) {
  if (spec.size() != actual.size()) return false;
  for (size_t i = 0; i < spec.size(); ++i) {
    if (spec[i] != -1 && spec[i] != actual[i]) return false;
  }
  return true;
}

}  // namespace

static_assert(sizeof(SlicedColumn) == 24,
              "a stored column is 24 bytes (see item.h)");

SlicedColumn::SlicedColumn(std::initializer_list<ChunkSlice> slices,
                           bool squeeze)
    : SlicedColumn() {
  AddSlices(slices);
  squeeze_ = squeeze;
}

SlicedColumn::SlicedColumn(const SlicedColumn& other) : SlicedColumn() {
  AddSlices(other.slices());
  squeeze_ = other.squeeze_;
}

SlicedColumn::SlicedColumn(SlicedColumn&& other) noexcept : SlicedColumn() {
  TakeFrom(other);
}

SlicedColumn& SlicedColumn::operator=(const SlicedColumn& other) {
  if (this != &other) *this = SlicedColumn(other);
  return *this;
}

SlicedColumn& SlicedColumn::operator=(SlicedColumn&& other) noexcept {
  if (this != &other) {
    Clear();
    TakeFrom(other);
  }
  return *this;
}

void SlicedColumn::TakeFrom(SlicedColumn& other) noexcept {
  squeeze_ = other.squeeze_;
  if (other.on_heap_) {
    heap_ = other.heap_;
    on_heap_ = true;
    size_ = other.size_;
    other.on_heap_ = false;
    other.heap_ = {nullptr, 0};
    other.size_ = 0;
  } else if (other.size_ == 1) {
    new (&inline_) ChunkSlice(std::move(other.inline_));
    size_ = 1;
    other.inline_.~ChunkSlice();
    other.size_ = 0;
  }
}

void SlicedColumn::Clear() {
  ChunkSlice* slices = data();
  for (uint32_t i = 0; i < size_; ++i) slices[i].~ChunkSlice();
  if (on_heap_) ::operator delete(heap_.data);
  on_heap_ = false;
  size_ = 0;
}

void SlicedColumn::Reserve(size_t n) {
  if (n <= capacity()) return;
  const size_t grown = std::max(n, 2 * capacity());
  auto* fresh =
      static_cast<ChunkSlice*>(::operator new(grown * sizeof(ChunkSlice)));
  ChunkSlice* old = data();
  for (uint32_t i = 0; i < size_; ++i) {
    new (&fresh[i]) ChunkSlice(std::move(old[i]));
    old[i].~ChunkSlice();
  }
  if (on_heap_) ::operator delete(heap_.data);
  heap_ = {fresh, static_cast<uint32_t>(grown)};
  on_heap_ = true;
}

void SlicedColumn::AddSlices(absl::Span<const ChunkSlice> slices) {
  Reserve(size_ + slices.size());
  for (const ChunkSlice& slice : slices) add_slice(slice);
}

void SlicedColumn::add_slice(ChunkSlice slice) {
  Reserve(size_ + size_t{1});
  new (&data()[size_]) ChunkSlice(std::move(slice));
  ++size_;
}

void SlicedColumn::resize_slices(size_t n) {
  if (n < size_) {
    ChunkSlice* slices = data();
    for (size_t i = n; i < size_; ++i) slices[i].~ChunkSlice();
    size_ = static_cast<uint32_t>(n);
    return;
  }
  Reserve(n);
  ChunkSlice* slices = data();
  for (size_t i = size_; i < n; ++i) new (&slices[i]) ChunkSlice();
  size_ = static_cast<uint32_t>(n);
}

int64_t SlicedColumn::num_steps() const {
  int64_t n = 0;
  for (const ChunkSlice& slice : slices()) n += slice.length;
  return n;
}

absl::Status ValidateTrajectory(const Trajectory& trajectory) {
  if (trajectory.empty()) {
    return absl::InvalidArgumentError("trajectory has no columns");
  }
  for (size_t c = 0; c < trajectory.size(); ++c) {
    const SlicedColumn& column = trajectory[c];
    if (column.slices().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("column ", c, " of the trajectory is empty"));
    }
    const Chunk* first = column.slices().front().chunk.get();
    for (const ChunkSlice& slice : column.slices()) {
      if (slice.chunk == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat("column ", c, " references a missing chunk"));
      }
      if (slice.length < 1 || slice.offset < 0 ||
          slice.offset + int64_t{slice.length} > slice.chunk->num_steps()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "column ", c, ": slice [", slice.offset, ", ",
            slice.offset + int64_t{slice.length}, ") is outside chunk ",
            slice.chunk->key(), " of ", slice.chunk->num_steps(), " steps"));
      }
      const Chunk& a = *slice.chunk;
      const Chunk& b = *first;
      if (a.dtype() != b.dtype() ||
          !std::equal(a.shape().begin() + 1, a.shape().end(),
                      b.shape().begin() + 1, b.shape().end())) {
        return absl::InvalidArgumentError(absl::StrCat(
            "column ", c, " mixes chunks of ", DTypeName(b.dtype()),
            ShapeDebugString(b.shape()), " and ", DTypeName(a.dtype()),
            ShapeDebugString(a.shape())));
      }
    }
    if (column.squeeze() && column.num_steps() != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "column ", c, " is squeezed but has ", column.num_steps(), " steps"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckColumnCount(size_t num_columns,
                              const TableSignature& signature) {
  if (num_columns == signature.columns.size()) return absl::OkStatus();
  std::vector<absl::string_view> names;
  for (const ColumnSpec& spec : signature.columns) names.push_back(spec.name);
  return absl::InvalidArgumentError(absl::StrCat(
      "the table signature has ", signature.columns.size(), " columns (",
      absl::StrJoin(names, ", "), ") but the item has ", num_columns));
}

absl::Status CheckColumnAgainstSpec(const ColumnSpec& spec, size_t index,
                                    DType dtype,
                                    absl::Span<const int64_t> shape,
                                    bool squeeze, bool legacy_steps,
                                    absl::string_view data_name) {
  const bool shape_ok = ShapeCompatible(spec.shape, shape) ||
                        (legacy_steps && !squeeze && !shape.empty() &&
                         ShapeCompatible(spec.shape, shape.subspan(1)));
  if (dtype == spec.dtype && shape_ok) return absl::OkStatus();
  const std::string name = spec.name.empty() ? absl::StrCat(index) : spec.name;
  const std::string data = data_name.empty() || data_name == name
                               ? ""
                               : absl::StrCat(" (data path '", data_name, "')");
  return absl::InvalidArgumentError(absl::StrCat(
      "column '", name, "'", data, " must be ", DTypeName(spec.dtype),
      ShapeDebugString(spec.shape), " (-1: any size) but the item has ",
      DTypeName(dtype), ShapeDebugString(shape)));
}

absl::Status ValidateAgainstSignature(const Trajectory& trajectory,
                                      const TableSignature& signature,
                                      bool legacy_steps) {
  if (absl::Status status = CheckColumnCount(trajectory.size(), signature);
      !status.ok()) {
    return status;
  }
  for (size_t c = 0; c < trajectory.size(); ++c) {
    if (absl::Status status = CheckColumnAgainstSpec(
            signature.columns[c], c,
            trajectory[c].slices().front().chunk->dtype(),
            ColumnShape(trajectory[c]), trajectory[c].squeeze(), legacy_steps);
        !status.ok()) {
      return status;
    }
  }
  return absl::OkStatus();
}

}  // namespace reverb_tf
