// SPDX-License-Identifier: Apache-2.0
// Checkpoint data files: a stream of checksummed, optionally compressed
// records, with no size limit.
//
// A file is a fixed header followed by records:
//
//   file header  "RTFCKPT\n" | u32 version | u32 crc32 of the 12 bytes before
//   record       u8 codec (0 stored, 1 zstd) | 3 zero bytes
//                | u32 crc32 of the stored bytes | u64 stored size
//                | u64 raw size | u32 crc32 of the 24 header bytes before
//                | stored bytes
//
// (integers little-endian). A record's raw bytes are a sequence of entries,
// `u8 type | varint length | payload`; an entry never spans two records.
// Small entries are packed into records of about kTargetRecordBytes and
// compressed together (checkpoint entries repeat a lot: compressing them
// per record shrinks a small-item checkpoint several-fold); an entry larger
// than that gets a record of its own, stored as is when the caller says its
// bytes are already compressed.
//
// Every byte is covered by a checksum and every length is checked against
// what the file holds, so truncation and corruption are reported (DataLoss,
// naming the file, the record index and its byte offset) before anything
// is decoded, and a reader never allocates more than the file could hold.
// Writers are not durable until Close() or Sync() returns; Flush() cuts a
// record early (the write-ahead log commits that way, checkpointing/wal.h).
//
// Thread safety: RecordWriter and RecordReader are not thread-safe.
#ifndef REVERB_TF_CC_CHECKPOINTING_RECORD_FILE_H_
#define REVERB_TF_CC_CHECKPOINTING_RECORD_FILE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace reverb_tf {

class RecordWriter {
 public:
  // Records are cut once their raw bytes reach this size.
  static constexpr size_t kTargetRecordBytes = size_t{1} << 20;

  // Creates (truncating) `path`.
  static absl::StatusOr<std::unique_ptr<RecordWriter>> Create(
      const std::string& path);
  ~RecordWriter();

  RecordWriter(const RecordWriter&) = delete;
  RecordWriter& operator=(const RecordWriter&) = delete;

  // Appends an entry whose payload is `head` followed by `body` (two parts
  // so that large data is never copied just to be framed). Set
  // `compressible` to false for bytes that are already compressed (or will
  // not compress): a record holding such an entry is stored as is.
  absl::Status Add(uint8_t type, absl::string_view head,
                   absl::string_view body = {}, bool compressible = true);

  // Writes the entries added since the last record as a record of their own
  // now (the write-ahead log's commit), without syncing.
  absl::Status Flush() { return FlushRecord(); }

  // fdatasync: what was written survives a crash of the machine.
  absl::Status Sync();

  // Writes what is buffered, fsyncs and closes the file.
  absl::Status Close();

  // Bytes written to the file so far.
  uint64_t bytes_written() const { return offset_; }

 private:
  RecordWriter(std::string path, int fd);

  absl::Status FlushRecord();
  absl::Status WriteRecord(absl::string_view prefix, absl::string_view head,
                           absl::string_view body, bool compress);
  absl::Status WriteAll(absl::string_view bytes);
  absl::Status IoError(const char* what, int error) const;

  const std::string path_;
  int fd_;
  uint64_t offset_ = 0;
  std::string pending_;               // raw bytes of the record being filled
  bool pending_compressible_ = true;  // every entry of pending_ is
  std::string compressed_;            // reused compression buffer
};

class RecordReader {
 public:
  // Opens `path` and checks its file header.
  static absl::StatusOr<std::unique_ptr<RecordReader>> Open(
      const std::string& path);
  ~RecordReader();

  RecordReader(const RecordReader&) = delete;
  RecordReader& operator=(const RecordReader&) = delete;

  // Reads the next entry. Returns false at the end of the file. `payload`
  // stays valid until the next call.
  absl::StatusOr<bool> Next(uint8_t* type, absl::string_view* payload);

  // A DataLoss error naming the file and the current record, for callers
  // that find an entry's payload malformed.
  absl::Status Corrupt(absl::string_view what) const;

  const std::string& path() const { return path_; }
  // Bytes read so far, and the file's size.
  uint64_t offset() const { return offset_; }
  uint64_t file_size() const { return file_size_; }

 private:
  RecordReader(std::string path, int fd, uint64_t file_size);

  absl::Status ReadRecord();
  absl::Status ReadExactly(char* out, size_t size);

  const std::string path_;
  int fd_;
  const uint64_t file_size_;
  uint64_t offset_ = 0;
  // Index and file offset of the record `raw_` came from (-1 before the first).
  int64_t record_index_ = -1;
  uint64_t record_offset_ = 0;
  std::string stored_;
  std::string raw_;
  size_t position_ = 0;  // next entry in raw_
};

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_CHECKPOINTING_RECORD_FILE_H_
