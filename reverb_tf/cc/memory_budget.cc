// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/memory_budget.h"

#include <algorithm>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace reverb_tf {
namespace {

// Marks the budget's refusals, which a caller may treat as "would wait".
constexpr char kExhaustedPayload[] = "reverb_tf/memory_budget_exhausted";

}  // namespace

MemoryBudget::MemoryBudget(int64_t limit, const ChunkStore* store,
                           std::function<int64_t()> count_items)
    : limit_(limit), store_(store), count_items_(std::move(count_items)) {}

int64_t MemoryBudget::used() const {
  return store_->num_live_bytes() + count_items_() * kItemBytes;
}

absl::Status MemoryBudget::AwaitRoom(absl::Time deadline, Cancellation* cancel,
                                     absl::string_view what) {
  if (HasRoom()) return absl::OkStatus();
  NoteWaiting(1);
  absl::Status status;
  while (!HasRoom()) {
    if (closed()) {
      status = absl::CancelledError(absl::StrCat(
          "the server is stopping: stopped waiting for memory to ", what));
      break;
    }
    if (cancel != nullptr && cancel->IsCancelled()) {
      status = absl::CancelledError(
          absl::StrCat("cancelled while waiting for memory to ", what));
      break;
    }
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      NoteRefused();
      status = Exhausted(what);
      break;
    }
    absl::SleepFor(std::min(deadline - now, kRecheck));
  }
  NoteWaiting(-1);
  return status;
}

absl::Status MemoryBudget::Exhausted(absl::string_view what) const {
  // With a spill directory, room runs out when the disk takes no more.
  const absl::Status spill = store_->spill_error();
  absl::Status status = absl::ResourceExhaustedError(absl::StrCat(
      "the server's memory budget is used up (memory_limit ", limit_,
      " bytes; ", used(), " bytes of chunks and items held in RAM)",
      spill.ok() ? ""
                 : absl::StrCat(" and the spill directory takes no more (",
                                spill.message(), ")"),
      ": could not ", what,
      " in time; sampling with max_times_sampled, deletes, evictions or a "
      "reset make room"));
  status.SetPayload(kExhaustedPayload, absl::Cord("1"));
  return status;
}

bool MemoryBudget::IsExhausted(const absl::Status& status) {
  return status.GetPayload(kExhaustedPayload).has_value();
}

}  // namespace reverb_tf
