// SPDX-License-Identifier: Apache-2.0
// MutateStream on the completion-queue API: the state machine of one
// call; and the queue both async streams share, the thread that polls it
// (replay_service.h says why), its start and its end.

#include <pthread.h>

#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "grpcpp/support/async_stream.h"
#include "reverb_tf/cc/platform/out_of_memory.h"
#include "reverb_tf/cc/service/guarded_call.h"
#include "reverb_tf/cc/service/replay_service.h"
#include "reverb_tf/cc/service/service_messages.h"
#include "reverb_tf/cc/wire/conversions.h"

namespace reverb_tf {

using service_internal::CallTimer;
using service_internal::kMutateStreamMethod;
using service_internal::ParseMessage;
using service_internal::SerializeMessage;
using service_internal::StreamMessage;
using service_internal::StreamSlot;

// One MutateStream, from gRPC handing it over to its end. Each event of the
// queue moves it on by one step, and at most one operation of it is in
// flight, so one of the queue's threads at a time touches it
// (EndMutateStreams' TryCancel of its context is gRPC's to make safe).
class ReplayService::MutateStreamCall : public QueueEvent {
 public:
  explicit MutateStreamCall(ReplayService* service) : service_(service) {}
  MutateStreamCall(const MutateStreamCall&) = delete;
  MutateStreamCall& operator=(const MutateStreamCall&) = delete;
  ~MutateStreamCall() {
    if (registered_) service_->UnregisterAsyncStream(&context_);
  }

  // Puts this call on the queue to receive the next MutateStream; false
  // once the queue is shut down.
  bool Await() {
    return StartOperation([&] {
      service_->RequestAsyncBidiStreaming(
          kMutateStreamMethod, &context_, &stream_,
          service_->stream_queue_.get(), service_->stream_queue_.get(), tag());
    });
  }

  // The outcome of the operation in flight; deletes the call at its end.
  void Fire(bool ok) override {
    std::optional<grpc::Status> end;
    // An allocation failure ends the call as it ends a sync handler's.
    if (grpc::Status failed = GuardedCall("MutateStream",
                                          [&] {
                                            end = Advance(ok);
                                            return grpc::Status::OK;
                                          });
        !failed.ok()) {
      end = std::move(failed);
    }
    if (!end.has_value()) return;
    if (step_ == Step::kFinishing) {
      delete this;
      return;
    }
    step_ = Step::kFinishing;
    // A queue shut down meanwhile: nothing more comes back for this call.
    if (!StartOperation([&] { stream_.Finish(*end, tag()); })) delete this;
  }

 private:
  enum class Step { kAccepting, kReading, kWriting, kFinishing };

  // Starts the next operation and returns nothing, or returns the status to
  // end the call with instead.
  std::optional<grpc::Status> Advance(bool ok) {
    switch (step_) {
      case Step::kAccepting: {
        // Not ok: the queue is shutting down, and no call came.
        if (!ok) {
          step_ = Step::kFinishing;
          return grpc::Status::OK;
        }
        service_->AwaitMutateStream();
        grpc::Status admitted =
            service_->RegisterAsyncStream(&context_, "MutateStream");
        if (!admitted.ok()) return admitted;
        registered_ = true;
        return Read();
      }
      case Step::kReading: {
        // Not ok: the client half-closed the stream or went away.
        if (!ok) return grpc::Status::OK;
        proto::MutatePrioritiesRequest request;
        if (absl::Status parsed = ParseMessage(
                &message_, StreamMessage(++count_), &service_->metrics_,
                /*store=*/nullptr, &request);
            !parsed.ok()) {
          return ToGrpcStatus(parsed);
        }
        proto::MutatePrioritiesResponse response;
        {
          CallTimer timer(
              &service_->metrics_.latency[ServiceMetrics::kMutatePriorities]);
          absl::Status status = service_->CheckAccepting();
          if (status.ok()) {
            status = CatchOutOfMemory(
                "applying priority updates and deletes",
                [&] { return service_->Mutate(request, &response); });
          }
          if (!status.ok()) {
            response.Clear();
            response.set_error_code(static_cast<int32_t>(status.code()));
            response.set_error_message(std::string(status.message()));
          }
        }
        message_.Clear();
        if (!SerializeMessage(response, &service_->metrics_, &message_)) {
          return grpc::Status(grpc::StatusCode::INTERNAL,
                              "a MutateStream answer did not serialize");
        }
        step_ = Step::kWriting;
        if (!StartOperation([&] { stream_.Write(message_, tag()); })) {
          return grpc::Status::OK;
        }
        return std::nullopt;
      }
      case Step::kWriting:
        // Not ok: the client is gone.
        if (!ok) return grpc::Status::OK;
        return Read();
      case Step::kFinishing:
        return grpc::Status::OK;
    }
    return grpc::Status::OK;
  }

  std::optional<grpc::Status> Read() {
    step_ = Step::kReading;
    if (!StartOperation([&] { stream_.Read(&message_, tag()); })) {
      return grpc::Status::OK;
    }
    return std::nullopt;
  }

  // Runs `start` (which starts one operation on the queue) unless the queue
  // is shut down; false if it was.
  template <typename StartFn>
  bool StartOperation(StartFn start) {
    return service_->stream_queue_.Start(start);
  }

  // This call as the queue's tag for its operations.
  void* tag() { return static_cast<QueueEvent*>(this); }

