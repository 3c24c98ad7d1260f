// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/checkpointing/wal.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <system_error>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "reverb_tf/cc/checkpointing/byte_codec.h"
#include "reverb_tf/cc/checkpointing/chunk_codec.h"
#include "reverb_tf/cc/checkpointing/record_file.h"
#include "reverb_tf/cc/platform/status_macros.h"

namespace reverb_tf {
namespace fs = std::filesystem;
namespace {

// Entry types; 0 marks, in the queue only, the start of a new file.
constexpr uint8_t kNewFile = 0;
constexpr uint8_t kChunk = 1;
constexpr uint8_t kItem = 2;
constexpr uint8_t kMutate = 3;
constexpr uint8_t kReset = 4;
// Bits of an item entry's flags byte (logs written before kUnchecked hold
// 0 or 1, which read the same).
constexpr uint8_t kLegacySteps = 1;
constexpr uint8_t kUnchecked = 2;

// Chunk bodies at least this large are written as they are (see WriteBatch).
constexpr size_t kCompressBelowBytes = 4096;

constexpr char kFilePrefix[] = "wal-";
constexpr char kFileSuffix[] = ".log";

std::string FileName(uint64_t first_position) {
  return absl::StrFormat("%s%020d%s", kFilePrefix, first_position, kFileSuffix);
}

struct LogFile {
  uint64_t first = 0;
  std::string path;
};

// The log's files, by first position.
absl::StatusOr<std::vector<LogFile>> ListFiles(const std::string& dir) {
  std::vector<LogFile> files;
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, error)) {
    std::string name = entry.path().filename().string();
    absl::string_view digits = name;
    uint64_t first;
    if (!absl::ConsumePrefix(&digits, kFilePrefix) ||
        !absl::ConsumeSuffix(&digits, kFileSuffix) ||
        !absl::SimpleAtoi(digits, &first)) {
      continue;
    }
    files.push_back({first, entry.path().string()});
  }
  if (error) {
    return absl::Status(absl::ErrnoToStatusCode(error.value()),
                        absl::StrCat("cannot list the write-ahead log '", dir,
                                     "': ", error.message()));
  }
  std::sort(files.begin(), files.end(), [](const LogFile& a, const LogFile& b) {
    return a.first < b.first;
  });
  return files;
}

void PutString(std::string* out, absl::string_view text) {
  PutVarint(out, text.size());
  out->append(text.data(), text.size());
}

bool GetString(ByteReader* in, std::string* out) {
  uint64_t size;
  absl::string_view bytes;
  if (!in->GetVarintAtMost(in->rest().size(), &size) ||
      !in->GetBytes(size, &bytes)) {
    return false;
  }
  out->assign(bytes.data(), bytes.size());
  return true;
}

// Applies one entry of the log to the tables it names.
class Replayer {
 public:
  Replayer(absl::Span<const std::shared_ptr<Table>> tables, ChunkStore* store)
      : store_(store != nullptr ? store : &own_store_) {
    for (const auto& table : tables) tables_[table->name()] = table.get();
  }

  absl::Status Chunk(absl::string_view payload) {
    ASSIGN_OR_RETURN(ChunkRef chunk, DecodeChunk(payload, store_));
    const ChunkKey key = chunk->key();
    chunks_[key] = std::move(chunk);
    return absl::OkStatus();
  }

