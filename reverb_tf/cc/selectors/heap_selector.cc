// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/selectors/heap_selector.h"

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "reverb_tf/cc/platform/status_macros.h"
#include "reverb_tf/cc/selectors/item_selector.h"

namespace reverb_tf {

HeapSelector::HeapSelector(bool min_heap) : min_heap_(min_heap) {}

bool HeapSelector::Precedes(const Entry& a, const Entry& b) const {
  if (a.priority != b.priority) {
    return min_heap_ ? a.priority < b.priority : a.priority > b.priority;
  }
  return a.insertion_rank < b.insertion_rank;
}

void HeapSelector::Place(size_t index, Entry entry) {
  index_of_[entry.key] = index;
  heap_[index] = entry;
}

// The sifts carry the moving entry in hand and shift the others into the
// hole, which halves the writes (and map updates) compared with swapping.
void HeapSelector::SiftUp(size_t index) {
  const Entry entry = heap_[index];
  while (index > 0) {
    const size_t parent = (index - 1) / 2;
    if (!Precedes(entry, heap_[parent])) break;
    Place(index, heap_[parent]);
    index = parent;
  }
  Place(index, entry);
}

void HeapSelector::SiftDown(size_t index) {
  const Entry entry = heap_[index];
  const size_t n = heap_.size();
  while (true) {
    size_t child = 2 * index + 1;
    if (child >= n) break;
    if (child + 1 < n && Precedes(heap_[child + 1], heap_[child])) ++child;
    if (!Precedes(heap_[child], entry)) break;
    Place(index, heap_[child]);
    index = child;
  }
  Place(index, entry);
}

void HeapSelector::Restore(size_t index) {
  if (index > 0 && Precedes(heap_[index], heap_[(index - 1) / 2])) {
    SiftUp(index);
  } else {
    SiftDown(index);
  }
}

absl::Status HeapSelector::Insert(Key key, double priority) {
  RETURN_IF_ERROR(ValidatePriority(priority));
  if (!index_of_.try_emplace(key, heap_.size()).second) {
    return absl::InvalidArgumentError(
        absl::StrCat("Key ", key, " is already present in HeapSelector."));
  }
  heap_.push_back(Entry{key, priority, next_insertion_rank_++});
  SiftUp(heap_.size() - 1);
  return absl::OkStatus();
}

absl::Status HeapSelector::Update(Key key, double priority) {
  RETURN_IF_ERROR(ValidatePriority(priority));
  auto it = index_of_.find(key);
  if (it == index_of_.end()) {
    return absl::NotFoundError(
        absl::StrCat("Key ", key, " not found in HeapSelector."));
  }
  const size_t index = it->second;
  heap_[index].priority = priority;
  Restore(index);
  return absl::OkStatus();
}

absl::Status HeapSelector::Delete(Key key) {
  auto it = index_of_.find(key);
  if (it == index_of_.end()) {
    return absl::NotFoundError(
        absl::StrCat("Key ", key, " not found in HeapSelector."));
  }
  const size_t index = it->second;
  index_of_.erase(it);
  const Entry last = heap_.back();
  heap_.pop_back();
  // The last entry fills the hole; it may belong above or below it.
  if (index < heap_.size()) {
    Place(index, last);
    Restore(index);
  }
  return absl::OkStatus();
}

absl::StatusOr<ItemSelector::KeyWithProbability> HeapSelector::Sample() {
  if (heap_.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("Sample called on an empty ", DebugString(), "."));
  }
  return KeyWithProbability{heap_.front().key, 1.0};
}

void HeapSelector::Clear() {
  // Swap with empty containers: clear() would keep the capacity, and Reset()
  // must give a big table's memory back.
  decltype(heap_)().swap(heap_);
  decltype(index_of_)().swap(index_of_);
}

int64_t HeapSelector::size() const {
  return static_cast<int64_t>(heap_.size());
}

SelectorOptions HeapSelector::options() const {
  SelectorOptions options;
  options.kind = min_heap_ ? SelectorOptions::Kind::kMinHeap
                           : SelectorOptions::Kind::kMaxHeap;
  return options;
}

std::string HeapSelector::DebugString() const {
  return absl::StrCat("HeapSelector(", min_heap_ ? "min" : "max",
                      ", size=", heap_.size(), ")");
}

bool HeapSelector::AppendInsertionRanks(
    std::vector<std::pair<uint64_t, Key>>* ranks) const {
  for (const Entry& entry : heap_)
    ranks->emplace_back(entry.insertion_rank, entry.key);
  return true;
}

}  // namespace reverb_tf
