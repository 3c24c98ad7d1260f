// SPDX-License-Identifier: Apache-2.0
// Internal to the client (client.h's Sampler): sampling a table of a server
// in this process (local_server.h) without a stream.
#ifndef REVERB_TF_CC_CLIENT_IN_PROCESS_SAMPLER_H_
#define REVERB_TF_CC_CLIENT_IN_PROCESS_SAMPLER_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "reverb_tf/cc/client/client.h"
#include "reverb_tf/cc/client/client_stub.h"

namespace reverb_tf {

// Samples a table of a server in this process directly (local_server.h):
// Table::Sample with the same batch, timeout and cancellation as a stream,
// the sampled columns materialized from the chunks without serialization.
// Thread safety: as StreamSampler.
class InProcessSampler : public Sampler {
 public:
  InProcessSampler(std::shared_ptr<ClientStub> stub, std::string table,
                   const SamplerOptions& options);

  absl::Status Next(Sample* sample) override;
  bool TryNext(Sample* sample) override;
  void Cancel() override { cancel_.Cancel(); }

  // The table's items themselves, for a caller that reads their chunks
  // (sample_batch.cc stacks them without materializing each sample):
  // replaces `items` with between 1 and `max_items` sampled items, blocking
  // for the first, under the same max_samples, timeout and cancellation as
  // Next(). FAILED_PRECONDITION while samples that Next() materialized are
  // still buffered (buffered() > 0); errors as Next() otherwise.
  absl::Status NextItems(int64_t max_items, std::vector<SampledItem>* items);
  // Materialized samples not yet returned by Next()/TryNext().
  size_t buffered() const { return buffer_.size() - next_in_buffer_; }

 private:
  absl::Status Refill();
  // One Table::Sample call of up to `max_items` (and the sampler's batch
  // and max_samples limits).
  absl::StatusOr<std::vector<SampledItem>> SampleTable(int64_t max_items);

  const std::shared_ptr<ClientStub> stub_;
  const std::string table_;
  const SamplerOptions options_;
  Cancellation cancel_;
  std::vector<Sample> buffer_;
  size_t next_in_buffer_ = 0;
  int64_t returned_ = 0;
  absl::Status error_;
};

// Materializes `item`'s columns (uncompressed) into `sample`.
absl::Status MaterializeSample(const SampledItem& item, Sample* sample);

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_CLIENT_IN_PROCESS_SAMPLER_H_
