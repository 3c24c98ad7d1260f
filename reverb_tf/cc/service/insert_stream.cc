// SPDX-License-Identifier: Apache-2.0
// InsertStream on the completion-queue API: the state machine of one call
// and the hand-off of a message that must wait to the service's pool
// (replay_service.h says why).

#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "google/protobuf/arena.h"
#include "grpcpp/alarm.h"
#include "grpcpp/support/async_stream.h"
#include "reverb_tf/cc/platform/out_of_memory.h"
#include "reverb_tf/cc/service/guarded_call.h"
#include "reverb_tf/cc/service/replay_service.h"
#include "reverb_tf/cc/service/service_messages.h"
#include "reverb_tf/cc/wire/conversions.h"

namespace reverb_tf {

using service_internal::kInsertStreamMethod;
using service_internal::ParseMessage;
using service_internal::SerializeMessage;
using service_internal::StreamMessage;

// One InsertStream, from gRPC handing it over to its end.
//
// Each event of the queue moves it on; events come from the queue's
// threads, one at a time (`proceed_mu_`: a Read and a Write may end at once
// on two threads). At most one Read and one Write are in flight (gRPC's
// rule), and a Read is started only once the message before it is done, so
// a message is carried on by one thread at a time: a queue's thread, or,
// from the first wait to the message's end, a thread of the pool
// (`handed_off_`).
// What the pool's thread shares with the queue's (the acknowledgements to
// write, its outcome, the alarm that wakes the queue) is under mu_.
//
// The call is deleted once gRPC has finished it and delivered its done
// notification (which also says whether the client cancelled: that fires
// `cancel_`, ending a wait at once), and no alarm is pending.
class ReplayService::InsertStreamCall {
 public:
  explicit InsertStreamCall(ReplayService* service)
      : service_(service), session_(service, &cancel_) {}
  InsertStreamCall(const InsertStreamCall&) = delete;
  InsertStreamCall& operator=(const InsertStreamCall&) = delete;
  ~InsertStreamCall() {
    if (registered_) service_->UnregisterAsyncStream(&context_);
  }

  // What a queue event is about; a tag is one of tags_.
  enum Event { kAccepted, kRead, kWritten, kFinished, kAlarm, kDone, kEvents };
  struct Tag : QueueEvent {
    void Fire(bool ok) override { call->Proceed(event, ok); }
    InsertStreamCall* call = nullptr;
    Event event = kEvents;
  };

  // Puts this call on the queue to receive the next InsertStream; false
  // once the queue is shut down.
  bool Await() {
    for (int e = 0; e < kEvents; ++e) {
      tags_[e].call = this;
      tags_[e].event = static_cast<Event>(e);
    }
    return service_->stream_queue_.Start([&] {
      context_.AsyncNotifyWhenDone(TagOf(kDone));
      service_->RequestAsyncBidiStreaming(
          kInsertStreamMethod, &context_, &stream_,
          service_->stream_queue_.get(), service_->stream_queue_.get(),
          TagOf(kAccepted));
    });
  }

  // An event of the queue; may delete the call.
  void Proceed(Event event, bool ok) {
    if (event == kAccepted && !ok) {
      // The queue is shutting down and no call came: gRPC sends no done
      // notification for a call that never started.
      delete this;
      return;
    }
    proceed_mu_.Lock();  // not MutexLock: the call may be deleted after it
    if (grpc::Status failed = GuardedCall("InsertStream",
                                          [&] {
                                            Handle(event, ok);
                                            return grpc::Status::OK;
                                          });
        !failed.ok()) {
      End(std::move(failed));
    }
    Advance();
    const bool last = finished_ && done_ && !AlarmPending();
    proceed_mu_.Unlock();
    if (last) delete this;
  }

