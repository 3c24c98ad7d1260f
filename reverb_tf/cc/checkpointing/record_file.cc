// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/checkpointing/record_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "reverb_tf/cc/checkpointing/byte_codec.h"
#include "reverb_tf/cc/platform/status_macros.h"

namespace reverb_tf {
namespace {

constexpr char kMagic[8] = {'R', 'T', 'F', 'C', 'K', 'P', 'T', '\n'};
constexpr uint32_t kVersion = 1;
constexpr size_t kFileHeaderBytes = 16;
constexpr size_t kRecordHeaderBytes = 28;
constexpr uint8_t kCodecStored = 0;
constexpr uint8_t kCodecZstd = 1;
// Fast enough to keep up with the disk, and checkpoint entries compress well
// even at this level.
constexpr int kZstdLevel = 1;
// No entry is bigger than a chunk (< 4 GiB, chunk_store.h) plus its framing;
// a larger length can only come from a damaged header.
constexpr uint64_t kMaxRawRecordBytes = (uint64_t{4} << 30) + (1 << 20);

uint32_t Crc32(uint32_t crc, absl::string_view bytes) {
  // zlib treats a null buffer as "give me the initial value".
  if (bytes.empty()) return crc;
  return static_cast<uint32_t>(
      crc32_z(crc, reinterpret_cast<const Bytef*>(bytes.data()), bytes.size()));
}

uint32_t Crc32(absl::string_view bytes) {
  return Crc32(crc32_z(0, nullptr, 0), bytes);
}

std::string RecordHeader(uint8_t codec, uint32_t stored_crc,
                         uint64_t stored_size, uint64_t raw_size) {
  std::string header;
  header.reserve(kRecordHeaderBytes);
  header.push_back(static_cast<char>(codec));
  header.append(3, '\0');
  PutFixed32(&header, stored_crc);
  PutFixed64(&header, stored_size);
  PutFixed64(&header, raw_size);
  PutFixed32(&header, Crc32(header));
  return header;
}

}  // namespace

// ------------------------------------------------------------------ writer

absl::StatusOr<std::unique_ptr<RecordWriter>> RecordWriter::Create(
    const std::string& path) {
  const int fd =
      ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int error = errno;
    return absl::Status(absl::ErrnoToStatusCode(error),
                        absl::StrCat("cannot create file '", path,
                                     "': ", std::strerror(error)));
  }
  std::unique_ptr<RecordWriter> writer(new RecordWriter(path, fd));
  std::string header(kMagic, sizeof(kMagic));
  PutFixed32(&header, kVersion);
  PutFixed32(&header, Crc32(header));
  RETURN_IF_ERROR(writer->WriteAll(header));
  return writer;
}

RecordWriter::RecordWriter(std::string path, int fd)
    : path_(std::move(path)), fd_(fd) {
  pending_.reserve(kTargetRecordBytes + 1024);
}

RecordWriter::~RecordWriter() {
  if (fd_ >= 0) ::close(fd_);
}

absl::Status RecordWriter::IoError(const char* what, int error) const {
  return absl::Status(absl::ErrnoToStatusCode(error),
                      absl::StrCat("cannot ", what, " file '", path_,
                                   "': ", std::strerror(error)));
}

absl::Status RecordWriter::WriteAll(absl::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd_, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return IoError("write", errno);
    }
    bytes.remove_prefix(static_cast<size_t>(n));
    offset_ += static_cast<uint64_t>(n);
  }
  return absl::OkStatus();
}

absl::Status RecordWriter::Add(uint8_t type, absl::string_view head,
                               absl::string_view body, bool compressible) {
  if (fd_ < 0) return absl::FailedPreconditionError("RecordWriter is closed");
  std::string prefix;
  prefix.push_back(static_cast<char>(type));
  PutVarint(&prefix, head.size() + body.size());
  const size_t size = prefix.size() + head.size() + body.size();
  if (size >= kTargetRecordBytes) {
    RETURN_IF_ERROR(FlushRecord());
    return WriteRecord(prefix, head, body, compressible);
  }
  if (pending_.size() + size > kTargetRecordBytes)
    RETURN_IF_ERROR(FlushRecord());
  pending_compressible_ = pending_compressible_ && compressible;
  pending_.append(prefix);
  pending_.append(head.data(), head.size());
  pending_.append(body.data(), body.size());
  return absl::OkStatus();
}

