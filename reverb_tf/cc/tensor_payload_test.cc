// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/tensor_payload.h"

#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "reverb_tf/cc/testing/status_matchers.h"

namespace reverb_tf {
namespace {

std::string Bytes(size_t n, uint8_t fill) {
  return std::string(n, static_cast<char>(fill));
}

TEST(TensorPayloadTest, MakePayloadChecksByteCount) {
  EXPECT_OK(MakePayload(DType::kFloat, {2, 3}, Bytes(24, 0)));
  auto bad = MakePayload(DType::kFloat, {2, 3}, Bytes(20, 0));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("needs 24 bytes"), std::string::npos);
}

TEST(TensorPayloadTest, RejectsInvalidDTypeAndNegativeDims) {
  TensorPayload p;
  p.dtype = static_cast<DType>(99);
  EXPECT_EQ(p.Validate().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MakePayload(DType::kInt32, {-1}, "").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(IsValidDType(0));
  EXPECT_TRUE(IsValidDType(static_cast<int32_t>(DType::kBool)));
}

TEST(TensorPayloadTest, StringsRoundTrip) {
  std::vector<std::string> in = {"", "a", std::string(300, 'x'), "\0zero"};
  auto payload = MakeStringPayload({2, 2}, in);
  ASSERT_OK(payload);
  ASSERT_OK(payload->Validate());
  auto out = DecodeStrings(*payload);
  ASSERT_OK(out);
  EXPECT_EQ(*out, in);
  EXPECT_FALSE(MakeStringPayload({3}, in).ok());
}

TEST(TensorPayloadTest, MalformedStringPayloadIsAnError) {
  auto payload = MakeStringPayload({1}, std::vector<std::string>{"hello"});
  ASSERT_OK(payload);
  payload->data.pop_back();
  payload->uncompressed_size = payload->data.size();
  EXPECT_EQ(payload->Validate().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TensorPayloadTest, ZstdRoundTripShrinksCompressibleData) {
  auto payload = MakePayload(DType::kUint8, {1000, 84}, Bytes(84000, 7));
  ASSERT_OK(payload);
  auto compressed = Compress(*payload, 3);
  ASSERT_OK(compressed);
  EXPECT_EQ(compressed->compression, Compression::kZstd);
  EXPECT_LT(compressed->data.size(), 1000u);
  auto restored = Decompress(*compressed);
  ASSERT_OK(restored);
  EXPECT_EQ(restored->compression, Compression::kNone);
  EXPECT_EQ(restored->data, payload->data);
  EXPECT_EQ(restored->shape, payload->shape);
}

TEST(TensorPayloadTest, IncompressibleDataStaysRaw) {
  std::mt19937 rng(1);
  std::string random(4096, '\0');
  for (char& c : random) c = static_cast<char>(rng());
  auto payload = MakePayload(DType::kUint8, {4096}, random);
  ASSERT_OK(payload);
  auto compressed = Compress(*payload, 3);
  ASSERT_OK(compressed);
  EXPECT_EQ(compressed->compression, Compression::kNone);
  EXPECT_EQ(compressed->data, random);
}

TEST(TensorPayloadTest, CorruptCompressedDataIsDataLoss) {
  auto payload = MakePayload(DType::kUint8, {10000}, Bytes(10000, 1));
  auto compressed = Compress(*payload, 1);
  ASSERT_OK(compressed);
  TensorPayload truncated = *compressed;
  truncated.data.resize(truncated.data.size() / 2);
  EXPECT_EQ(Decompress(truncated).status().code(), absl::StatusCode::kDataLoss);
  TensorPayload wrong_size = *compressed;
  wrong_size.uncompressed_size = 5;
  EXPECT_EQ(Decompress(wrong_size).status().code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(Compress(*payload, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TensorPayloadTest, SliceAndConcatRows) {
  std::string data;
  for (int32_t i = 0; i < 12; ++i) data.append(reinterpret_cast<char*>(&i), 4);
  auto payload = MakePayload(DType::kInt32, {4, 3}, data);
  ASSERT_OK(payload);
  auto middle = SliceRows(*payload, 1, 2);
  ASSERT_OK(middle);
  EXPECT_EQ(middle->shape, (Shape{2, 3}));
  int32_t first;
  std::memcpy(&first, middle->data.data(), 4);
  EXPECT_EQ(first, 3);
  auto head = SliceRows(*payload, 0, 1);
  auto tail = SliceRows(*payload, 3, 1);
  TensorPayload parts[] = {*head, *middle, *tail};
  auto joined = ConcatRows(parts);
  ASSERT_OK(joined);
  EXPECT_EQ(joined->data, data);
  EXPECT_EQ(joined->shape, (Shape{4, 3}));
  EXPECT_EQ(SliceRows(*payload, 3, 2).status().code(),
            absl::StatusCode::kOutOfRange);
  auto other = MakePayload(DType::kInt32, {1, 2}, Bytes(8, 0));
  TensorPayload mismatched[] = {*head, *other};
  EXPECT_EQ(ConcatRows(mismatched).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TensorPayloadTest, SliceStrings) {
  std::vector<std::string> in = {"ab", "c", "def", "g", "", "hij"};
  auto payload = MakeStringPayload({3, 2}, in);
  auto slice = SliceRows(*payload, 1, 2);
  ASSERT_OK(slice);
  auto out = DecodeStrings(*slice);
  ASSERT_OK(out);
  EXPECT_EQ(*out, (std::vector<std::string>{"def", "g", "", "hij"}));
}

// A zstd frame header declaring `content_size` bytes (8-byte size field,
// single segment) followed by one last raw block holding `block`.
std::string ZstdFrame(uint64_t content_size, const std::string& block,
                      uint32_t declared_block_size) {
  std::string frame("\x28\xb5\x2f\xfd", 4);  // magic, little endian
  frame.push_back(
      static_cast<char>(0xE0));  // 8-byte content size, single segment
  for (int i = 0; i < 8; ++i)
    frame.push_back(static_cast<char>(content_size >> (8 * i)));
  const uint32_t block_header = (declared_block_size << 3) | 1;  // raw, last
  for (int i = 0; i < 3; ++i)
    frame.push_back(static_cast<char>(block_header >> (8 * i)));
  return frame + block;
}

TensorPayload Compressed(DType dtype, Shape shape, int64_t declared,
                         std::string data) {
  TensorPayload p;
  p.dtype = dtype;
  p.shape = std::move(shape);
  p.compression = Compression::kZstd;
  p.uncompressed_size = declared;
  p.data = std::move(data);
  return p;
}

TEST(TensorPayloadTest, FrameClaimingATebibyteIsRejectedBeforeAllocating) {
  // The poison chunk of issue 14: float32[3, 2] whose frame declares 2^40
  // bytes.
  const int64_t tib = int64_t{1} << 40;
  TensorPayload poison =
      Compressed(DType::kFloat, {3, 2}, tib, ZstdFrame(tib, "", 0));
  EXPECT_EQ(poison.Validate().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(VerifyCompressed(poison).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Decompress(poison).status().code(), absl::StatusCode::kDataLoss);
  // Declaring the right size in the payload but 2^40 in the frame: same.
  poison.uncompressed_size = 24;
  EXPECT_EQ(poison.Validate().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Decompress(poison).status().code(), absl::StatusCode::kDataLoss);
}

TEST(TensorPayloadTest,
     FrameThatDoesNotDecodeToItsDeclaredSizeFailsVerification) {
  // Header and payload agree on 24 bytes; the block holds 10.
  TensorPayload short_frame =
      Compressed(DType::kFloat, {3, 2}, 24, ZstdFrame(24, Bytes(10, 7), 10));
  EXPECT_OK(short_frame.Validate());
  EXPECT_EQ(VerifyCompressed(short_frame).code(),
            absl::StatusCode::kInvalidArgument);
  // A block that claims more bytes than the frame carries (truncated input).
  TensorPayload truncated =
      Compressed(DType::kFloat, {3, 2}, 24, ZstdFrame(24, Bytes(10, 7), 24));
  EXPECT_EQ(VerifyCompressed(truncated).code(),
            absl::StatusCode::kInvalidArgument);
  // Garbage that is not a frame at all.
  TensorPayload garbage =
      Compressed(DType::kFloat, {3, 2}, 24, Bytes(21, 0xAB));
  EXPECT_EQ(garbage.Validate().code(), absl::StatusCode::kInvalidArgument);
  // Trailing bytes after a complete frame.
  auto good = Compress(*MakePayload(DType::kFloat, {64}, Bytes(256, 1)), 3);
  ASSERT_OK(good);
  ASSERT_EQ(good->compression, Compression::kZstd);
  EXPECT_OK(VerifyCompressed(*good));
  TensorPayload trailing = *good;
  trailing.data += "xyz";
  EXPECT_FALSE(VerifyCompressed(trailing).ok());
}

TEST(TensorPayloadTest, CompressedStringsAreVerifiedWhole) {
  auto strings =
      MakeStringPayload({64}, std::vector<std::string>(64, "abcabcabc"));
  ASSERT_OK(strings);
  auto compressed = Compress(*strings, 3);
  ASSERT_OK(compressed);
  ASSERT_EQ(compressed->compression, Compression::kZstd);
  EXPECT_OK(VerifyCompressed(*compressed));
  TensorPayload wrong_count = *compressed;
  wrong_count.shape = {65};
  EXPECT_FALSE(VerifyCompressed(wrong_count).ok());
}

TEST(TensorPayloadTest, ShapesWhoseSizeOverflowsOrIsHugeAreRejected) {
  TensorPayload overflow;
  overflow.dtype = DType::kFloat;
  overflow.shape = {1, int64_t{1} << 32, int64_t{1} << 32};
  EXPECT_EQ(overflow.Validate().code(), absl::StatusCode::kInvalidArgument);
  overflow.shape = {int64_t{1} << 62, 4};
  EXPECT_EQ(overflow.Validate().code(), absl::StatusCode::kInvalidArgument);
  TensorPayload huge;  // representable, but beyond kMaxPayloadBytes
  huge.dtype = DType::kUint8;
  huge.shape = {kMaxPayloadBytes + 1};
  EXPECT_EQ(huge.Validate().code(), absl::StatusCode::kInvalidArgument);
  TensorPayload empty;  // a zero dimension makes any other dimension fine
  empty.dtype = DType::kDouble;
  empty.shape = {0, int64_t{1} << 62};
  EXPECT_OK(empty.Validate());
  TensorPayload negative_size;
  negative_size.dtype = DType::kUint8;
  negative_size.shape = {0};
  negative_size.uncompressed_size = -1;
  EXPECT_EQ(negative_size.Validate().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace reverb_tf
