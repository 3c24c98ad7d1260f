// SPDX-License-Identifier: Apache-2.0
// Internal to the client (client.h's Sampler): one SampleStream.
//
// StreamSampler reads one SampleStream in the caller's thread, keeping
// max_in_flight samples requested ahead of what was consumed (topped up each
// time half of them have been consumed), so a consumer never waits for a
// round trip.
#ifndef REVERB_TF_CC_CLIENT_STREAM_SAMPLER_H_
#define REVERB_TF_CC_CLIENT_STREAM_SAMPLER_H_

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
#include "google/protobuf/arena.h"
#include "reverb_tf/cc/client/client.h"
#include "reverb_tf/cc/client/client_stub.h"

namespace reverb_tf {

// Samples that may still be requested from the servers, shared by the
// streams of one sampler so that all of them together never request more
// than max_samples (what a queue-like table must not lose to prefetching).
// No stream takes more than its share of what remains, so that a small
// budget is spread over the streams and the last samples are requested by
// the streams the merge draws from. Thread-safe.
class SampleBudget {
 public:
  SampleBudget(int64_t total, int streams)
      : remaining_(total), streams_(streams) {}
  // Takes up to `wanted`, and at most ceil(remaining / streams); returns how
  // many were taken.
  int64_t Take(int64_t wanted);
  // Gives back samples requested on a stream that failed before they came.
  void Give(int64_t n) { remaining_.fetch_add(n); }

 private:
  std::atomic<int64_t> remaining_;
  const int streams_;
};

struct SamplerStream;

// Thread safety: Next()/TryNext() from one thread at a time; Cancel() and
// ordered() from any thread.
class StreamSampler : public Sampler {
 public:
  // With a `budget`, credits are taken from it (and options.max_samples is
  // not consulted): Next() reports OUT_OF_RANGE once it is spent and every
  // sample taken from it was returned.
  StreamSampler(std::shared_ptr<ClientStub> stub, std::string table,
                const SamplerOptions& options,
                std::shared_ptr<SampleBudget> budget = nullptr);
  ~StreamSampler() override;

  absl::Status Next(Sample* sample) override;
  bool TryNext(Sample* sample) override;
  void Cancel() override;

  // The table's sampler hands items out in order (known from the first
  // response on).
  bool ordered() const { return ordered_.load(); }

 private:
  absl::Status Fail(absl::Status status);
  // Grants credits up to max_in_flight ahead of what was returned (within
  // max_samples, the stream's share and the budget). False: the stream
  // broke (its status is Finish()'s to tell).
  bool TopUp();
  // TopUp() once half the window has been consumed.
  void TopUpAtLowWater();
  // Reads the next response into buffer_, granting credits first.
  absl::Status Refill();
  // Replaces the stream (a retry, or max_samples_per_stream reached); the
  // credits of the old one that brought nothing go back to the budget.
  void OpenStream();

  const std::shared_ptr<ClientStub> stub_;
  const std::string table_;
  const SamplerOptions options_;
  const std::shared_ptr<SampleBudget> budget_;
  std::unique_ptr<SamplerStream> stream_;
  // Holds the response being decoded (Refill()).
  google::protobuf::Arena arena_;
  std::vector<Sample> buffer_;
  size_t next_in_buffer_ = 0;
  int64_t returned_ = 0;
  // Samples received (decoded) and requested, over all streams.
  int64_t received_ = 0;
  int64_t granted_ = 0;
  // returned_ when the current stream was opened.
  int64_t stream_start_ = 0;
  absl::Status error_;
  std::atomic<bool> cancelled_{false};
  std::atomic<bool> ordered_{false};
  // Guards replacing stream_ (a retry) against Cancel() from another thread.
  absl::Mutex stream_mu_;
};

// A stream failure that another attempt may cure: the server went away
// (UNAVAILABLE) or ended the call while stopping (CANCELLED).
inline bool IsShardFailure(const absl::Status& status) {
  return absl::IsUnavailable(status) || absl::IsCancelled(status);
}

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_CLIENT_STREAM_SAMPLER_H_