absl::Status RecordWriter::FlushRecord() {
  if (pending_.empty()) return absl::OkStatus();
  RETURN_IF_ERROR(WriteRecord(pending_, {}, {}, pending_compressible_));
  pending_.clear();
  pending_compressible_ = true;
  return absl::OkStatus();
}

absl::Status RecordWriter::WriteRecord(absl::string_view prefix,
                                       absl::string_view head,
                                       absl::string_view body, bool compress) {
  const uint64_t raw_size = prefix.size() + head.size() + body.size();
  if (compress) {
    std::string joined;
    absl::string_view raw = prefix;
    if (!head.empty() || !body.empty()) {
      joined = absl::StrCat(prefix, head, body);
      raw = joined;
    }
    compressed_.resize(ZSTD_compressBound(raw.size()));
    const size_t n = ZSTD_compress(compressed_.data(), compressed_.size(),
                                   raw.data(), raw.size(), kZstdLevel);
    if (ZSTD_isError(n)) {
      return absl::InternalError(absl::StrCat("zstd: ", ZSTD_getErrorName(n)));
    }
    if (n < raw.size()) {
      const absl::string_view stored(compressed_.data(), n);
      RETURN_IF_ERROR(WriteAll(
          RecordHeader(kCodecZstd, Crc32(stored), stored.size(), raw_size)));
      return WriteAll(stored);
    }
  }
  // Stored as is: three parts, checksummed in sequence and written without
  // joining them.
  const uint32_t crc = Crc32(Crc32(Crc32(prefix), head), body);
  RETURN_IF_ERROR(
      WriteAll(RecordHeader(kCodecStored, crc, raw_size, raw_size)));
  RETURN_IF_ERROR(WriteAll(prefix));
  RETURN_IF_ERROR(WriteAll(head));
  return WriteAll(body);
}

absl::Status RecordWriter::Sync() {
  if (fd_ < 0) return absl::FailedPreconditionError("RecordWriter is closed");
  if (::fdatasync(fd_) != 0) return IoError("sync", errno);
  return absl::OkStatus();
}

absl::Status RecordWriter::Close() {
  if (fd_ < 0) return absl::OkStatus();
  RETURN_IF_ERROR(FlushRecord());
  if (::fsync(fd_) != 0) return IoError("fsync", errno);
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0) return IoError("close", errno);
  return absl::OkStatus();
}

// ------------------------------------------------------------------ reader

absl::StatusOr<std::unique_ptr<RecordReader>> RecordReader::Open(
    const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    const std::string message =
        absl::StrCat("cannot open file '", path, "': ", std::strerror(error));
    return absl::Status(absl::ErrnoToStatusCode(error), message);
  }
  struct stat info;
  if (::fstat(fd, &info) != 0) {
    ::close(fd);
    return absl::UnavailableError(absl::StrCat("cannot stat '", path, "'"));
  }
  std::unique_ptr<RecordReader> reader(
      new RecordReader(path, fd, static_cast<uint64_t>(info.st_size)));
  char header[kFileHeaderBytes];
  if (reader->file_size_ < kFileHeaderBytes) {
    return reader->Corrupt(
        "shorter than the file header: not a reverb_tf checkpoint");
  }
  RETURN_IF_ERROR(reader->ReadExactly(header, sizeof(header)));
  if (std::memcmp(header, kMagic, sizeof(kMagic)) != 0) {
    return reader->Corrupt(
        "bad magic: not a reverb_tf checkpoint or write-ahead log file");
  }
  if (LoadFixed32(header + 12) != Crc32(absl::string_view(header, 12))) {
    return reader->Corrupt("file header checksum mismatch");
  }
  if (const uint32_t version = LoadFixed32(header + 8); version != kVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("file '", path, "' has format version ", version,
                     "; this reverb_tf reads version ", kVersion));
  }
  return reader;
}

