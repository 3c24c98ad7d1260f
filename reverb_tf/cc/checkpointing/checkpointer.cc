// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/checkpointing/checkpointer.h"

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "reverb_tf/cc/checkpointing/byte_codec.h"
#include "reverb_tf/cc/checkpointing/chunk_codec.h"
#include "reverb_tf/cc/checkpointing/record_file.h"
#include "reverb_tf/cc/chunk_store.h"
#include "reverb_tf/cc/platform/logging.h"
#include "reverb_tf/cc/platform/status_macros.h"
#include "reverb_tf/cc/proto/checkpoint.pb.h"
#include "reverb_tf/cc/spill_store.h"
#include "reverb_tf/cc/wire/table_messages.h"

namespace reverb_tf {
namespace {

namespace fs = std::filesystem;

constexpr char kDataFile[] = "replay.rtfckpt";
// Hard links to the spill segment files that kChunkOnDisk entries name.
constexpr char kSpillDir[] = "spill";
constexpr char kTempPrefix[] = ".tmp-";
// Keeps an items entry well under RecordWriter::kTargetRecordBytes.
constexpr size_t kItemsPerEntry = 2048;

enum EntryType : uint8_t {
  kHeader = 1,
  kChunk = 2,
  kItems = 3,
  kEnd = 4,
  // A chunk whose bytes stay in a spill segment file linked into the
  // checkpoint (format 2).
  kChunkOnDisk = 5,
};

std::string SpillFilePath(const std::string& directory, uint32_t file) {
  return (fs::path(directory) / kSpillDir /
          absl::StrFormat("segment-%08u.spill", file))
      .string();
}

absl::Status FsError(const std::string& what, const std::string& path,
                     const std::error_code& error) {
  // absl's errno mapping: a full disk is RESOURCE_EXHAUSTED, a forbidden path
  // PERMISSION_DENIED; only transient faults are UNAVAILABLE ("retry me").
  return absl::Status(
      absl::ErrnoToStatusCode(error.value()),
      absl::StrCat("cannot ", what, " '", path, "': ", error.message()));
}

absl::Status FsyncPath(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return FsError("open", path, {errno, std::generic_category()});
  const int result = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  if (result != 0)
    return FsError("fsync", path, {error, std::generic_category()});
  return absl::OkStatus();
}

absl::StatusOr<gid_t> LookUpGroup(const std::string& group) {
  std::vector<char> buffer(16384);
  struct group entry;
  struct group* found = nullptr;
  const int error =
      ::getgrnam_r(group.c_str(), &entry, buffer.data(), buffer.size(), &found);
  if (error != 0 || found == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint group '", group, "' does not exist"));
  }
  return found->gr_gid;
}

std::string SignatureDebugString(
    const std::optional<TableSignature>& signature) {
  if (!signature.has_value()) return "none";
  std::vector<std::string> columns;
  for (const ColumnSpec& column : signature->columns) {
    columns.push_back(absl::StrCat(column.name, ":", DTypeName(column.dtype),
                                   ShapeDebugString(column.shape)));
  }
  return absl::StrCat("{", absl::StrJoin(columns, ", "), "}");
}

bool SameSignature(const std::optional<TableSignature>& a,
                   const std::optional<TableSignature>& b) {
  if (a.has_value() != b.has_value()) return false;
  return !a.has_value() || a->columns == b->columns;
}

// ------------------------------------------------------------ encoding

void EncodeItems(uint64_t table_index, const TableSnapshot& snapshot,
                 const std::vector<uint64_t>& chunk_ids, size_t begin,
                 size_t end, std::string* out) {
  out->clear();
  PutVarint(out, table_index);
  PutVarint(out, end - begin);
  for (size_t i = begin; i < end; ++i) {
    const TableSnapshot::ItemRecord& item = snapshot.items[i];
    PutFixed64(out, item.key);
    PutDouble(out, item.priority);
    PutVarint(out, static_cast<uint32_t>(item.times_sampled));
    PutVarint(out, item.num_columns);
    for (uint64_t c = item.first_column;
         c < item.first_column + item.num_columns; ++c) {
      const TableSnapshot::ColumnRecord& column = snapshot.columns[c];
      PutVarint(out,
                (uint64_t{column.num_slices} << 1) | (column.squeeze ? 1 : 0));
      for (uint64_t s = column.first_slice;
           s < column.first_slice + column.num_slices; ++s) {
        PutVarint(out, chunk_ids[s]);
        PutVarint(out, static_cast<uint32_t>(snapshot.slices[s].offset));
        PutVarint(out, static_cast<uint32_t>(snapshot.slices[s].length));
      }
    }
  }
}

void EncodeEnd(uint64_t num_tables, uint64_t num_chunks, uint64_t num_items,
               std::string* out) {
  out->clear();
  PutVarint(out, num_tables);
  PutVarint(out, num_chunks);
  PutVarint(out, num_items);
}

// ------------------------------------------------------------ decoding

absl::Status DecodeItems(ByteReader* in, uint64_t count,
                         const std::vector<ChunkRef>& chunks,
                         std::vector<Item>* items) {
  if (count > in->rest().size())
    return absl::InvalidArgumentError("malformed items entry");
  items->reserve(count);
  for (uint64_t i = 0; i < count; ++i) {
    Item& item = items->emplace_back();
    uint64_t times_sampled, num_columns;
    in->GetFixed64(&item.key);
    in->GetDouble(&item.priority);
    in->GetVarintAtMost(INT32_MAX, &times_sampled);
    // Every column and slice takes at least one byte each, which bounds
    // what a damaged count could make us allocate.
    in->GetVarintAtMost(in->rest().size(), &num_columns);
    if (!in->ok()) break;
    item.times_sampled = static_cast<int32_t>(times_sampled);
    // A checkpoint names chunks by their index in the file.
    RETURN_IF_ERROR(DecodeTrajectory(
        in, num_columns,
        [](ByteReader* in, uint64_t* id) { in->GetVarint(id); },
        [&](uint64_t chunk_id) -> absl::StatusOr<ChunkRef> {
          if (chunk_id >= chunks.size()) {
            return absl::InvalidArgumentError(absl::StrCat(
                "item ", item.key, " refers to chunk ", chunk_id, " but only ",
                chunks.size(), " chunks precede it"));
          }
          return chunks[chunk_id];
        },
        &item.trajectory));
  }
  if (!in->ok() || !in->empty())
    return absl::InvalidArgumentError("malformed items entry");
  return absl::OkStatus();
}

// The file formats this code writes (CheckpointHeader.format_version):
// 1, or 2 if the checkpoint holds chunks on disk (kChunkOnDisk), which
// older code cannot read.
constexpr uint32_t kFormatVersion = 1;
constexpr uint32_t kFormatVersionOnDisk = 2;

// The checkpoint's table record from the core's TableInfo, and back; the
// options go through the one conversion (wire/table_messages.h).
proto::CheckpointTable ToCheckpointTable(const TableInfo& info) {
  proto::CheckpointTable table;
  TableOptionsToMessage(info.options, table.mutable_config());
  table.set_current_size(info.current_size);
  table.set_num_unique_samples(info.num_unique_samples);
  proto::CheckpointRateLimiterCounters* counters =
      table.mutable_rate_limiter_info();
  counters->set_inserts(info.rate_limiter_info.inserts);
  counters->set_samples(info.rate_limiter_info.samples);
  counters->set_deletes(info.rate_limiter_info.deletes);
  return table;
}

absl::StatusOr<TableInfo> FromCheckpointTable(
    const proto::CheckpointTable& table) {
  TableInfo info;
  ASSIGN_OR_RETURN(info.options, TableOptionsFromMessage(table.config()));
  info.current_size = table.current_size();
  info.num_unique_samples = table.num_unique_samples();
  info.rate_limiter_info.options = info.options.rate_limiter;
  info.rate_limiter_info.inserts = table.rate_limiter_info().inserts();
  info.rate_limiter_info.samples = table.rate_limiter_info().samples();
  info.rate_limiter_info.deletes = table.rate_limiter_info().deletes();
  return info;
}

// Reads the header record; DATA_LOSS (via reader.Corrupt) if it is not one,
// FAILED_PRECONDITION for a format newer than this code.
absl::Status ReadHeader(RecordReader& reader, const std::string& path,
                        proto::CheckpointHeader* header) {
  uint8_t type;
  absl::string_view payload;
  ASSIGN_OR_RETURN(bool more, reader.Next(&type, &payload));
  if (!more || type != kHeader ||
      !header->ParseFromArray(payload.data(), payload.size())) {
    return reader.Corrupt("the first entry is not a checkpoint header");
  }
  if (header->format_version() > kFormatVersionOnDisk) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint '", path, "' has format ", header->format_version(),
        ", newer than this reverb_tf reads (", kFormatVersionOnDisk,
        "): load it with the version "
        "that wrote it (",
        header->written_by(), ")"));
  }
  return absl::OkStatus();
}

