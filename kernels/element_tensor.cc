// SPDX-License-Identifier: Apache-2.0
#include "kernels/element_tensor.h"

#include <new>

#include "tensorflow/core/framework/allocation_description.pb.h"
#include "tensorflow/core/platform/mutex.h"
#include "tsl/platform/mem.h"

namespace reverb_tf {
namespace {

// A block: the buffer object, then its data at TensorFlow's alignment
// (Allocator::kAllocatorAlignment, which Eigen's vectorized kernels assume).
constexpr size_t kDataOffset = 64;
constexpr size_t kBlockBytes = kDataOffset + kMaxPooledBytes;

// The free blocks, linked through their first bytes.
class FreeBlocks {
 public:
  void* Take() {
    {
      tensorflow::mutex_lock lock(mu_);
      if (head_ != nullptr) {
        Link* block = head_;
        head_ = block->next;
        --size_;
        return block;
      }
    }
    return tsl::port::AlignedMalloc(kBlockBytes, kDataOffset);
  }

  void Give(void* block) {
    {
      tensorflow::mutex_lock lock(mu_);
      if (size_ < kMaxFreeBlocks) {
        head_ = new (block) Link{head_};
        ++size_;
        return;
      }
    }
    tsl::port::AlignedFree(block);
  }

 private:
  struct Link {
    Link* next;
  };
  tensorflow::mutex mu_;
  Link* head_ TF_GUARDED_BY(mu_) = nullptr;
  int64_t size_ TF_GUARDED_BY(mu_) = 0;
};

// Never destroyed: tensors may be released while the process exits.
FreeBlocks& Pool() {
  static FreeBlocks* const pool = new FreeBlocks();
  return *pool;
}

class PooledBuffer final : public tensorflow::TensorBuffer {
 public:
  static PooledBuffer* New(size_t bytes) {
    char* block = static_cast<char*>(Pool().Take());
    return new (block) PooledBuffer(block + kDataOffset, bytes);
  }

  // RefCounted's `delete this` ends here (the destructor is virtual): the
  // block goes back to the pool.
  static void operator delete(void* block) { Pool().Give(block); }

  size_t size() const override { return bytes_; }
  TensorBuffer* root_buffer() override { return this; }
  void FillAllocationDescription(
      tensorflow::AllocationDescription* proto) const override {
    proto->set_requested_bytes(static_cast<int64_t>(bytes_));
    proto->set_allocated_bytes(static_cast<int64_t>(kBlockBytes));
    proto->set_allocator_name("reverb_tf_element_pool");
  }

 private:
  PooledBuffer(void* data, size_t bytes) : TensorBuffer(data), bytes_(bytes) {}

  const size_t bytes_;
};

static_assert(sizeof(PooledBuffer) <= kDataOffset,
              "the buffer object must fit before its data");

}  // namespace

tensorflow::Tensor NewElementTensor(tensorflow::DataType dtype,
                                    const tensorflow::TensorShape& shape) {
  const size_t bytes = static_cast<size_t>(shape.num_elements()) *
                       tensorflow::DataTypeSize(dtype);
  // Strings (and other types whose elements own memory) are not memcpy-able.
  if (!tensorflow::DataTypeCanUseMemcpy(dtype) || bytes > kMaxPooledBytes) {
    return tensorflow::Tensor(dtype, shape);
  }
  return tensorflow::Tensor(
      dtype, shape,
      tensorflow::core::RefCountPtr<tensorflow::TensorBuffer>(
          PooledBuffer::New(bytes)));
}

}  // namespace reverb_tf
