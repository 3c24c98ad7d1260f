// SPDX-License-Identifier: Apache-2.0
// ReplayServer's checkpoints: the load at start with the log's replay and
// the recovery of a damaged log, the Checkpoint call, the periodic thread's
// cadence, and the recovery of a write-ahead log that has failed.
#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "reverb_tf/cc/platform/logging.h"
#include "reverb_tf/cc/platform/out_of_memory.h"
#include "reverb_tf/cc/service/health_service.h"
#include "reverb_tf/cc/service/replay_service.h"
#include "reverb_tf/cc/service/server.h"

namespace reverb_tf {

absl::Status ReplayServer::LoadCheckpointAndLog(const ServerOptions& options) {
  absl::StatusOr<LoadedCheckpoint> loaded =
      checkpointer_->LoadLatest(tables_, service_->mutable_chunk_store());
  if (!loaded.ok()) {
    Stop();
    return loaded.status();
  }
  loaded_checkpoint_ = *std::move(loaded);
  if (options.wal.has_value()) {
    auto wal = WriteAheadLog::Open(
        *options.wal, loaded_checkpoint_.wal_position, tables_, &wal_replay_,
        service_->mutable_chunk_store());
    if (!wal.ok()) {
      Stop();
      return wal.status();
    }
    wal_ = *std::move(wal);
    for (const auto& table : tables_) table->SetJournal(wal_.get());
    service_->set_wal(wal_.get());
    if (!wal_replay_.damage.empty()) RecoverDamagedLog(*options.wal);
  }
  service_->set_accepting(true);
  health_->SetAllServingStatus(true);
  return absl::OkStatus();
}

void ReplayServer::RecoverDamagedLog(const WalOptions& wal_options) {
  Log(LogSeverity::kWarning,
      absl::StrCat("the write-ahead log '", wal_options.dir,
                   "' is damaged: ", wal_replay_.damage,
                   ". Writing a checkpoint now, so that the log starts "
                   "clean."));
  if (absl::StatusOr<CheckpointStats> saved = Checkpoint(); !saved.ok()) {
    // The recovered items are served for reading; a change logged after
    // the damage would be set aside by the next replay, so none is accepted
    // until a checkpoint starts the log afresh.
    wal_->Fail(absl::Status(saved.status().code(),
                            absl::StrCat("the log was damaged and the "
                                         "checkpoint that would set it right "
                                         "failed: ",
                                         saved.status().message())));
    Log(LogSeverity::kWarning,
        absl::StrCat("serving the recovered items for reading; writes "
                     "are refused until a checkpoint succeeds (retried "
                     "every ",
                     absl::FormatDuration(wal_options.retry_interval), ")."));
  }
}

absl::StatusOr<CheckpointStats> ReplayServer::Checkpoint() {
  if (checkpointer_ == nullptr) {
    return absl::FailedPreconditionError(
        "this server was started without a checkpointer");
  }
  absl::MutexLock checkpointing(&checkpoint_mu_);
  if (wal_ != nullptr && !wal_->Writable().ok()) return RecoverLog();
  // Every logged change up to `position` is in the snapshots Save() takes.
  absl::StatusOr<uint64_t> position = wal_ != nullptr ? wal_->Rotate() : 0;
  absl::StatusOr<CheckpointStats> stats =
      position.ok() ? SaveCheckpoint(*position) : position.status();
  if (stats.ok() && wal_ != nullptr) {
    if (absl::Status dropped = wal_->DropThrough(*position); !dropped.ok()) {
      // The next checkpoint retries; meanwhile the log only takes more room.
      Log(LogSeverity::kWarning, dropped.message());
    }
  }
  NoteCheckpoint(stats);
  return stats;
}

absl::StatusOr<CheckpointStats> ReplayServer::SaveCheckpoint(
    uint64_t wal_position) {
  // Also on the periodic thread, where an escaping exception would end the
  // process.
  return CatchOutOfMemory("writing a checkpoint", [&] {
    return checkpointer_->Save(tables_, wal_position);
  });
}

absl::StatusOr<CheckpointStats> ReplayServer::RecoverLog() {
  // Nothing is logged while the log has failed, and the tables refuse
  // changes: the snapshots hold every entry up to `position`.
  const uint64_t position = wal_->last_position();
  absl::StatusOr<CheckpointStats> stats = SaveCheckpoint(position);
  if (stats.ok()) {
    if (absl::Status resumed = wal_->Resume(position); !resumed.ok()) {
      stats =
          absl::Status(resumed.code(),
                       absl::StrCat("the checkpoint ", stats->path,
                                    " was written but the "
                                    "write-ahead log cannot begin a new file: ",
                                    resumed.message()));
    } else {
      Log(LogSeverity::kInfo,
          absl::StrCat("checkpoint ", stats->path,
                       " written; the write-ahead log is writable again and "
                       "writes are accepted."));
      absl::MutexLock lock(&mu_);
      ++wal_recoveries_;
    }
  }
  NoteCheckpoint(stats);
  return stats;
}

void ReplayServer::NoteCheckpoint(
    const absl::StatusOr<CheckpointStats>& stats) {
  absl::MutexLock lock(&mu_);
  if (stats.ok()) {
    ++checkpoints_;
    last_checkpoint_ = *stats;
    last_checkpoint_time_ = absl::Now();
  } else {
    ++failed_checkpoints_;
  }
}

void ReplayServer::CheckpointPeriodically(absl::Duration interval,
                                          absl::Duration retry) {
  const bool periodic = interval > absl::ZeroDuration();
  absl::Time next_periodic =
      periodic ? absl::Now() + interval : absl::InfiniteFuture();
  absl::MutexLock lock(&mu_);
  while (true) {
    // A failed log is checked every `retry` (a cheap call), however long
    // the periodic interval.
    const absl::Duration wait = std::min(
        std::max(next_periodic - absl::Now(), absl::ZeroDuration()), retry);
    if (mu_.AwaitWithTimeout(absl::Condition(&stopped_), wait)) return;
    mu_.Unlock();
    const bool failed_log = wal_ != nullptr && !wal_->Writable().ok();
    const bool due = absl::Now() >= next_periodic;
    if (failed_log || due) {
      if (due) next_periodic = absl::Now() + interval;
      auto stats = Checkpoint();
      if (!stats.ok() && !failed_log) {
        Log(LogSeverity::kWarning, absl::StrCat("periodic checkpoint failed: ",
                                                stats.status().ToString()));
      }
    }
    mu_.Lock();
  }
}

}  // namespace reverb_tf