// The server's tables that a checkpoint's tables load into, in the
// checkpoint's order, and what the checkpoint saved of each.
struct LoadTargets {
  std::vector<Table*> tables;
  std::vector<TableInfo> saved;
};

// Pairs each table of the checkpoint with the server's table of its name,
// which must have the same signature.
absl::StatusOr<LoadTargets> MatchTables(
    const proto::CheckpointHeader& header,
    absl::Span<const std::shared_ptr<Table>> tables, const std::string& path,
    const RecordReader& reader) {
  absl::flat_hash_map<std::string, Table*> by_name;
  std::vector<std::string> server_names;
  for (const auto& table : tables) {
    by_name[table->name()] = table.get();
    server_names.push_back(absl::StrCat("'", table->name(), "'"));
  }
  LoadTargets targets;
  for (const proto::CheckpointTable& proto_table : header.tables()) {
    auto info = FromCheckpointTable(proto_table);
    if (!info.ok()) return reader.Corrupt(info.status().message());
    const std::string& name = info->options.name;
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint '", path, "' holds table '", name,
                       "' but the server has no table of that name (it has ",
                       absl::StrJoin(server_names, ", "), ")"));
    }
    Table* table = it->second;
    if (!SameSignature(info->options.signature, table->options().signature)) {
      return absl::InvalidArgumentError(
          absl::StrCat("table '", name, "': its signature ",
                       SignatureDebugString(table->options().signature),
                       " differs from the one in checkpoint '", path, "' ",
                       SignatureDebugString(info->options.signature)));
    }
    targets.tables.push_back(table);
    targets.saved.push_back(*std::move(info));
  }
  return targets;
}

