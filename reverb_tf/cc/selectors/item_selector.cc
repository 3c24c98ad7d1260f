// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/selectors/item_selector.h"

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "reverb_tf/cc/platform/status_macros.h"
#include "reverb_tf/cc/selectors/heap_selector.h"
#include "reverb_tf/cc/selectors/order_selectors.h"
#include "reverb_tf/cc/selectors/prioritized_selector.h"
#include "reverb_tf/cc/selectors/uniform_selector.h"

namespace reverb_tf {
namespace {

// Returns nullptr for values outside the enum so callers can report them
// instead of printing garbage (options may come from a config or checkpoint).
const char* KindName(SelectorOptions::Kind kind) {
  switch (kind) {
    case SelectorOptions::Kind::kUniform:
      return "Uniform";
    case SelectorOptions::Kind::kPrioritized:
      return "Prioritized";
    case SelectorOptions::Kind::kFifo:
      return "Fifo";
    case SelectorOptions::Kind::kLifo:
      return "Lifo";
    case SelectorOptions::Kind::kMinHeap:
      return "MinHeap";
    case SelectorOptions::Kind::kMaxHeap:
      return "MaxHeap";
  }
  return nullptr;
}

}  // namespace

absl::Status ValidatePriority(double priority) {
  if (!std::isnan(priority)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("Priority must not be NaN, got ", priority, "."));
}

absl::Status ValidatePriorityWeight(double priority) {
  // Written so that NaN fails too: every comparison with NaN is false.
  if (priority >= 0.0 && std::isfinite(priority)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("Priority must be finite and non-negative for a prioritized "
                   "selector, got ",
                   priority, "."));
}

absl::Status ItemSelector::UpdateMany(
    absl::Span<const std::pair<Key, double>> updates, size_t* applied) {
  *applied = 0;
  for (const auto& [key, priority] : updates) {
    RETURN_IF_ERROR(Update(key, priority));
    ++*applied;
  }
  return absl::OkStatus();
}

absl::Status SelectorOptions::Validate() const {
  if (KindName(kind) == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("Unknown selector kind ", static_cast<int>(kind), "."));
  }
  if (kind == Kind::kPrioritized) {
    return ValidatePriorityExponent(priority_exponent);
  }
  return absl::OkStatus();
}

std::string SelectorOptions::DebugString() const {
  const char* name = KindName(kind);
  std::string kind_str =
      name != nullptr ? name
                      : absl::StrCat("Unknown(", static_cast<int>(kind), ")");
  if (kind == Kind::kPrioritized) {
    return absl::StrCat("SelectorOptions(kind=", kind_str,
                        ", priority_exponent=", priority_exponent, ")");
  }
  return absl::StrCat("SelectorOptions(kind=", kind_str, ")");
}

absl::StatusOr<std::unique_ptr<ItemSelector>> MakeSelector(
    const SelectorOptions& options, uint64_t seed) {
  switch (options.kind) {
    case SelectorOptions::Kind::kUniform:
      return std::unique_ptr<ItemSelector>(
          std::make_unique<UniformSelector>(seed));
    case SelectorOptions::Kind::kPrioritized: {
      RETURN_IF_ERROR(options.Validate());
      return std::unique_ptr<ItemSelector>(
          std::make_unique<PrioritizedSelector>(options.priority_exponent,
                                                seed));
    }
    case SelectorOptions::Kind::kFifo:
      return std::unique_ptr<ItemSelector>(std::make_unique<FifoSelector>());
    case SelectorOptions::Kind::kLifo:
      return std::unique_ptr<ItemSelector>(std::make_unique<LifoSelector>());
    case SelectorOptions::Kind::kMinHeap:
      return std::unique_ptr<ItemSelector>(
          std::make_unique<HeapSelector>(/*min_heap=*/true));
    case SelectorOptions::Kind::kMaxHeap:
      return std::unique_ptr<ItemSelector>(
          std::make_unique<HeapSelector>(/*min_heap=*/false));
  }
  // Reachable when a corrupt config or checkpoint casts an out-of-range
  // integer to Kind.
  return absl::InvalidArgumentError(
      absl::StrCat("Unknown selector kind ", static_cast<int>(options.kind),
                   " in ", options.DebugString(), "."));
}

}  // namespace reverb_tf