 private:
  void Handle(Event event, bool ok) {
    switch (event) {
      case kAccepted:
        service_->AwaitInsertStream();
        if (grpc::Status admitted =
                service_->RegisterAsyncStream(&context_, "InsertStream");
            !admitted.ok()) {
          End(std::move(admitted));
        } else {
          registered_ = true;
          Read();
        }
        return;
      case kRead:
        reading_ = false;
        // Not ok: the client half-closed the stream or went away.
        if (!ok) {
          End(grpc::Status::OK);
          return;
        }
        service_->SetAsyncStreamIdle(&context_, false);
        Received();
        return;
      case kWritten:
        writing_ = false;
        // Not ok: the client is gone; nothing more is read or written.
        if (!ok) {
          client_gone_ = true;
          End(grpc::Status::OK);
        }
        return;
      case kAlarm: {
        std::optional<absl::StatusOr<InsertSession::Progress>> outcome;
        {
          absl::MutexLock lock(&mu_);
          alarm_pending_ = false;
          outcome.swap(blocked_outcome_);
        }
        if (outcome.has_value()) {
          handed_off_ = false;
          MessageEnded(*std::move(outcome));
        }
        return;
      }
      case kFinished:
        finished_ = true;
        return;
      case kDone:
        done_ = true;
        // Safe to ask only now (gRPC's rule for the async API).
        if (context_.IsCancelled()) cancel_.Cancel();
        return;
      case kEvents:
        return;
    }
  }

  void Read() {
    if (!service_->SetAsyncStreamIdle(&context_, true)) {
      End(ToGrpcStatus(absl::UnavailableError("the server is stopping")));
      return;
    }
    // A queue shut down: the server stopped, and its shutdown cancelled
    // this call.
    reading_ = service_->stream_queue_.Start(
        [&] { stream_.Read(&read_buffer_, TagOf(kRead)); });
    if (!reading_) End(grpc::Status::OK);
  }

  // The acknowledgement callback for the session: queued for Advance() to
  // write, in order, waking the queue's thread if `wake` (the pool's
  // thread queued it; the queue's own thread writes once it returns).
  // False once the call is finishing (its client is gone).
  auto QueueAck(bool wake) {
    return [this, wake](const proto::InsertResponse& response) {
      absl::MutexLock lock(&mu_);
      if (acks_closed_) return false;
      acks_.push_back(response);
      if (wake) WakeLocked();
      return true;
    };
  }

  // A message arrived: parsed and carried on here as far as it goes
  // without waiting; the rest is the pool's.
  void Received() {
    received_ = absl::Now();
    // The message's many small submessages (chunks, tensors, items, columns,
    // slices) come from an arena reset for the next one: freeing them one
    // by one (a Clear() before the next parse) took about a fifth of the
    // insert thread under 64 writers. The chunk bytes are moved out.
    arena_.Reset();
    request_ =
        google::protobuf::Arena::CreateMessage<proto::InsertRequest>(&arena_);
    if (absl::Status parsed = ParseMessage(
            &read_buffer_, StreamMessage(++count_), &service_->metrics_,
            &service_->chunk_store_, request_);
        !parsed.ok()) {
      End(ToGrpcStatus(parsed));
      return;
    }
    read_buffer_.Clear();
    session_.Begin(request_);
    absl::StatusOr<InsertSession::Progress> progress =
        CatchOutOfMemory("inserting", [&] {
          return session_.Continue(/*may_block=*/false,
                                   QueueAck(/*wake=*/false));
        });
    if (progress.ok() && *progress == InsertSession::Progress::kMustWait) {
      if (service_->AsyncStreamsEnded()) {
        progress = absl::CancelledError("the server is stopping");
      } else {
        handed_off_ = true;
        service_->insert_waits_->Submit([this] { CarryOn(); });
        return;
      }
    }
    MessageEnded(std::move(progress));
  }

  // On the pool's thread: the rest of a message that must wait.
  void CarryOn() {
    absl::StatusOr<InsertSession::Progress> progress =
        CatchOutOfMemory("inserting", [&] {
          return session_.Continue(/*may_block=*/true, QueueAck(/*wake=*/true));
        });
    absl::MutexLock lock(&mu_);
    blocked_outcome_ = std::move(progress);
    WakeLocked();
  }

  // Makes the queue deliver kAlarm now, unless it is about to already.
  void WakeLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (alarm_pending_) return;
    // Refused only if the pool ran past StopAsyncStreams' WaitIdle(), which
    // it cannot: the streams have ended by then, and no message is handed
    // off after that.
    // The analysis cannot see that mu_ is still held inside the lambda.
    alarm_pending_ =
        service_->stream_queue_.Start([&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
          alarm_.Set(service_->stream_queue_.get(),
                     gpr_now(GPR_CLOCK_MONOTONIC), TagOf(kAlarm));
        });
  }

  // The queue's tag of `event`.
  void* TagOf(Event event) { return static_cast<QueueEvent*>(&tags_[event]); }

  bool AlarmPending() {
    absl::MutexLock lock(&mu_);
    return alarm_pending_;
  }

