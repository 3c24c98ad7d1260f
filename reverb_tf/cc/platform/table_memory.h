// SPDX-License-Identifier: Apache-2.0
// Memory for a table's per-item arrays and hash maps.
//
// A table of millions of items spreads its key maps and sum trees over
// hundreds of megabytes, and every priority update or sample lands on random
// lines of them. With 4 KiB pages nearly every one of those accesses also
// misses the TLB, and the page walks then cost about as much as the cache
// misses themselves: priority updates on a 1M-item table took 163 µs per
// 256 keys with 4 KiB pages and 115 µs with huge pages (65 µs at 10k items).
//
// So blocks of kHugeBlockBytes or more are mapped on their own, 2 MiB
// aligned (to whole 4 KiB pages, not whole huge pages), and offered to the
// kernel's transparent huge pages (MADV_HUGEPAGE, honoured when
// /sys/kernel/mm/transparent_hugepage/enabled is "madvise" or "always";
// elsewhere they are ordinary pages). Freeing such a block unmaps it at once.
// Smaller blocks come from operator new.
//
// Thread safety: everything here is thread-safe.
#ifndef REVERB_TF_CC_PLATFORM_TABLE_MEMORY_H_
#define REVERB_TF_CC_PLATFORM_TABLE_MEMORY_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "reverb_tf/cc/platform/export.h"

namespace reverb_tf {

inline constexpr size_t kHugeBlockBytes = size_t{2} << 20;

// `bytes` of memory aligned for any fundamental type; throws std::bad_alloc
// if there is none.
REVERB_TF_EXPORT void* AllocateTableMemory(size_t bytes);
// Frees a block of AllocateTableMemory(`bytes`).
REVERB_TF_EXPORT void FreeTableMemory(void* block, size_t bytes);
// Bytes of the big blocks mapped now. malloc's statistics (mallinfo2) do not
// see them.
REVERB_TF_EXPORT int64_t MappedTableBytes();

// A stateless allocator over AllocateTableMemory, for std and absl containers.
template <typename T>
class TableAllocator {
 public:
  using value_type = T;

  TableAllocator() = default;
  template <typename U>
  TableAllocator(const TableAllocator<U>&) {}  // NOLINT: rebinding is implicit.

  T* allocate(size_t n) {
    static_assert(alignof(T) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__,
                  "operator new must align the small blocks");
    return static_cast<T*>(AllocateTableMemory(n * sizeof(T)));
  }
  void deallocate(T* block, size_t n) { FreeTableMemory(block, n * sizeof(T)); }

  template <typename U>
  bool operator==(const TableAllocator<U>&) const {
    return true;
  }
  template <typename U>
  bool operator!=(const TableAllocator<U>&) const {
    return false;
  }
};

template <typename T>
using TableVector = std::vector<T, TableAllocator<T>>;

template <typename K, typename V>
using TableMap = absl::flat_hash_map<K, V, absl::Hash<K>, std::equal_to<K>,
                                     TableAllocator<std::pair<const K, V>>>;

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_PLATFORM_TABLE_MEMORY_H_