// The spill segment files a checkpoint's chunks on disk are in, as a load
// uses them: taken into the store's own spill directory (SpillStore::Adopt:
// nothing is read, so a restart costs what the items cost, not the bytes),
// or, for a store without one or a spill directory on another file system,
// read back into RAM as chunks of the usual kind.
class CheckpointSpillFiles {
 public:
  CheckpointSpillFiles(std::string directory, ChunkStore* store)
      : directory_(std::move(directory)),
        store_(store),
        disk_(store->spill_store()) {}
  CheckpointSpillFiles(const CheckpointSpillFiles&) = delete;
  CheckpointSpillFiles& operator=(const CheckpointSpillFiles&) = delete;
  ~CheckpointSpillFiles() {
    for (const auto& [file, fd] : fds_) ::close(fd);
    // A segment taken in whose chunks all failed to load, or died since.
    for (const auto& [file, segment] : adopted_) {
      store_->spill_store()->DropIfUnused(segment);
    }
  }

  // The chunk `head` whose bytes are record `where` of file `where.segment`.
  absl::StatusOr<ChunkRef> Load(ChunkHead head, SpillLocation where) {
    const std::string path = SpillFilePath(directory_, where.segment);
    if (disk_ != nullptr) {
      auto adopted = adopted_.find(where.segment);
      if (adopted == adopted_.end()) {
        absl::StatusOr<uint32_t> segment = disk_->Adopt(path);
        if (segment.ok()) {
          adopted = adopted_.emplace(where.segment, *segment).first;
        } else if (absl::IsNotFound(segment.status())) {
          return absl::DataLossError(segment.status().message());
        } else {
          Log(LogSeverity::kWarning,
              absl::StrCat("reading the checkpoint's chunks on disk into RAM "
                           "instead of taking their files in (",
                           segment.status().message(), ")"));
          disk_ = nullptr;
        }
      }
      if (disk_ != nullptr) {
        where.segment = adopted->second;
        absl::StatusOr<ChunkRef> chunk =
            store_->InsertOnDisk(head.key, head.episode_id, head.episode_step,
                                 head.tensor, where, head.lane_episode_ids);
        if (absl::IsOutOfRange(chunk.status())) {
          return absl::DataLossError(chunk.status().message());
        }
        return chunk;
      }
    }
    auto fd = fds_.find(where.segment);
    if (fd == fds_.end()) {
      const int opened = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (opened < 0) {
        const int error = errno;
        if (error == ENOENT) {
          return absl::DataLossError(
              absl::StrCat("spill file ", path, " is missing"));
        }
        return FsError("open", path, {error, std::generic_category()});
      }
      fd = fds_.emplace(where.segment, opened).first;
    }
    head.tensor.data.resize(where.size);
    RETURN_IF_ERROR(
        ReadSpillRecord(fd->second, path, where, head.tensor.data.data()));
    return InsertLoaded(std::move(head), store_);
  }

 private:
  const std::string directory_;
  ChunkStore* const store_;
  // Null once adopting failed (another file system): the rest is read.
  SpillStore* disk_;
  // By the checkpoint's file number: the spill store's segment, or the
  // file opened for reading.
  absl::flat_hash_map<uint32_t, uint32_t> adopted_;
  absl::flat_hash_map<uint32_t, int> fds_;
};

// What the entries after a checkpoint's header held, as far as read.
struct EntriesRead {
  std::vector<ChunkRef> chunks;
  // Per table of the checkpoint.
  std::vector<int64_t> items;
  bool ended = false;
};

// A chunk entry: the next chunk, decoded into `store`.
absl::Status ReadChunkEntry(absl::string_view payload,
                            const RecordReader& reader, ChunkStore* store,
                            EntriesRead* read) {
  auto chunk = DecodeChunk(payload, store);
  if (!chunk.ok()) {
    return reader.Corrupt(absl::StrCat("chunk ", read->chunks.size(), ": ",
                                       chunk.status().message()));
  }
  read->chunks.push_back(*std::move(chunk));
  return absl::OkStatus();
}

// A chunk-on-disk entry: the next chunk, its bytes left in their spill file
// where the store can take it in.
absl::Status ReadChunkOnDiskEntry(absl::string_view payload,
                                  const RecordReader& reader,
                                  CheckpointSpillFiles* files,
                                  EntriesRead* read) {
  ChunkHead head;
  SpillLocation where;
  const absl::Status decoded = DecodeChunkOnDisk(payload, &head, &where);
  absl::StatusOr<ChunkRef> chunk = decoded.ok()
                                       ? files->Load(std::move(head), where)
                                       : absl::StatusOr<ChunkRef>(decoded);
  if (!chunk.ok()) {
    const std::string what = absl::StrCat("chunk ", read->chunks.size(), ": ",
                                          chunk.status().message());
    // Damage is told as the record's; an OS error stays what it is.
    if (absl::IsUnavailable(chunk.status()) ||
        absl::IsResourceExhausted(chunk.status()) ||
        absl::IsPermissionDenied(chunk.status())) {
      return absl::Status(chunk.status().code(), what);
    }
    return reader.Corrupt(what);
  }
  read->chunks.push_back(*std::move(chunk));
  return absl::OkStatus();
}