  // A message's end: an error ends the stream; done, the next is read.
  void MessageEnded(absl::StatusOr<InsertSession::Progress> progress) {
    if (end_.has_value()) return;  // the client went while the pool waited
    if (!progress.ok()) {
      End(ToGrpcStatus(progress.status()));
      return;
    }
    if (*progress == InsertSession::Progress::kClientGone) {
      End(grpc::Status::OK);
      return;
    }
    service_->metrics_.latency[ServiceMetrics::kInsertStream].Observe(
        absl::Now() - received_);
    Read();
  }

  // The stream is to end with `status` (the first one given stands) once
  // what is in flight is done.
  void End(grpc::Status status) {
    if (!end_.has_value()) end_ = std::move(status);
  }

  // Writes the next queued acknowledgement, and finishes the call once it
  // has ended and nothing is in flight.
  void Advance() {
    if (finishing_) return;
    if (!writing_ && !client_gone_) {
      std::optional<proto::InsertResponse> next;
      {
        absl::MutexLock lock(&mu_);
        if (!acks_.empty()) {
          next = std::move(acks_.front());
          acks_.pop_front();
        }
      }
      if (next.has_value()) {
        write_buffer_.Clear();
        if (!SerializeMessage(*next, &service_->metrics_, &write_buffer_)) {
          End(grpc::Status(
              grpc::StatusCode::INTERNAL,
              "an InsertStream acknowledgement did not serialize"));
          client_gone_ = true;  // nothing more is written
        } else {
          writing_ = service_->stream_queue_.Start(
              [&] { stream_.Write(write_buffer_, TagOf(kWritten)); });
          if (writing_) return;
          // The server stopped: its shutdown cancelled this call.
          client_gone_ = true;
          End(grpc::Status::OK);
        }
      }
    }
    if (!end_.has_value() || reading_ || writing_ || handed_off_) return;
    {
      absl::MutexLock lock(&mu_);
      acks_closed_ = true;  // a client that went away gets none of them
      acks_.clear();
    }
    finishing_ = true;
    // A queue shut down: gRPC has cancelled the call, and only its done
    // notification is left to come.
    if (!service_->stream_queue_.Start(
            [&] { stream_.Finish(*end_, TagOf(kFinished)); })) {
      finished_ = true;
    }
  }

  static constexpr size_t kArenaBlockBytes = 16 << 10;
  static google::protobuf::ArenaOptions ArenaOptions(char* block) {
    google::protobuf::ArenaOptions options;
    options.initial_block = block;
    options.initial_block_size = kArenaBlockBytes;
    return options;
  }

  ReplayService* const service_;
  grpc::ServerContext context_;
  grpc::ServerAsyncReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer> stream_{
      &context_};
  Tag tags_[kEvents];
  Cancellation cancel_;
  InsertSession session_;
  bool registered_ = false;

  // Held by the queue's thread delivering an event; what follows is that
  // thread's alone.
  absl::Mutex proceed_mu_;
  grpc::ByteBuffer read_buffer_;
  grpc::ByteBuffer write_buffer_;
  // The message being carried on, on arena_, whose first block is ours so
  // that a small message needs no malloc at all.
  char arena_block_[kArenaBlockBytes];
  google::protobuf::Arena arena_{ArenaOptions(arena_block_)};
  proto::InsertRequest* request_ = nullptr;
  int64_t count_ = 0;  // messages read
  absl::Time received_;
  bool reading_ = false;
  bool writing_ = false;
  bool handed_off_ = false;  // the pool carries the message on
  bool client_gone_ = false;
  std::optional<grpc::Status> end_;
  bool finishing_ = false;
  bool finished_ = false;
  bool done_ = false;

  absl::Mutex mu_;
  std::deque<proto::InsertResponse> acks_ ABSL_GUARDED_BY(mu_);
  bool acks_closed_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<absl::StatusOr<InsertSession::Progress>> blocked_outcome_
      ABSL_GUARDED_BY(mu_);
  grpc::Alarm alarm_ ABSL_GUARDED_BY(mu_);
  bool alarm_pending_ ABSL_GUARDED_BY(mu_) = false;
};

void ReplayService::AwaitInsertStream() {
  if (AsyncStreamsEnded()) return;
  auto* call = new InsertStreamCall(this);
  if (!call->Await()) delete call;
}

}  // namespace reverb_tf
