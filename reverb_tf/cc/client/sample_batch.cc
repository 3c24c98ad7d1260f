// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/client/sample_batch.h"

#include <cstring>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "reverb_tf/cc/chunk_store.h"
#include "reverb_tf/cc/client/in_process_sampler.h"
#include "reverb_tf/cc/platform/status_macros.h"

namespace reverb_tf {
namespace {

std::string TypeString(DType dtype, absl::Span<const int64_t> shape) {
  return absl::StrCat(DTypeName(dtype), ShapeDebugString(shape));
}

// Consecutive row-major bytes of a column of one sample.
struct Piece {
  // The bytes in hand, kept alive by `hold` (empty for a payload's)...
  absl::string_view bytes;
  ChunkBytes hold;
  // ... or, when set, all `size` bytes of this chunk (kept alive by the
  // sampled item), copied only when the batch's row is filled: bytes on
  // the disk tier are read straight into it.
  const Chunk* whole = nullptr;
  size_t size() const {
    return whole != nullptr ? static_cast<size_t>(whole->data_size())
                            : bytes.size();
  }
};

// One column of one sample, wherever its bytes are: a materialized
// payload, or rows of its chunks read in place.
struct ColumnView {
  DType dtype = DType::kInvalid;
  Shape shape;
  bool squeezed = false;
  // Fixed-size dtypes: the row-major bytes, in order.
  absl::InlinedVector<Piece, 4> pieces;
  int64_t num_bytes() const {
    int64_t n = 0;
    for (const Piece& piece : pieces) n += static_cast<int64_t>(piece.size());
    return n;
  }
  // kString: the (uncompressed) payload holding the elements.
  const TensorPayload* strings = nullptr;
};

// Lays out the batch's columns from its first sample.
absl::Status StartColumns(absl::Span<const ColumnView> first,
                          int64_t batch_size, StackedBatch* batch) {
  batch->columns.resize(first.size());
  for (size_t i = 0; i < first.size(); ++i) {
    const ColumnView& view = first[i];
    StackedColumn& column = batch->columns[i];
    column.dtype = view.dtype;
    column.squeezed = view.squeezed;
    column.shape.clear();
    column.shape.push_back(batch_size);
    column.shape.insert(column.shape.end(), view.shape.begin(),
                        view.shape.end());
    if (view.dtype == DType::kString) {
      continue;
    }
    const int64_t row_bytes = view.num_bytes();
    if (row_bytes > 0 && batch_size > kMaxPayloadBytes / row_bytes) {
      return absl::ResourceExhaustedError(
          absl::StrCat("a batch of ", batch_size, " items of column ", i, " (",
                       TypeString(view.dtype, view.shape), ", ", row_bytes,
                       " bytes each) would exceed ", kMaxPayloadBytes,
                       " bytes; use a smaller batch"));
    }
    // Room for the whole batch, taken once; rows are copied in as samples
    // arrive.
    column.data.Reset(batch_size * row_bytes);
  }
  return absl::OkStatus();
}

// Appends `view`'s rows to `column`, which fits them.
absl::Status FillRows(const ColumnView& view, StackedColumn* column) {
  if (view.dtype == DType::kString) {
    ASSIGN_OR_RETURN(std::vector<std::string> elements,
                     DecodeStrings(*view.strings));
    for (std::string& element : elements)
      column->strings.push_back(std::move(element));
    return absl::OkStatus();
  }
  for (const Piece& piece : view.pieces) {
    if (piece.whole == nullptr) {
      column->data.Append(piece.bytes);
    } else {
      RETURN_IF_ERROR(piece.whole->CopyTo(column->data.Grow(piece.size())));
    }
  }
  return absl::OkStatus();
}

absl::Status AppendColumns(absl::Span<const ColumnView> views,
                           const SampleInfo& info, int64_t batch_size,
                           StackedBatch* batch) {
  if (batch->infos.empty())
    RETURN_IF_ERROR(StartColumns(views, batch_size, batch));
  const int64_t index = batch->size();
  if (views.size() != batch->columns.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot batch samples with different numbers of columns: sample 0 has ",
        batch->columns.size(), ", sample ", index, " has ", views.size()));
  }
  for (size_t i = 0; i < views.size(); ++i) {
    const ColumnView& view = views[i];
    StackedColumn& column = batch->columns[i];
    const bool same_shape = view.shape.size() + 1 == column.shape.size() &&
                            std::equal(view.shape.begin(), view.shape.end(),
                                       column.shape.begin() + 1);
    if (view.dtype != column.dtype || !same_shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cannot batch column ", i, ": sample 0 is ",
          TypeString(column.dtype,
                     absl::MakeConstSpan(column.shape).subspan(1)),
          " but sample ", index, " is ", TypeString(view.dtype, view.shape),
          "; every item of a batch needs the same dtype and shape"));
    }
  }
  // Every view fits its column: fill the rows. A column that cannot be
  // filled (a chunk that cannot be read back) leaves the batch as it was
  // before this sample.
  absl::InlinedVector<size_t, 8> sizes;
  for (const StackedColumn& column : batch->columns) {
    sizes.push_back(column.dtype == DType::kString ? column.strings.size()
                                                   : column.data.size());
  }
  for (size_t i = 0; i < views.size(); ++i) {
    if (absl::Status filled = FillRows(views[i], &batch->columns[i]);
        !filled.ok()) {
      for (size_t j = 0; j < batch->columns.size(); ++j) {
        StackedColumn& column = batch->columns[j];
        if (column.dtype == DType::kString) {
          column.strings.resize(sizes[j]);
        } else {
          column.data.Truncate(sizes[j]);
        }
      }
      return absl::Status(filled.code(), absl::StrCat("item ", info.key, ": ",
                                                      filled.message()));
    }
  }
  batch->infos.push_back(info);
  return absl::OkStatus();
}