// An items entry: decodes its items and loads them into their table.
absl::Status ReadItemsEntry(absl::string_view payload,
                            const std::vector<Table*>& targets,
                            const RecordReader& reader, EntriesRead* read) {
  ByteReader in(payload);
  uint64_t table_index, count;
  if (!in.GetVarint(&table_index) || table_index >= targets.size() ||
      !in.GetVarint(&count)) {
    return reader.Corrupt("malformed items entry");
  }
  std::vector<Item> items;
  if (absl::Status status = DecodeItems(&in, count, read->chunks, &items);
      !status.ok()) {
    return reader.Corrupt(status.message());
  }
  read->items[table_index] += static_cast<int64_t>(count);
  if (absl::Status status = targets[table_index]->LoadItems(std::move(items));
      !status.ok()) {
    return reader.Corrupt(status.message());
  }
  return absl::OkStatus();
}

// The end entry: it must count the tables, chunks and items read.
absl::Status ReadEndEntry(absl::string_view payload,
                          const proto::CheckpointHeader& header,
                          const RecordReader& reader, EntriesRead* read) {
  ByteReader in(payload);
  uint64_t num_tables, num_chunks, num_items;
  in.GetVarint(&num_tables);
  in.GetVarint(&num_chunks);
  in.GetVarint(&num_items);
  int64_t total = 0;
  for (int64_t n : read->items) total += n;
  if (!in.ok() || num_tables != read->items.size() ||
      num_chunks != read->chunks.size() ||
      static_cast<int64_t>(num_chunks) != header.num_chunks() ||
      static_cast<int64_t>(num_items) != total) {
    return reader.Corrupt("the end entry does not match what was read");
  }
  read->ended = true;
  return absl::OkStatus();
}

// Reads the entries after the header to the end of the file, loading the
// items into `targets`; calls `progress` (if set) every 8 MiB and at the
// end.
absl::StatusOr<EntriesRead> ReadEntries(
    const std::string& path, const proto::CheckpointHeader& header,
    const std::vector<Table*>& targets,
    const std::function<void(uint64_t, uint64_t)>& progress,
    RecordReader& reader, ChunkStore* store) {
  EntriesRead read;
  CheckpointSpillFiles spill_files(path, store);
  read.chunks.reserve(std::min<int64_t>(header.num_chunks(), int64_t{1} << 24));
  read.items.assign(targets.size(), 0);
  constexpr uint64_t kProgressEvery = uint64_t{8} << 20;
  uint64_t next_progress = 0;
  while (true) {
    uint8_t type;
    absl::string_view payload;
    ASSIGN_OR_RETURN(const bool more, reader.Next(&type, &payload));
    if (progress && (reader.offset() >= next_progress || !more)) {
      progress(reader.offset(), reader.file_size());
      next_progress = reader.offset() + kProgressEvery;
    }
    if (!more) break;
    if (read.ended) return reader.Corrupt("data after the end entry");
    if ((type == kChunk || type == kChunkOnDisk) &&
        static_cast<int64_t>(read.chunks.size()) >= header.num_chunks()) {
      return reader.Corrupt("more chunks than the header announces");
    }
    switch (type) {
      case kChunk:
        RETURN_IF_ERROR(ReadChunkEntry(payload, reader, store, &read));
        break;
      case kChunkOnDisk:
        if (header.format_version() < kFormatVersionOnDisk) {
          return reader.Corrupt("a chunk on disk in a format 1 checkpoint");
        }
        RETURN_IF_ERROR(
            ReadChunkOnDiskEntry(payload, reader, &spill_files, &read));
        break;
      case kItems:
        RETURN_IF_ERROR(ReadItemsEntry(payload, targets, reader, &read));
        break;
      case kEnd:
        RETURN_IF_ERROR(ReadEndEntry(payload, header, reader, &read));
        break;
      default:
        return reader.Corrupt(absl::StrCat("unknown entry type ", type));
    }
  }
  return read;
}

// DATA_LOSS unless the file ended with its end entry and each table has as
// many items as the checkpoint's header says.
absl::Status CheckComplete(const std::string& file, const EntriesRead& read,
                           const std::vector<TableInfo>& saved) {
  if (!read.ended) {
    return absl::DataLossError(absl::StrCat(
        "checkpoint file '", file, "' ends without its end entry (truncated)"));
  }
  for (size_t i = 0; i < saved.size(); ++i) {
    if (read.items[i] != saved[i].current_size) {
      return absl::DataLossError(
          absl::StrCat("checkpoint file '", file, "': table '",
                       saved[i].options.name, "' has ", read.items[i],
                       " items, its header says ", saved[i].current_size));
    }
  }
  return absl::OkStatus();
}

