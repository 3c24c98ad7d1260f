// SPDX-License-Identifier: Apache-2.0
// Appending and parsing the little-endian integers and varints that
// checkpoint files are made of (record_file.h, checkpointer.cc).
//
// ByteReader never reads past its input: a getter that runs out of bytes
// returns false and leaves the reader failed, so a parser can read a whole
// entry and check once.
//
// Thread safety: value types.
#ifndef REVERB_TF_CC_CHECKPOINTING_BYTE_CODEC_H_
#define REVERB_TF_CC_CHECKPOINTING_BYTE_CODEC_H_

#include <cstdint>
#include <cstring>
#include <string>

#include "absl/strings/string_view.h"

namespace reverb_tf {

inline void PutFixed32(std::string* out, uint32_t value) {
  char bytes[4];
  for (int i = 0; i < 4; ++i) bytes[i] = static_cast<char>(value >> (8 * i));
  out->append(bytes, 4);
}

inline void PutFixed64(std::string* out, uint64_t value) {
  char bytes[8];
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>(value >> (8 * i));
  out->append(bytes, 8);
}

inline void PutDouble(std::string* out, double value) {
  uint64_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  PutFixed64(out, bits);
}

inline void PutVarint(std::string* out, uint64_t value) {
  char bytes[10];
  int n = 0;
  while (value >= 0x80) {
    bytes[n++] = static_cast<char>(value | 0x80);
    value >>= 7;
  }
  bytes[n++] = static_cast<char>(value);
  out->append(bytes, n);
}

inline uint32_t LoadFixed32(const char* bytes) {
  uint32_t value = 0;
  for (int i = 0; i < 4; ++i)
    value |= uint32_t{static_cast<uint8_t>(bytes[i])} << (8 * i);
  return value;
}

inline uint64_t LoadFixed64(const char* bytes) {
  uint64_t value = 0;
  for (int i = 0; i < 8; ++i)
    value |= uint64_t{static_cast<uint8_t>(bytes[i])} << (8 * i);
  return value;
}

class ByteReader {
 public:
  explicit ByteReader(absl::string_view input) : rest_(input) {}

  bool ok() const { return ok_; }
  bool empty() const { return rest_.empty(); }
  absl::string_view rest() const { return rest_; }

  bool GetByte(uint8_t* value) {
    if (!Require(1)) return false;
    *value = static_cast<uint8_t>(rest_[0]);
    rest_.remove_prefix(1);
    return true;
  }

  bool GetFixed64(uint64_t* value) {
    if (!Require(8)) return false;
    *value = LoadFixed64(rest_.data());
    rest_.remove_prefix(8);
    return true;
  }

  bool GetDouble(double* value) {
    uint64_t bits;
    if (!GetFixed64(&bits)) return false;
    std::memcpy(value, &bits, sizeof(bits));
    return true;
  }

  bool GetVarint(uint64_t* value) {
    uint64_t result = 0;
    for (int shift = 0; shift < 64 && ok_; shift += 7) {
      uint8_t byte;
      if (!GetByte(&byte)) return false;
      result |= uint64_t{byte & 0x7fu} << shift;
      if ((byte & 0x80) == 0) {
        *value = result;
        return true;
      }
    }
    ok_ = false;  // more than 10 bytes: not a varint
    return false;
  }

  // A varint that must fit in [0, limit].
  bool GetVarintAtMost(uint64_t limit, uint64_t* value) {
    if (!GetVarint(value)) return false;
    if (*value > limit) ok_ = false;
    return ok_;
  }

  bool GetBytes(size_t size, absl::string_view* value) {
    if (!Require(size)) return false;
    *value = rest_.substr(0, size);
    rest_.remove_prefix(size);
    return true;
  }

 private:
  bool Require(size_t size) {
    if (ok_ && rest_.size() >= size) return true;
    ok_ = false;
    return false;
  }

  absl::string_view rest_;
  bool ok_ = true;
};

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_CHECKPOINTING_BYTE_CODEC_H_
