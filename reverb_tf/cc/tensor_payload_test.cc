#include "reverb_tf/cc/tensor_payload.h"

#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace reverb_tf {
namespace {

std::string Bytes(size_t n, uint8_t fill) { return std::string(n, static_cast<char>(fill)); }

TEST(TensorPayloadTest, MakePayloadChecksByteCount) {
  EXPECT_TRUE(MakePayload(DType::kFloat, {2, 3}, Bytes(24, 0)).ok());
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
  ASSERT_TRUE(payload.ok());
  ASSERT_TRUE(payload->Validate().ok());
  auto out = DecodeStrings(*payload);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*out, in);
  EXPECT_FALSE(MakeStringPayload({3}, in).ok());
}

TEST(TensorPayloadTest, MalformedStringPayloadIsAnError) {
  auto payload = MakeStringPayload({1}, std::vector<std::string>{"hello"});
  ASSERT_TRUE(payload.ok());
  payload->data.pop_back();
  payload->uncompressed_size = payload->data.size();
  EXPECT_EQ(payload->Validate().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TensorPayloadTest, ZstdRoundTripShrinksCompressibleData) {
  auto payload = MakePayload(DType::kUint8, {1000, 84}, Bytes(84000, 7));
  ASSERT_TRUE(payload.ok());
  auto compressed = Compress(*payload, 3);
  ASSERT_TRUE(compressed.ok());
  EXPECT_EQ(compressed->compression, Compression::kZstd);
  EXPECT_LT(compressed->data.size(), 1000u);
  auto restored = Decompress(*compressed);
  ASSERT_TRUE(restored.ok());
  EXPECT_EQ(restored->compression, Compression::kNone);
  EXPECT_EQ(restored->data, payload->data);
  EXPECT_EQ(restored->shape, payload->shape);
}

TEST(TensorPayloadTest, IncompressibleDataStaysRaw) {
  std::mt19937 rng(1);
  std::string random(4096, '\0');
  for (char& c : random) c = static_cast<char>(rng());
  auto payload = MakePayload(DType::kUint8, {4096}, random);
  ASSERT_TRUE(payload.ok());
  auto compressed = Compress(*payload, 3);
  ASSERT_TRUE(compressed.ok());
  EXPECT_EQ(compressed->compression, Compression::kNone);
  EXPECT_EQ(compressed->data, random);
}

TEST(TensorPayloadTest, CorruptCompressedDataIsDataLoss) {
  auto payload = MakePayload(DType::kUint8, {10000}, Bytes(10000, 1));
  auto compressed = Compress(*payload, 1);
  ASSERT_TRUE(compressed.ok());
  TensorPayload truncated = *compressed;
  truncated.data.resize(truncated.data.size() / 2);
  EXPECT_EQ(Decompress(truncated).status().code(), absl::StatusCode::kDataLoss);
  TensorPayload wrong_size = *compressed;
  wrong_size.uncompressed_size = 5;
  EXPECT_EQ(Decompress(wrong_size).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(Compress(*payload, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TensorPayloadTest, SliceAndConcatRows) {
  std::string data;
  for (int32_t i = 0; i < 12; ++i) data.append(reinterpret_cast<char*>(&i), 4);
  auto payload = MakePayload(DType::kInt32, {4, 3}, data);
  ASSERT_TRUE(payload.ok());
  auto middle = SliceRows(*payload, 1, 2);
  ASSERT_TRUE(middle.ok());
  EXPECT_EQ(middle->shape, (Shape{2, 3}));
  int32_t first;
  std::memcpy(&first, middle->data.data(), 4);
  EXPECT_EQ(first, 3);
  auto head = SliceRows(*payload, 0, 1);
  auto tail = SliceRows(*payload, 3, 1);
  TensorPayload parts[] = {*head, *middle, *tail};
  auto joined = ConcatRows(parts);
  ASSERT_TRUE(joined.ok());
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
  ASSERT_TRUE(slice.ok());
  auto out = DecodeStrings(*slice);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*out, (std::vector<std::string>{"def", "g", "", "hij"}));
}

}  // namespace
}  // namespace reverb_tf