// Loads the checkpoint in directory `path` into `tables`, its chunks into
// `into_store` (a store of its own if null); sets `wal_position` (if set)
// to where the write-ahead log goes on after it.
absl::Status LoadInto(
    const std::string& path, absl::Span<const std::shared_ptr<Table>> tables,
    const std::function<void(uint64_t, uint64_t)>& progress = nullptr,
    uint64_t* wal_position = nullptr, ChunkStore* into_store = nullptr) {
  const std::string file = (fs::path(path) / kDataFile).string();
  auto opened = RecordReader::Open(file);
  if (absl::IsNotFound(opened.status())) {
    return absl::NotFoundError(absl::StrCat(
        "'", path, "' is not a reverb_tf checkpoint: it has no ", kDataFile));
  }
  RETURN_IF_ERROR(opened.status());
  RecordReader& reader = **opened;

  proto::CheckpointHeader header;
  RETURN_IF_ERROR(ReadHeader(reader, path, &header));
  if (wal_position != nullptr) *wal_position = header.wal_position();
  ASSIGN_OR_RETURN(const LoadTargets targets,
                   MatchTables(header, tables, path, reader));
  ChunkStore own_store;
  ASSIGN_OR_RETURN(
      const EntriesRead read,
      ReadEntries(path, header, targets.tables, progress, reader,
                  into_store != nullptr ? into_store : &own_store));
  RETURN_IF_ERROR(CheckComplete(file, read, targets.saved));
  for (size_t i = 0; i < targets.tables.size(); ++i) {
    targets.tables[i]->FinishLoad(targets.saved[i]);
  }
  return absl::OkStatus();
}

// Which chunks a checkpoint leaves in their spill segment files, and the
// links to those files it holds (under kSpillDir): a sealed segment's file
// never changes again (spill_store.h), so a link to it is a consistent copy
// however writers go on, for the cost of a link and an fsync.
class SpillLinks {
 public:
  explicit SpillLinks(std::string directory)
      : directory_(std::move(directory)) {}

  // Where each of `chunks` stays on disk (its record, numbered by the
  // checkpoint's file), or nullopt for those to be written out: chunks in
  // RAM only, and any whose segment cannot be linked (another file system).
  absl::StatusOr<std::vector<std::optional<SpillLocation>>> Plan(
      const std::vector<const Chunk*>& chunks) {
    std::vector<std::optional<ChunkOnDisk>> on_disk(chunks.size());
    absl::flat_hash_map<SpillStore*, uint32_t> sealed_below;
    for (size_t i = 0; i < chunks.size(); ++i) {
      on_disk[i] = chunks[i]->OnDisk();
      if (on_disk[i].has_value()) sealed_below.emplace(on_disk[i]->disk, 0);
    }
    // Sealed after every location above was read, so each of those records
    // is in a sealed segment.
    for (auto& [disk, below] : sealed_below) below = disk->Seal();
    std::vector<std::optional<SpillLocation>> plan(chunks.size());
    for (size_t i = 0; i < chunks.size(); ++i) {
      if (!on_disk[i].has_value()) continue;
      SpillLocation where = on_disk[i]->where;
      if (where.segment >= sealed_below[on_disk[i]->disk]) continue;
      ASSIGN_OR_RETURN(const std::optional<uint32_t> file,
                       FileOf(on_disk[i]->disk, where.segment));
      if (!file.has_value()) continue;
      where.segment = *file;
      plan[i] = where;
    }
    return plan;
  }

  // Makes the linked files durable; OK if there are none.
  absl::Status Sync() const {
    if (paths_.empty()) return absl::OkStatus();
    for (const std::string& path : paths_) RETURN_IF_ERROR(FsyncPath(path));
    return FsyncPath((fs::path(directory_) / kSpillDir).string());
  }

  const std::vector<std::string>& paths() const { return paths_; }
  bool any() const { return !paths_.empty(); }

 private:
  // The checkpoint's number for `segment` of `disk`, linking it the first
  // time; nullopt if it cannot be linked (the chunk is written out).
  absl::StatusOr<std::optional<uint32_t>> FileOf(SpillStore* disk,
                                                 uint32_t segment) {
    const auto key = std::make_pair(disk, segment);
    if (auto it = files_.find(key); it != files_.end()) return it->second;
    if (!made_dir_) {
      std::error_code error;
      const fs::path dir = fs::path(directory_) / kSpillDir;
      fs::create_directory(dir, error);
      if (error) return FsError("create", dir.string(), error);
      made_dir_ = true;
    }
    const uint32_t file = static_cast<uint32_t>(paths_.size());
    const std::string path = SpillFilePath(directory_, file);
    if (absl::Status linked = disk->LinkSegment(segment, path); !linked.ok()) {
      // Compaction emptied the segment since its location was read: the
      // chunk is written out, without a warning.
      if (!warned_ && !absl::IsFailedPrecondition(linked)) {
        Log(LogSeverity::kWarning,
            absl::StrCat("the checkpoint writes out chunks it cannot link (",
                         linked.message(), ")"));
        warned_ = true;
      }
      files_.emplace(key, std::nullopt);
      return std::optional<uint32_t>();
    }
    paths_.push_back(path);
    files_.emplace(key, file);
    return std::optional<uint32_t>(file);
  }