  absl::Status Apply(uint8_t type, absl::string_view payload) {
    ByteReader in(payload);
    std::string name;
    if (!GetString(&in, &name))
      return absl::InvalidArgumentError("malformed entry");
    auto table = tables_.find(name);
    if (table == tables_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the write-ahead log changes table '", name,
                       "', which the server does not have"));
    }
    switch (type) {
      case kItem:
        return ApplyItem(&in, table->second);
      case kMutate:
        return ApplyMutation(&in, table->second);
      case kReset:
        return table->second->Reset();
      default:
        return absl::InvalidArgumentError(
            absl::StrCat("unknown entry type ", type));
    }
  }

 private:
  absl::Status ApplyItem(ByteReader* in, Table* table) {
    Item item;
    uint8_t flags;
    uint64_t num_columns;
    in->GetFixed64(&item.key);
    in->GetDouble(&item.priority);
    in->GetByte(&flags);
    in->GetVarintAtMost(in->rest().size(), &num_columns);
    if (!in->ok()) return absl::InvalidArgumentError("malformed item entry");
    item.legacy_steps = (flags & kLegacySteps) != 0;
    item.unchecked = (flags & kUnchecked) != 0;
    // The log names chunks by key.
    RETURN_IF_ERROR(DecodeTrajectory(
        in, num_columns,
        [](ByteReader* in, uint64_t* key) { in->GetFixed64(key); },
        [&](uint64_t chunk_key) -> absl::StatusOr<ChunkRef> {
          auto it = chunks_.find(chunk_key);
          if (it == chunks_.end()) {
            return absl::InvalidArgumentError(
                absl::StrCat("item ", item.key, " references chunk ", chunk_key,
                             ", which the log file does not hold"));
          }
          return it->second;
        },
        &item.trajectory));
    if (!in->ok()) return absl::InvalidArgumentError("malformed item entry");
    return table->ReplayInsert(std::move(item));
  }

  absl::Status ApplyMutation(ByteReader* in, Table* table) {
    uint64_t num_updates, num_deletes;
    std::vector<std::pair<Key, double>> updates;
    std::vector<Key> deletes;
    // Every update takes 16 bytes and every delete 8: bounds the counts.
    if (in->GetVarintAtMost(in->rest().size() / 16, &num_updates)) {
      updates.resize(num_updates);
      for (auto& [key, priority] : updates) {
        in->GetFixed64(&key);
        in->GetDouble(&priority);
      }
    }
    if (in->GetVarintAtMost(in->rest().size() / 8, &num_deletes)) {
      deletes.resize(num_deletes);
      for (Key& key : deletes) in->GetFixed64(&key);
    }
    if (!in->ok())
      return absl::InvalidArgumentError("malformed mutation entry");
    return table->MutatePriorities(updates, deletes).status();
  }

  absl::flat_hash_map<std::string, Table*> tables_;
  ChunkStore own_store_;
  ChunkStore* store_;
  absl::flat_hash_map<ChunkKey, ChunkRef> chunks_;
};

}  // namespace

absl::Status WalOptions::Validate() const {
  if (dir.empty())
    return absl::InvalidArgumentError("the write-ahead log needs a directory");
  if (interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "the write-ahead log's sync interval must be > 0");
  }
  if (segment_bytes < 1) {
    return absl::InvalidArgumentError(
        "the write-ahead log's file size must be > 0");
  }
  if (retry_interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "the write-ahead log's retry interval must be > 0");
  }
  return absl::OkStatus();
}

absl::string_view WalSyncName(WalSync sync) {
  switch (sync) {
    case WalSync::kEveryWrite:
      return "every_write";
    case WalSync::kInterval:
      return "every_n_ms";
    case WalSync::kNone:
      return "none";
  }
  return "";
}

absl::StatusOr<WalSync> ParseWalSync(absl::string_view name) {
  for (const WalSync sync :
       {WalSync::kEveryWrite, WalSync::kInterval, WalSync::kNone}) {
    if (name == WalSyncName(sync)) return sync;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown write-ahead log sync policy '", name.substr(0, 32),
                   "' (every_write, every_n_ms or none)"));
}

struct WriteAheadLog::Pending {
  uint8_t type;
  std::string head;
  // The entry's body: a chunk's bytes, written from the chunk itself.
  ChunkRef chunk;
  // Of the entry; for a kNewFile mark, the first position of the new file.
  uint64_t position;
};

