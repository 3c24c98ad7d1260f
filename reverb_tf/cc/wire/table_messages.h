// SPDX-License-Identifier: Apache-2.0
// The one conversion between the core's table options and the messages that
// spell them.
//
// Two messages describe a table's options with the same field names:
// schema::PriorityTableCheckpoint (a server's config, dm-reverb's message)
// and proto::CheckpointTableOptions (a checkpoint file's frozen record, whose
// numbers differ). Their selectors share a oneof named `distribution` with
// the same cases, and their rate limiters the four option fields; the wire's
// schema::TableInfo spells a selector and the limiter's options the same way
// too. So each conversion is written once, as a template over the message
// type, and the kinds of selector are mapped to messages in one place.
//
// Thread safety: pure functions.
#ifndef REVERB_TF_CC_WIRE_TABLE_MESSAGES_H_
#define REVERB_TF_CC_WIRE_TABLE_MESSAGES_H_

#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "reverb_tf/cc/item.h"
#include "reverb_tf/cc/proto/schema.pb.h"
#include "reverb_tf/cc/rate_limiters/rate_limiter.h"
#include "reverb_tf/cc/selectors/item_selector.h"
#include "reverb_tf/cc/table.h"

namespace reverb_tf {

// The selector a message's `distribution` describes. INVALID_ARGUMENT naming
// the table and `role` ("sampler", "remover") if none is set.
template <typename Selector>
absl::StatusOr<SelectorOptions> SelectorFromMessage(const Selector& message,
                                                    absl::string_view table,
                                                    absl::string_view role) {
  SelectorOptions options;
  switch (message.distribution_case()) {
    case Selector::kUniform:
      options.kind = SelectorOptions::Kind::kUniform;
      break;
    case Selector::kPrioritized:
      options.kind = SelectorOptions::Kind::kPrioritized;
      options.priority_exponent = message.prioritized().priority_exponent();
      break;
    case Selector::kFifo:
      options.kind = SelectorOptions::Kind::kFifo;
      break;
    case Selector::kLifo:
      options.kind = SelectorOptions::Kind::kLifo;
      break;
    case Selector::kHeap:
      options.kind = message.heap().min_heap()
                         ? SelectorOptions::Kind::kMinHeap
                         : SelectorOptions::Kind::kMaxHeap;
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "table '", table, "': ", role,
          " must be one of uniform, prioritized, fifo, lifo, heap"));
  }
  return options;
}

// Sets `message`'s `distribution` (and, on dm-reverb's message, the
// `is_deterministic` it reports for the ordered kinds).
template <typename Selector>
void SelectorToMessage(const SelectorOptions& options, Selector* message) {
  switch (options.kind) {
    case SelectorOptions::Kind::kUniform:
      message->set_uniform(true);
      break;
    case SelectorOptions::Kind::kPrioritized:
      message->mutable_prioritized()->set_priority_exponent(
          options.priority_exponent);
      break;
    case SelectorOptions::Kind::kFifo:
      message->set_fifo(true);
      break;
    case SelectorOptions::Kind::kLifo:
      message->set_lifo(true);
      break;
    case SelectorOptions::Kind::kMinHeap:
      message->mutable_heap()->set_min_heap(true);
      break;
    case SelectorOptions::Kind::kMaxHeap:
      message->mutable_heap()->set_min_heap(false);
      break;
  }
  if constexpr (std::is_same_v<Selector, schema::KeyDistributionOptions>) {
    message->set_is_deterministic(options.ordered());
  }
}

template <typename Limiter>
RateLimiterOptions RateLimiterFromMessage(const Limiter& message) {
  RateLimiterOptions options;
  options.samples_per_insert = message.samples_per_insert();
  options.min_size_to_sample = message.min_size_to_sample();
  options.min_diff = message.min_diff();
  options.max_diff = message.max_diff();
  return options;
}

template <typename Limiter>
void RateLimiterToMessage(const RateLimiterOptions& options, Limiter* message) {
  message->set_samples_per_insert(options.samples_per_insert);
  message->set_min_size_to_sample(options.min_size_to_sample);
  message->set_min_diff(options.min_diff);
  message->set_max_diff(options.max_diff);
}

inline TableSignature SignatureFromMessage(const schema::Signature& message) {
  TableSignature signature;
  for (const schema::ColumnSpec& column : message.columns()) {
    signature.columns.push_back(ColumnSpec{
        column.name(), static_cast<DType>(column.dtype()),
        std::vector<int64_t>(column.shape().begin(), column.shape().end())});
  }
  signature.nested_structure = message.nested_structure();
  return signature;
}

inline void SignatureToMessage(const TableSignature& signature,
                               schema::Signature* message) {
  for (const ColumnSpec& column : signature.columns) {
    schema::ColumnSpec* out = message->add_columns();
    out->set_name(column.name);
    out->set_dtype(static_cast<int32_t>(column.dtype));
    out->mutable_shape()->Assign(column.shape.begin(), column.shape.end());
  }
  message->set_nested_structure(signature.nested_structure);
}

// The options a table message describes, validated (TableOptions::Validate).
// INVALID_ARGUMENT naming the table for a missing selector or rate limiter.
template <typename TableMessage>
absl::StatusOr<TableOptions> TableOptionsFromMessage(
    const TableMessage& message) {
  TableOptions options;
  options.name = message.table_name();
  absl::StatusOr<SelectorOptions> sampler =
      SelectorFromMessage(message.sampler(), options.name, "sampler");
  if (!sampler.ok()) return sampler.status();
  options.sampler = *sampler;
  absl::StatusOr<SelectorOptions> remover =
      SelectorFromMessage(message.remover(), options.name, "remover");
  if (!remover.ok()) return remover.status();
  options.remover = *remover;
  options.max_size = message.max_size();
  options.max_times_sampled = message.max_times_sampled();
  if (!message.has_rate_limiter()) {
    return absl::InvalidArgumentError(
        absl::StrCat("table '", options.name, "': rate_limiter is required"));
  }
  options.rate_limiter = RateLimiterFromMessage(message.rate_limiter());
  if (message.has_signature()) {
    options.signature = SignatureFromMessage(message.signature());
  }
  if (absl::Status valid = options.Validate(); !valid.ok()) return valid;
  return options;
}

template <typename TableMessage>
void TableOptionsToMessage(const TableOptions& options, TableMessage* message) {
  message->set_table_name(options.name);
  SelectorToMessage(options.sampler, message->mutable_sampler());
  SelectorToMessage(options.remover, message->mutable_remover());
  message->set_max_size(options.max_size);
  message->set_max_times_sampled(options.max_times_sampled);
  RateLimiterToMessage(options.rate_limiter, message->mutable_rate_limiter());
  if (options.signature.has_value()) {
    SignatureToMessage(*options.signature, message->mutable_signature());
  }
}

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_WIRE_TABLE_MESSAGES_H_