  const std::string directory_;
  absl::flat_hash_map<std::pair<SpillStore*, uint32_t>, std::optional<uint32_t>>
      files_;
  std::vector<std::string> paths_;
  bool made_dir_ = false;
  bool warned_ = false;
};

// Writes the checkpoint file for `snapshots` into `directory`, with links
// to the spill files its chunks on disk are in.
absl::Status WriteCheckpointFile(const std::string& directory,
                                 const std::vector<TableSnapshot>& snapshots,
                                 uint64_t wal_position,
                                 CheckpointStats* stats) {
  // Each chunk is written once, however many slices, items and tables use it.
  absl::flat_hash_map<const Chunk*, uint64_t> chunk_ids;
  std::vector<const Chunk*> chunks;
  std::vector<std::vector<uint64_t>> slice_chunk_ids(snapshots.size());
  for (size_t t = 0; t < snapshots.size(); ++t) {
    const TableSnapshot& snapshot = snapshots[t];
    std::vector<uint64_t>& ids = slice_chunk_ids[t];
    ids.resize(snapshot.chunks.size());
    // Numbered in item order (oldest first), so the chunk indices of
    // consecutive items are close and the items entries compress well.
    for (const TableSnapshot::ItemRecord& item : snapshot.items) {
      for (uint64_t c = item.first_column;
           c < item.first_column + item.num_columns; ++c) {
        const TableSnapshot::ColumnRecord& column = snapshot.columns[c];
        for (uint64_t s = column.first_slice;
             s < column.first_slice + column.num_slices; ++s) {
          auto [it, inserted] =
              chunk_ids.try_emplace(snapshot.chunks[s], chunks.size());
          if (inserted) chunks.push_back(snapshot.chunks[s]);
          ids[s] = it->second;
        }
      }
    }
  }

  SpillLinks links(directory);
  ASSIGN_OR_RETURN(const std::vector<std::optional<SpillLocation>> on_disk,
                   links.Plan(chunks));

  const std::string file = (fs::path(directory) / kDataFile).string();
  ASSIGN_OR_RETURN(auto writer, RecordWriter::Create(file));
  proto::CheckpointHeader header;
  int64_t num_items = 0;
  for (const TableSnapshot& snapshot : snapshots) {
    TableInfo info;
    info.options = snapshot.options;
    info.current_size = static_cast<int64_t>(snapshot.items.size());
    info.num_unique_samples = snapshot.num_unique_samples;
    info.rate_limiter_info = snapshot.rate_limiter;
    *header.add_tables() = ToCheckpointTable(info);
    num_items += info.current_size;
  }
  header.set_format_version(links.any() ? kFormatVersionOnDisk
                                        : kFormatVersion);
  header.set_num_chunks(static_cast<int64_t>(chunks.size()));
  header.set_written_by("reverb_tf");
  header.set_wal_position(wal_position);
  RETURN_IF_ERROR(writer->Add(kHeader, header.SerializeAsString()));

  std::string buffer;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const Chunk* chunk = chunks[i];
    if (on_disk[i].has_value()) {
      EncodeChunkOnDisk(*chunk, *on_disk[i], &buffer);
      RETURN_IF_ERROR(writer->Add(kChunkOnDisk, buffer));
      stats->bytes_on_disk += on_disk[i]->size;
      continue;
    }
    EncodeChunkHead(*chunk, &buffer);
    ASSIGN_OR_RETURN(const ChunkBytes bytes,
                     chunk->Read(/*keep_in_ram=*/false));
    RETURN_IF_ERROR(writer->Add(kChunk, buffer, bytes.view(),
                                chunk->compression() == Compression::kNone));
  }
  for (size_t t = 0; t < snapshots.size(); ++t) {
    const size_t n = snapshots[t].items.size();
    for (size_t begin = 0; begin < n; begin += kItemsPerEntry) {
      EncodeItems(t, snapshots[t], slice_chunk_ids[t], begin,
                  std::min(n, begin + kItemsPerEntry), &buffer);
      RETURN_IF_ERROR(writer->Add(kItems, buffer));
    }
  }
  EncodeEnd(snapshots.size(), chunks.size(), static_cast<uint64_t>(num_items),
            &buffer);
  RETURN_IF_ERROR(writer->Add(kEnd, buffer));
  RETURN_IF_ERROR(writer->Close());
  RETURN_IF_ERROR(links.Sync());
  stats->spill_files = links.paths().size();
  stats->num_items = num_items;
  stats->num_chunks = static_cast<int64_t>(chunks.size());
  stats->bytes = writer->bytes_written();
  return absl::OkStatus();
}

std::string TimestampName(absl::Time time) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E6S", time, absl::UTCTimeZone());
}