absl::StatusOr<std::unique_ptr<WriteAheadLog>> WriteAheadLog::Open(
    const WalOptions& options, uint64_t after,
    absl::Span<const std::shared_ptr<Table>> tables, WalReplay* replayed,
    ChunkStore* store) {
  RETURN_IF_ERROR(options.Validate());
  std::error_code error;
  fs::create_directories(options.dir, error);
  if (error) {
    return absl::Status(
        absl::ErrnoToStatusCode(error.value()),
        absl::StrCat("cannot create the write-ahead log directory '",
                     options.dir, "': ", error.message()));
  }
  ASSIGN_OR_RETURN(std::vector<LogFile> files, ListFiles(options.dir));
  *replayed = WalReplay();
  replayed->last_position = after;
  Replayer replayer(tables, store);
  uint64_t expected = 0;  // the first position the next file must have
  for (size_t i = 0; i < files.size() && replayed->damage.empty(); ++i) {
    const uint64_t next_first = i + 1 < files.size()
                                    ? files[i + 1].first
                                    : std::numeric_limits<uint64_t>::max();
    if (next_first - 1 <= after) continue;  // the checkpoint holds all of it
    if (expected == 0 && files[i].first > after + 1) {
      return absl::DataLossError(absl::StrCat(
          "the write-ahead log '", options.dir, "' begins at entry ",
          files[i].first, " but the checkpoint holds entries up to ", after,
          ": entries ", after + 1, " to ", files[i].first - 1, " are missing"));
    }
    if (expected != 0 && files[i].first != expected) {
      replayed->damage =
          absl::StrCat(files[i].path, " begins at entry ", files[i].first,
                       " where entry ", expected, " was expected");
      break;
    }
    auto reader = RecordReader::Open(files[i].path);
    if (!reader.ok()) {
      replayed->damage = std::string(reader.status().message());
      break;
    }
    ++replayed->files;
    uint64_t position = files[i].first;
    while (true) {
      uint8_t type;
      absl::string_view payload;
      absl::StatusOr<bool> more = (*reader)->Next(&type, &payload);
      if (!more.ok()) {
        replayed->damage =
            absl::StrCat("entry ", position, ": ", more.status().message());
        break;
      }
      if (!*more) break;
      // Chunks before `after` may be referenced by items after it.
      absl::Status applied;
      if (type == kChunk) {
        applied = replayer.Chunk(payload);
      } else if (position > after) {
        applied = replayer.Apply(type, payload);
        ++replayed->entries;
      }
      if (!applied.ok()) {
        if (absl::IsInvalidArgument(applied) &&
            absl::StrContains(applied.message(), "table '")) {
          return applied;  // a configuration mismatch, not damage
        }
        replayed->damage = absl::StrCat(files[i].path, ", entry ", position,
                                        ": ", applied.message());
        break;
      }
      replayed->last_position = std::max(replayed->last_position, position);
      ++position;
    }
    expected = position;
    if (!replayed->damage.empty()) {
      // What follows the damage cannot be applied in order: set it aside.
      std::vector<std::string> aside;
      for (size_t j = i + 1; j < files.size(); ++j) {
        const std::string moved = files[j].path + ".unreplayed";
        fs::rename(files[j].path, moved, error);
        aside.push_back(error ? files[j].path : moved);
      }
      absl::StrAppend(
          &replayed->damage, "; replayed up to entry ", replayed->last_position,
          aside.empty() ? "" : "; not replayed: ", absl::StrJoin(aside, ", "));
    }
  }

  std::unique_ptr<WriteAheadLog> log(
      new WriteAheadLog(options, replayed->last_position + 1));
  if (options.sync == WalSync::kInterval) {
    WriteAheadLog* raw = log.get();
    log->syncer_ =
        std::thread([raw] { raw->SyncEvery(raw->options_.interval); });
  }
  return log;
}

WriteAheadLog::WriteAheadLog(WalOptions options, uint64_t next_position)
    : options_(std::move(options)) {
  absl::MutexLock lock(&mu_);
  last_position_ = written_ = synced_ = next_position - 1;
  pending_.push_back(Pending{kNewFile, "", nullptr, next_position});
}

WriteAheadLog::~WriteAheadLog() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (syncer_.joinable()) syncer_.join();
  mu_.Lock();
  mu_.Await(absl::Condition(
      +[](bool* flushing) { return !*flushing; }, &flushing_));
  std::vector<Pending> batch;
  batch.swap(pending_);
  const bool failed = !error_.ok();
  mu_.Unlock();
  if (!failed && !batch.empty())
    WriteBatch(&batch, /*sync=*/true).IgnoreError();
  if (writer_ != nullptr) writer_->Close().IgnoreError();
}

void WriteAheadLog::QueueLocked(uint8_t type, std::string head,
                                ChunkRef chunk) {
  file_bytes_ +=
      static_cast<int64_t>(head.size()) + (chunk ? chunk->data_size() : 0);
  pending_.push_back(
      Pending{type, std::move(head), std::move(chunk), ++last_position_});
  ++stats_.entries;
}

void WriteAheadLog::MaybeBeginFileLocked() {
  // Only between changes, so that an item and its chunks share a file.
  if (file_bytes_ >= options_.segment_bytes) QueueRotationLocked();
}

void WriteAheadLog::QueueRotationLocked() {
  pending_.push_back(Pending{kNewFile, "", nullptr, last_position_ + 1});
  file_chunks_.clear();
  file_bytes_ = 0;
}

