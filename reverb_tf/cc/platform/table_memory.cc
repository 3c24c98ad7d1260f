// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/platform/table_memory.h"

#include <sys/mman.h>

#include <atomic>
#include <cstdint>
#include <new>

namespace reverb_tf {
namespace {

std::atomic<int64_t> mapped_bytes{0};

// Whole 4 KiB pages: the part past the last full huge page keeps small
// pages, so a block just above a huge page's size does not cost two.
size_t MappedSize(size_t bytes) {
  constexpr size_t kPage = 4096;
  return (bytes + kPage - 1) / kPage * kPage;
}

}  // namespace

void* AllocateTableMemory(size_t bytes) {
  if (bytes < kHugeBlockBytes) return ::operator new(bytes);
  const size_t size = MappedSize(bytes);
  // A huge page needs a 2 MiB-aligned range: map 2 MiB more than needed and
  // unmap the unaligned ends.
  void* raw = mmap(nullptr, size + kHugeBlockBytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) throw std::bad_alloc();
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned =
      (start + kHugeBlockBytes - 1) & ~(uintptr_t{kHugeBlockBytes} - 1);
  if (aligned > start) munmap(raw, aligned - start);
  const uintptr_t end = start + size + kHugeBlockBytes;
  if (end > aligned + size)
    munmap(reinterpret_cast<void*>(aligned + size), end - aligned - size);
  void* block = reinterpret_cast<void*>(aligned);
  // Advice, not a requirement: without transparent huge pages the block
  // keeps ordinary pages.
  madvise(block, size, MADV_HUGEPAGE);
  mapped_bytes.fetch_add(static_cast<int64_t>(size), std::memory_order_relaxed);
  return block;
}

void FreeTableMemory(void* block, size_t bytes) {
  if (block == nullptr) return;
  if (bytes < kHugeBlockBytes) {
    ::operator delete(block);
    return;
  }
  const size_t size = MappedSize(bytes);
  munmap(block, size);
  mapped_bytes.fetch_sub(static_cast<int64_t>(size), std::memory_order_relaxed);
}

int64_t MappedTableBytes() {
  return mapped_bytes.load(std::memory_order_relaxed);
}

}  // namespace reverb_tf