// What TimestampName() makes (possibly with '+' appended): "YYYY-MM-DDTHH...".
bool IsCheckpointName(const std::string& name) {
  if (name.size() < 19 || name[4] != '-' || name[7] != '-' || name[10] != 'T')
    return false;
  for (int i : {0, 1, 2, 3, 5, 6, 8, 9, 11, 12}) {
    if (name[i] < '0' || name[i] > '9') return false;
  }
  return true;
}

}  // namespace

// ------------------------------------------------------------ Checkpointer

absl::StatusOr<std::unique_ptr<Checkpointer>> Checkpointer::Create(
    CheckpointerOptions options) {
  if (options.root.empty()) {
    return absl::InvalidArgumentError("checkpointer root directory is empty");
  }
  if (options.keep < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpointer keep must be >= 1, got ", options.keep));
  }
  if (!options.group.empty())
    RETURN_IF_ERROR(LookUpGroup(options.group).status());
  std::error_code error;
  fs::create_directories(options.root, error);
  if (error) return FsError("create checkpoint directory", options.root, error);
  return std::unique_ptr<Checkpointer>(new Checkpointer(std::move(options)));
}

Checkpointer::Checkpointer(CheckpointerOptions options)
    : options_(std::move(options)) {}

absl::StatusOr<std::vector<std::string>> Checkpointer::List() const {
  std::vector<std::string> names;
  std::error_code error;
  for (fs::directory_iterator it(options_.root, error), end;
       !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    // Every directory named like a checkpoint counts, with its data file or
    // not: one that lost it is a damaged checkpoint (LoadLatest says so),
    // not one to skip silently.
    std::error_code ignored;
    if (IsCheckpointName(name) && fs::is_directory(it->path(), ignored))
      names.push_back(name);
  }
  if (error) return FsError("list checkpoint directory", options_.root, error);
  std::sort(names.begin(), names.end());
  std::vector<std::string> paths;
  for (const std::string& name : names) {
    paths.push_back((fs::path(options_.root) / name).string());
  }
  return paths;
}

absl::Status Checkpointer::RemoveStaleTemporaries() const {
  std::error_code error;
  for (fs::directory_iterator it(options_.root, error), end;
       !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (!absl::StartsWith(name, kTempPrefix)) continue;
    // The writer's pid ends the name; only a dead writer's directory goes.
    int pid = 0;
    const size_t dash = name.rfind('-');
    if (dash == std::string::npos ||
        !absl::SimpleAtoi(name.substr(dash + 1), &pid) || pid <= 0 ||
        pid == ::getpid()) {
      continue;
    }
    if (::kill(pid, 0) == 0 || errno != ESRCH) continue;
    std::error_code ignored;
    fs::remove_all(it->path(), ignored);
  }
  if (error) return FsError("list checkpoint directory", options_.root, error);
  return absl::OkStatus();
}

absl::StatusOr<CheckpointStats> Checkpointer::Save(
    absl::Span<const std::shared_ptr<Table>> tables, uint64_t wal_position) {
  absl::MutexLock lock(&save_mu_);
  const absl::Time start = absl::Now();
  CheckpointStats stats;
  stats.max_table_pause = absl::ZeroDuration();

  std::vector<TableSnapshot> snapshots;
  snapshots.reserve(tables.size());
  for (const auto& table : tables) {
    snapshots.push_back(table->Snapshot());
    stats.max_table_pause =
        std::max(stats.max_table_pause, snapshots.back().pause);
  }

  RETURN_IF_ERROR(RemoveStaleTemporaries());
  ASSIGN_OR_RETURN(std::vector<std::string> existing, List());
  std::string newest = last_name_;
  if (!existing.empty()) {
    newest = std::max(newest, fs::path(existing.back()).filename().string());
  }
  std::string name = TimestampName(absl::Now());
  // Names must keep sorting in creation order even if the clock steps back.
  if (name <= newest) name = absl::StrCat(newest, "+");
  const fs::path final_path = fs::path(options_.root) / name;
  const fs::path temp_path = fs::path(options_.root) /
                             absl::StrCat(kTempPrefix, name, "-", ::getpid());

  std::error_code error;
  fs::create_directory(temp_path, error);
  if (error) return FsError("create", temp_path.string(), error);
  absl::Status status =
      WriteCheckpointFile(temp_path.string(), snapshots, wal_position, &stats);
  snapshots.clear();  // unpin: tables free what they kept for the snapshots
  if (status.ok()) status = FsyncPath(temp_path.string());
  if (status.ok() && !options_.group.empty()) {
    auto gid = LookUpGroup(options_.group);
    status = gid.status();
    std::vector<fs::path> paths = {temp_path, temp_path / kDataFile};
    std::error_code ignored;
    if (fs::is_directory(temp_path / kSpillDir, ignored)) {
      paths.push_back(temp_path / kSpillDir);
      for (const auto& entry :
           fs::directory_iterator(temp_path / kSpillDir, ignored)) {
        paths.push_back(entry.path());
      }
    }
    for (const fs::path& p : paths) {
      if (status.ok() &&
          ::chown(p.c_str(), static_cast<uid_t>(-1), *gid) != 0) {
        status = FsError("chown", p.string(), {errno, std::generic_category()});
      }
    }
  }
  if (status.ok()) {
    fs::rename(temp_path, final_path, error);
    if (error)
      status = FsError("rename checkpoint into", final_path.string(), error);
  }
  if (status.ok()) status = FsyncPath(options_.root);
  if (!status.ok()) {
    std::error_code ignored;
    fs::remove_all(temp_path, ignored);
    return status;
  }
  last_name_ = name;

  // Only now that the new checkpoint is complete do old ones go. Failing to
  // remove one does not undo the save: it is reported and retried next time.
  auto listed = List();
  for (size_t i = 0; listed.ok() && i + options_.keep < listed->size(); ++i) {
    fs::remove_all((*listed)[i], error);
    if (error) {
      Log(LogSeverity::kWarning,
          absl::StrCat("cannot remove old checkpoint '", (*listed)[i],
                       "': ", error.message()));
    }
  }
  stats.path = final_path.string();
  stats.total = absl::Now() - start;
  return stats;
}