void WriteAheadLog::Inserted(const Table& table, const Item& item) {
  std::string head;
  PutString(&head, table.name());
  PutFixed64(&head, item.key);
  PutDouble(&head, item.priority);
  head.push_back(static_cast<char>((item.legacy_steps ? kLegacySteps : 0) |
                                   (item.unchecked ? kUnchecked : 0)));
  PutVarint(&head, item.trajectory.size());
  for (const SlicedColumn& column : item.trajectory) {
    PutVarint(&head, (uint64_t{column.slices().size()} << 1) |
                         (column.squeeze() ? 1 : 0));
    for (const ChunkSlice& slice : column.slices()) {
      PutFixed64(&head, slice.chunk->key());
      PutVarint(&head, static_cast<uint32_t>(slice.offset));
      PutVarint(&head, static_cast<uint32_t>(slice.length));
    }
  }
  absl::MutexLock lock(&mu_);
  if (!error_.ok()) return;  // nothing is written after a failure
  MaybeBeginFileLocked();
  for (const SlicedColumn& column : item.trajectory) {
    for (const ChunkSlice& slice : column.slices()) {
      if (!file_chunks_.insert(slice.chunk->key()).second) continue;
      std::string chunk_head;
      EncodeChunkHead(*slice.chunk, &chunk_head);
      QueueLocked(kChunk, std::move(chunk_head), slice.chunk);
    }
  }
  QueueLocked(kItem, std::move(head));
}

void WriteAheadLog::Mutated(const Table& table,
                            absl::Span<const std::pair<Key, double>> updates,
                            absl::Span<const Key> deletes) {
  std::string head;
  PutString(&head, table.name());
  PutVarint(&head, updates.size());
  for (const auto& [key, priority] : updates) {
    PutFixed64(&head, key);
    PutDouble(&head, priority);
  }
  PutVarint(&head, deletes.size());
  for (Key key : deletes) PutFixed64(&head, key);
  absl::MutexLock lock(&mu_);
  if (!error_.ok()) return;
  MaybeBeginFileLocked();
  QueueLocked(kMutate, std::move(head));
}

void WriteAheadLog::SampledOut(const Table& table, Key key) {
  Mutated(table, {}, absl::MakeConstSpan(&key, 1));
}

void WriteAheadLog::WasReset(const Table& table) {
  std::string head;
  PutString(&head, table.name());
  absl::MutexLock lock(&mu_);
  if (!error_.ok()) return;
  MaybeBeginFileLocked();
  QueueLocked(kReset, std::move(head));
}

absl::Status WriteAheadLog::WriteBatch(std::vector<Pending>* batch, bool sync) {
  const uint64_t before = writer_ != nullptr ? writer_->bytes_written() : 0;
  uint64_t bytes = 0;
  for (Pending& entry : *batch) {
    if (entry.type == kNewFile) {
      if (writer_ != nullptr) {
        bytes += writer_->bytes_written();
        RETURN_IF_ERROR(writer_->Close());
        writer_.reset();
      }
      writer_path_ =
          (fs::path(options_.dir) / FileName(entry.position)).string();
      ASSIGN_OR_RETURN(writer_, RecordWriter::Create(writer_path_));
      continue;
    }
    ChunkBytes bytes;
    if (entry.chunk) {
      ASSIGN_OR_RETURN(bytes, entry.chunk->Read(/*keep_in_ram=*/false));
    }
    const absl::string_view body = bytes.view();
    // Large tensors (frames) seldom compress, and compressing them would
    // slow every acknowledgement; small entries (small items) shrink a lot.
    const bool compressible =
        !(entry.chunk && (entry.chunk->compression() != Compression::kNone ||
                          body.size() >= kCompressBelowBytes));
    RETURN_IF_ERROR(writer_->Add(entry.type, entry.head, body, compressible));
  }
  batch->clear();
  RETURN_IF_ERROR(writer_->Flush());
  if (sync) RETURN_IF_ERROR(writer_->Sync());
  bytes += writer_->bytes_written();
  absl::MutexLock lock(&mu_);
  stats_.bytes += bytes - before;
  return absl::OkStatus();
}

absl::Status WriteAheadLog::Commit() { return Write(/*everything=*/false); }

absl::Status WriteAheadLog::Write(bool everything) {
  mu_.Lock();
  const uint64_t target = last_position_;
  const bool sync = options_.sync == WalSync::kEveryWrite;
  while (error_.ok() && ((sync ? synced_ : written_) < target ||
                         (everything && !pending_.empty()))) {
    if (flushing_) {
      mu_.Await(absl::Condition(
          +[](WriteAheadLog* log) ABSL_EXCLUSIVE_LOCKS_REQUIRED(log->mu_) {
            return !log->flushing_;
          },
          this));
      continue;
    }
    // This caller writes everything queued, for every waiting caller.
    flushing_ = true;
    std::vector<Pending> batch;
    batch.swap(pending_);
    const uint64_t last = last_position_;
    mu_.Unlock();
    absl::Status status = WriteBatch(&batch, sync);
    mu_.Lock();
    flushing_ = false;
    if (!status.ok()) {
      FailLocked(status);
      break;
    }
    written_ = last;
    ++stats_.commits;
    if (sync) {
      synced_ = last;
      ++stats_.syncs;
    }
  }
  absl::Status status = error_;
  mu_.Unlock();
  return status;
}