absl::Status AppendSample(const Sample& sample, int64_t batch_size,
                          StackedBatch* batch) {
  absl::InlinedVector<ColumnView, 8> views(sample.columns.size());
  for (size_t i = 0; i < sample.columns.size(); ++i) {
    const TensorPayload& payload = sample.columns[i];
    if (payload.compression != Compression::kNone) {
      return absl::InternalError("the sampler returned a compressed column");
    }
    ColumnView& view = views[i];
    view.dtype = payload.dtype;
    view.shape = payload.shape;
    view.squeezed = i < sample.squeezed.size() && sample.squeezed[i];
    if (payload.dtype == DType::kString) {
      view.strings = &payload;
    } else {
      view.pieces.push_back(Piece{payload.data});
    }
  }
  return AppendColumns(views, sample.info, batch_size, batch);
}

// The rows of `column` in its chunks, if its slices are of uncompressed,
// fixed-size chunks of one dtype and row shape (what nearly every column
// is): read in place, without materializing the sample, so that rows read
// back from the disk tier are copied once, into the batch.
bool RowsInPlace(const SlicedColumn& column, ColumnView* view) {
  if (column.slices().empty()) return false;
  const Chunk& first = *column.slices()[0].chunk;
  const absl::Span<const int64_t> row_shape =
      first.shape().empty() ? first.shape() : first.shape().subspan(1);
  int64_t rows = 0;
  for (const ChunkSlice& slice : column.slices()) {
    const Chunk& chunk = *slice.chunk;
    const absl::Span<const int64_t> shape = chunk.shape();
    if (chunk.compression() != Compression::kNone ||
        chunk.dtype() == DType::kString || chunk.dtype() != first.dtype() ||
        shape.empty() || shape.subspan(1) != row_shape || slice.offset < 0 ||
        slice.length < 0 || slice.offset + slice.length > shape[0]) {
      return false;  // the general path reports what is wrong, if anything
    }
    rows += slice.length;
  }
  if (column.squeeze() && rows != 1) return false;
  int64_t row_bytes = DTypeSize(first.dtype());
  for (int64_t d : row_shape) row_bytes *= d;
  view->dtype = first.dtype();
  view->squeezed = column.squeeze();
  view->shape.clear();
  if (!column.squeeze()) view->shape.push_back(rows);
  view->shape.insert(view->shape.end(), row_shape.begin(), row_shape.end());
  view->pieces.clear();
  for (const ChunkSlice& slice : column.slices()) {
    const Chunk& chunk = *slice.chunk;
    if (chunk.spillable() && slice.offset == 0 &&
        slice.length == chunk.shape()[0]) {
      view->pieces.push_back(Piece{{}, ChunkBytes(), &chunk});
      continue;
    }
    // A chunk that cannot be read back goes the general way, which says why.
    absl::StatusOr<ChunkBytes> bytes = chunk.Read();
    if (!bytes.ok()) return false;
    const absl::string_view rows_view = bytes->view().substr(
        slice.offset * row_bytes, slice.length * row_bytes);
    view->pieces.push_back(Piece{rows_view, *std::move(bytes)});
  }
  return true;
}

absl::Status AppendItem(const SampledItem& item, int64_t batch_size,
                        StackedBatch* batch) {
  absl::InlinedVector<ColumnView, 8> views(item.trajectory.size());
  bool in_place = true;
  for (size_t i = 0; i < item.trajectory.size() && in_place; ++i) {
    in_place = RowsInPlace(item.trajectory[i], &views[i]);
  }
  if (!in_place) {
    Sample sample;
    RETURN_IF_ERROR(MaterializeSample(item, &sample));
    return AppendSample(sample, batch_size, batch);
  }
  return AppendColumns(views, item, batch_size, batch);
}

// NextStackedBatch for a server of this process: the sampled items' chunks
// are read in place (no Sample of payloads per item).
absl::Status NextStackedInProcess(InProcessSampler* sampler, int64_t batch_size,
                                  StackedBatch* batch) {
  std::vector<SampledItem> items;
  absl::Status status;
  while (batch->size() < batch_size) {
    status = sampler->NextItems(batch_size - batch->size(), &items);
    if (!status.ok()) break;
    for (const SampledItem& item : items)
      RETURN_IF_ERROR(AppendItem(item, batch_size, batch));
  }
  return status;
}

}  // namespace

absl::Status NextStackedBatch(Sampler* sampler, int64_t batch_size,
                              StackedBatch* batch) {
  if (batch_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch_size must be at least 1, got ", batch_size));
  }
  batch->infos.clear();
  batch->columns.clear();
  batch->infos.reserve(batch_size);
  absl::Status status;
  if (auto* local = dynamic_cast<InProcessSampler*>(sampler);
      local != nullptr && local->buffered() == 0) {
    status = NextStackedInProcess(local, batch_size, batch);
  } else {
    Sample sample;
    while (batch->size() < batch_size) {
      // Samples already received are taken without a wait; Next() blocks
      // only when none is.
      if (!sampler->TryNext(&sample)) {
        status = sampler->Next(&sample);
        if (!status.ok()) break;
      }
      status = AppendSample(sample, batch_size, batch);
      if (!status.ok()) return status;
    }
  }
  const int64_t size = batch->size();
  for (StackedColumn& column : batch->columns) column.shape[0] = size;
  return status;
}

}  // namespace reverb_tf