RecordReader::RecordReader(std::string path, int fd, uint64_t file_size)
    : path_(std::move(path)), fd_(fd), file_size_(file_size) {}

RecordReader::~RecordReader() { ::close(fd_); }

absl::Status RecordReader::Corrupt(absl::string_view what) const {
  if (record_index_ < 0) {
    return absl::DataLossError(absl::StrCat("file '", path_, "': ", what));
  }
  return absl::DataLossError(absl::StrCat("file '", path_, "': record ",
                                          record_index_, " (at byte ",
                                          record_offset_, "): ", what));
}

absl::Status RecordReader::ReadExactly(char* out, size_t size) {
  while (size > 0) {
    const ssize_t n = ::pread(fd_, out, size, static_cast<off_t>(offset_));
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::UnavailableError(absl::StrCat("cannot read file '", path_,
                                                 "': ", std::strerror(errno)));
    }
    if (n == 0) return Corrupt("file ends early (truncated)");
    out += n;
    size -= static_cast<size_t>(n);
    offset_ += static_cast<uint64_t>(n);
  }
  return absl::OkStatus();
}

absl::Status RecordReader::ReadRecord() {
  ++record_index_;
  record_offset_ = offset_;
  if (file_size_ - offset_ < kRecordHeaderBytes) {
    return Corrupt("file ends inside a record header (truncated)");
  }
  char header[kRecordHeaderBytes];
  RETURN_IF_ERROR(ReadExactly(header, sizeof(header)));
  if (LoadFixed32(header + 24) != Crc32(absl::string_view(header, 24))) {
    return Corrupt("record header checksum mismatch");
  }
  const uint8_t codec = static_cast<uint8_t>(header[0]);
  const uint32_t stored_crc = LoadFixed32(header + 4);
  const uint64_t stored_size = LoadFixed64(header + 8);
  const uint64_t raw_size = LoadFixed64(header + 16);
  if (codec != kCodecStored && codec != kCodecZstd) {
    return Corrupt(absl::StrCat("unknown codec ", codec));
  }
  if (stored_size > file_size_ - offset_) {
    return Corrupt(absl::StrCat("record of ", stored_size, " bytes but only ",
                                file_size_ - offset_, " left (truncated)"));
  }
  if (raw_size > kMaxRawRecordBytes ||
      (codec == kCodecStored && raw_size != stored_size)) {
    return Corrupt(absl::StrCat("implausible record size ", raw_size));
  }
  std::string& target = codec == kCodecStored ? raw_ : stored_;
  target.resize(stored_size);
  RETURN_IF_ERROR(ReadExactly(target.data(), stored_size));
  if (Crc32(target) != stored_crc) return Corrupt("record checksum mismatch");
  if (codec == kCodecZstd) {
    raw_.resize(raw_size);
    const size_t n = ZSTD_decompress(raw_.data(), raw_.size(), stored_.data(),
                                     stored_.size());
    if (ZSTD_isError(n) || n != raw_size)
      return Corrupt("record does not decompress");
  }
  position_ = 0;
  return absl::OkStatus();
}

absl::StatusOr<bool> RecordReader::Next(uint8_t* type,
                                        absl::string_view* payload) {
  while (position_ == raw_.size()) {
    if (offset_ == file_size_) return false;
    RETURN_IF_ERROR(ReadRecord());
    if (raw_.empty()) return Corrupt("empty record");
  }
  ByteReader reader(absl::string_view(raw_).substr(position_));
  uint64_t size;
  if (!reader.GetByte(type) || !reader.GetVarint(&size) ||
      !reader.GetBytes(size, payload)) {
    return Corrupt(absl::StrCat("malformed entry at offset ", position_,
                                " of the record"));
  }
  position_ = raw_.size() - reader.rest().size();
  return true;
}

}  // namespace reverb_tf