void WriteAheadLog::SyncEvery(absl::Duration interval) {
  absl::MutexLock lock(&mu_);
  while (true) {
    auto stop = [this]()
                    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; };
    mu_.AwaitWithTimeout(absl::Condition(&stop), interval);
    if (stopping_) return;
    if (flushing_ || synced_ >= written_ || writer_ == nullptr || !error_.ok())
      continue;
    flushing_ = true;
    const uint64_t target = written_;
    mu_.Unlock();
    absl::Status status = writer_->Sync();
    mu_.Lock();
    flushing_ = false;
    if (!status.ok()) {
      FailLocked(status);
      continue;
    }
    synced_ = std::max(synced_, target);
    ++stats_.syncs;
  }
}

absl::StatusOr<uint64_t> WriteAheadLog::Rotate() {
  uint64_t position;
  {
    absl::MutexLock lock(&mu_);
    if (file_bytes_ > 0) QueueRotationLocked();
    position = last_position_;
  }
  // The new file exists once this returns, so DropThrough() can remove the
  // old ones.
  RETURN_IF_ERROR(Write(/*everything=*/true));
  return position;
}

absl::Status WriteAheadLog::DropThrough(uint64_t position) {
  // The newest file is (or will be) written to: never removed.
  return DropFiles(position, /*keep_newest=*/true);
}

absl::Status WriteAheadLog::DropFiles(uint64_t position, bool keep_newest) {
  ASSIGN_OR_RETURN(std::vector<LogFile> files, ListFiles(options_.dir));
  for (size_t i = 0; i < files.size(); ++i) {
    const bool newest = i + 1 == files.size();
    if (newest ? keep_newest : files[i + 1].first - 1 > position) break;
    std::error_code error;
    fs::remove(files[i].path, error);
    if (error) {
      return absl::Status(absl::ErrnoToStatusCode(error.value()),
                          absl::StrCat("cannot remove write-ahead log file '",
                                       files[i].path, "': ", error.message()));
    }
  }
  return absl::OkStatus();
}

void WriteAheadLog::FailLocked(const absl::Status& cause) {
  if (!error_.ok()) return;
  error_ = absl::Status(
      cause.code(),
      absl::StrCat("the write-ahead log cannot be written: ", cause.message()));
  std::fprintf(
      stderr,
      "reverb_tf: %s; inserts, priority updates, deletes and resets are "
      "refused until a checkpoint succeeds\n",
      error_.ToString().c_str());
}

void WriteAheadLog::Fail(const absl::Status& cause) {
  absl::MutexLock lock(&mu_);
  FailLocked(cause);
}

absl::Status WriteAheadLog::Writable() const {
  absl::MutexLock lock(&mu_);
  return error_;
}

uint64_t WriteAheadLog::last_position() const {
  absl::MutexLock lock(&mu_);
  return last_position_;
}

absl::Status WriteAheadLog::Resume(uint64_t checkpointed) {
  {
    absl::MutexLock lock(&mu_);
    if (error_.ok()) return absl::OkStatus();
    mu_.Await(absl::Condition(
        +[](bool* flushing) { return !*flushing; }, &flushing_));
    // Nothing is queued while failed; what was queued before the failure
    // took effect in the tables, so the checkpoint holds it.
    pending_.clear();
    last_position_ = written_ = synced_ =
        std::max(last_position_, checkpointed);
    file_chunks_.clear();
    file_bytes_ = 0;
    // Ends the failed file (its tail may be torn); the flusher is idle.
    if (writer_ != nullptr) writer_->Close().IgnoreError();
    writer_.reset();
  }
  RETURN_IF_ERROR(DropFiles(checkpointed, /*keep_newest=*/false));
  {
    absl::MutexLock lock(&mu_);
    error_ = absl::OkStatus();
    pending_.push_back(Pending{kNewFile, "", nullptr, last_position_ + 1});
  }
  // Creates the new file now, so that a disk still full fails here.
  return Write(/*everything=*/true);
}

WalStats WriteAheadLog::stats() const {
  WalStats stats;
  {
    absl::MutexLock lock(&mu_);
    stats = stats_;
  }
  auto files = ListFiles(options_.dir);
  stats.files = files.ok() ? files->size() : 0;
  return stats;
}

}  // namespace reverb_tf