  ReplayService* const service_;
  grpc::ServerContext context_;
  grpc::ServerAsyncReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer> stream_{
      &context_};
  Step step_ = Step::kAccepting;
  // The message read, then the answer written.
  grpc::ByteBuffer message_;
  int64_t count_ = 0;
  bool registered_ = false;
};

void ReplayService::StartAsyncStreams(
    std::unique_ptr<grpc::ServerCompletionQueue> queue, int threads) {
  // Idle waiting threads are kept a while: a rate-limited writer waits for
  // nearly every message.
  insert_waits_ = std::make_unique<ElasticThreadPool>(absl::Seconds(2),
                                                      /*keep_idle=*/2);
  stream_queue_.Open(std::move(queue));
  AwaitMutateStream();
  AwaitInsertStream();
  for (int i = 0; i < threads; ++i) {
    stream_threads_.emplace_back([this, i] { ServeAsyncStreams(i == 0); });
  }
}

void ReplayService::AwaitMutateStream() {
  if (AsyncStreamsEnded()) return;
  auto* call = new MutateStreamCall(this);
  if (!call->Await()) delete call;
}

void ReplayService::ServeAsyncStreams(bool first) {
  // Named for top, gdb and /proc (tests count them by it).
  pthread_setname_np(pthread_self(), kStreamThreadName);
  void* tag = nullptr;
  bool ok = false;
  absl::Time window_start = absl::Now();
  auto fire = [&] {
    const absl::Time start = absl::Now();
    static_cast<QueueEvent*>(tag)->Fire(ok);
    const absl::Time end = absl::Now();
    stream_busy_ns_.fetch_add(absl::ToInt64Nanoseconds(end - start),
                              std::memory_order_relaxed);
    if (!first || end - window_start < kLoadWindow) return;
    const double busy =
        static_cast<double>(stream_busy_ns_.exchange(0)) /
        static_cast<double>(absl::ToInt64Nanoseconds(end - window_start));
    window_start = end;
    if (busy >= kBusyOn || busy <= kBusyOff) {
      absl::MutexLock lock(&stream_load_mu_);
      stream_load_high_ = busy >= kBusyOn;
    }
  };
  if (first) {
    while (stream_queue_.get()->Next(&tag, &ok)) fire();
    return;
  }
  for (;;) {
    {
      // Parked, polling nothing, while the load is low: a second poller
      // would hand most messages of a quiet server from thread to thread.
      absl::MutexLock lock(&stream_load_mu_);
      stream_load_mu_.Await(absl::Condition(
          +[](ReplayService* s)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->stream_load_mu_) {
                 return s->stream_load_high_ || s->stream_threads_stopping_;
               },
          this));
      // The first thread drains what is left on the queue.
      if (stream_threads_stopping_) return;
    }
    switch (stream_queue_.get()->AsyncNext(
        &tag, &ok, absl::ToChronoTime(absl::Now() + kLoadWindow))) {
      case grpc::CompletionQueue::SHUTDOWN:
        return;
      case grpc::CompletionQueue::TIMEOUT: {
        // A whole window without an event for this thread: the load is low,
        // whatever the first thread (which judges only when it has an
        // event, so not at all once traffic stops) saw last. Parked until
        // it judges the load high again, instead of waking every window.
        absl::MutexLock lock(&stream_load_mu_);
        stream_load_high_ = false;
        break;
      }
      case grpc::CompletionQueue::GOT_EVENT:
        fire();
        break;
    }
  }
}

grpc::Status ReplayService::RegisterAsyncStream(grpc::ServerContext* context,
                                                const char* method) {
  if (grpc::Status admitted = Admit(context, Role::kWriter, method);
      !admitted.ok()) {
    return admitted;
  }
  StreamSlot slot(&active_streams_, limits_.max_active_streams);
  if (!slot.ok()) return TooManyStreams();
  absl::MutexLock lock(&async_streams_mu_);
  if (async_streams_ended_) {
    return ToGrpcStatus(absl::UnavailableError("the server is stopping"));
  }
  async_streams_.emplace(context, true);
  slot.Keep();  // given back by UnregisterAsyncStream
  return grpc::Status::OK;
}

void ReplayService::UnregisterAsyncStream(grpc::ServerContext* context) {
  absl::MutexLock lock(&async_streams_mu_);
  async_streams_.erase(context);
  active_streams_.fetch_sub(1, std::memory_order_relaxed);
}

bool ReplayService::SetAsyncStreamIdle(grpc::ServerContext* context,
                                       bool idle) {
  absl::MutexLock lock(&async_streams_mu_);
  if (idle && async_streams_ended_) return false;
  async_streams_[context] = idle;
  return true;
}

bool ReplayService::AsyncStreamsEnded() {
  absl::MutexLock lock(&async_streams_mu_);
  return async_streams_ended_;
}

void ReplayService::StopAsyncStreams() {
  if (!stream_queue_.started()) return;
  // Messages the pool carries on wake their queue when done, so the queue
  // must outlive them; the closed tables and cancelled calls end them.
  insert_waits_->WaitIdle();
  {
    absl::MutexLock lock(&stream_load_mu_);
    stream_threads_stopping_ = true;
  }
  stream_queue_.Shutdown();
  for (std::thread& thread : stream_threads_) thread.join();
  stream_threads_.clear();
  stream_queue_.Reset();
  insert_waits_.reset();
}

void ReplayService::DiscardQueue(
    std::unique_ptr<grpc::ServerCompletionQueue> queue) {
  queue->Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (queue->Next(&tag, &ok)) {
  }
}

void ReplayService::EndAsyncStreams() {
  absl::MutexLock lock(&async_streams_mu_);
  async_streams_ended_ = true;
  // A call leaves the map under this lock: each context is alive here.
  for (const auto& [context, idle] : async_streams_) {
    if (idle) context->TryCancel();
  }
}

}  // namespace reverb_tf