absl::StatusOr<LoadedCheckpoint> Checkpointer::LoadLatest(
    absl::Span<const std::shared_ptr<Table>> tables, ChunkStore* store) {
  RETURN_IF_ERROR(RemoveStaleTemporaries());
  ASSIGN_OR_RETURN(std::vector<std::string> existing, List());
  LoadedCheckpoint loaded;
  if (existing.empty()) {
    if (options_.fallback_checkpoint_path.empty()) return loaded;
    RETURN_IF_ERROR(LoadCheckpoint(options_.fallback_checkpoint_path, tables,
                                   &loaded.wal_position, store));
    loaded.path = options_.fallback_checkpoint_path;
    return loaded;
  }
  for (auto it = existing.rbegin(); it != existing.rend(); ++it) {
    absl::Status status =
        LoadCheckpoint(*it, tables, &loaded.wal_position, store);
    if (status.ok()) {
      loaded.path = *it;
      if (!loaded.skipped.empty()) {
        Log(LogSeverity::kWarning,
            absl::StrCat("loaded the older checkpoint '", *it, "' because ",
                         loaded.skipped.size(), " newer one(s) are damaged: ",
                         absl::StrJoin(loaded.skipped, "; ")));
      }
      return loaded;
    }
    // One rule for damage, whatever its kind (a bad record or a lost file).
    const bool damaged = absl::IsDataLoss(status) || absl::IsNotFound(status);
    if (!damaged) return status;
    if (!options_.load_previous_if_damaged) {
      return absl::DataLossError(absl::StrCat(
          "the newest checkpoint '", *it, "' is damaged: ", status.message(),
          ". Move it out of '", options_.root,
          "' or allow loading the previous one (load_previous_if_damaged).",
          existing.size() > 1 ? "" : " No older checkpoint is kept (keep=1)."));
    }
    loaded.skipped.push_back(absl::StrCat(*it, ": ", status.message()));
  }
  return absl::DataLossError(
      absl::StrCat("every checkpoint under '", options_.root,
                   "' is damaged: ", absl::StrJoin(loaded.skipped, "; ")));
}

absl::Status LoadCheckpoint(const std::string& path,
                            absl::Span<const std::shared_ptr<Table>> tables,
                            uint64_t* wal_position, ChunkStore* store) {
  for (const auto& table : tables) {
    if (table->size() != 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("table '", table->name(),
                       "' is not empty; checkpoints load into empty tables"));
    }
  }
  absl::Status status = LoadInto(path, tables, nullptr, wal_position, store);
  if (!status.ok()) {
    // Before the tables are served: no journal refuses the reset.
    for (const auto& table : tables) table->Reset().IgnoreError();
  }
  return status;
}

absl::StatusOr<CheckpointSummary> InspectCheckpoint(
    const std::string& path, std::function<void(uint64_t, uint64_t)> progress) {
  const std::string file = (fs::path(path) / kDataFile).string();
  CheckpointSummary summary;
  summary.path = path;
  proto::CheckpointHeader header;
  {
    auto opened = RecordReader::Open(file);
    if (absl::IsNotFound(opened.status())) {
      return absl::NotFoundError(absl::StrCat(
          "'", path, "' is not a reverb_tf checkpoint: it has no ", kDataFile));
    }
    RETURN_IF_ERROR(opened.status());
    RETURN_IF_ERROR(ReadHeader(**opened, path, &header));
    summary.file_bytes = (*opened)->file_size();
  }
  summary.written_by = header.written_by();
  summary.wal_position = header.wal_position();
  summary.num_chunks = header.num_chunks();
  std::vector<std::shared_ptr<Table>> tables;
  for (const proto::CheckpointTable& proto_table : header.tables()) {
    ASSIGN_OR_RETURN(TableInfo info, FromCheckpointTable(proto_table));
    ASSIGN_OR_RETURN(std::shared_ptr<Table> table,
                     Table::Create(info.options, /*seed=*/1));
    tables.push_back(std::move(table));
  }
  RETURN_IF_ERROR(LoadInto(path, tables, progress));
  for (const auto& table : tables) summary.tables.push_back(table->info());
  return summary;
}

}  // namespace reverb_tf
