// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/client/sample_batch.h"

#include <cstring>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reverb_tf/cc/testing/status_matchers.h"

namespace reverb_tf {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Hands out prepared samples, then `end` (OUT_OF_RANGE unless told otherwise).
// Every other one is "already received" (TryNext), so both paths are used.
class FakeSampler : public Sampler {
 public:
  FakeSampler(std::vector<Sample> samples, absl::Status end)
      : samples_(samples.begin(), samples.end()), end_(std::move(end)) {}

  absl::Status Next(Sample* sample) override {
    ++next_calls;
    if (samples_.empty()) return end_;
    *sample = std::move(samples_.front());
    samples_.pop_front();
    return absl::OkStatus();
  }
  bool TryNext(Sample* sample) override {
    if (samples_.empty() || (try_calls++ % 2 == 0)) return false;
    *sample = std::move(samples_.front());
    samples_.pop_front();
    return true;
  }
  void Cancel() override {}

  int next_calls = 0;
  int try_calls = 0;

 private:
  std::deque<Sample> samples_;
  absl::Status end_;
};

Sample FloatSample(uint64_t key, std::vector<float> values, Shape shape) {
  Sample sample;
  sample.info.key = key;
  sample.info.probability = 0.25;
  std::string bytes(values.size() * sizeof(float), '\0');
  std::memcpy(bytes.data(), values.data(), bytes.size());
  sample.columns.push_back(*MakePayload(DType::kFloat, shape, bytes));
  const std::string text = absl::StrCat("item", key);
  sample.columns.push_back(*MakeStringPayload({}, {text}));
  sample.squeezed = {false, true};
  return sample;
}

TEST(NextStackedBatchTest, StacksColumnsRowByRow) {
  FakeSampler sampler({FloatSample(1, {1, 2}, {2}), FloatSample(2, {3, 4}, {2}),
                       FloatSample(3, {5, 6}, {2})},
                      absl::OutOfRangeError("done"));
  StackedBatch batch;
  ASSERT_OK(NextStackedBatch(&sampler, 3, &batch));
  ASSERT_EQ(batch.size(), 3);
  EXPECT_EQ(batch.infos[2].key, 3u);
  ASSERT_EQ(batch.columns.size(), 2u);
  EXPECT_EQ(batch.columns[0].dtype, DType::kFloat);
  EXPECT_THAT(batch.columns[0].shape, ElementsAre(3, 2));
  EXPECT_FALSE(batch.columns[0].squeezed);
  std::vector<float> values(6);
  ASSERT_EQ(batch.columns[0].data.size(), values.size() * sizeof(float));
  std::memcpy(values.data(), batch.columns[0].data.data(),
              batch.columns[0].data.size());
  EXPECT_THAT(values, ElementsAre(1, 2, 3, 4, 5, 6));
  EXPECT_EQ(batch.columns[1].dtype, DType::kString);
  EXPECT_THAT(batch.columns[1].shape, ElementsAre(3));
  EXPECT_TRUE(batch.columns[1].squeezed);
  EXPECT_THAT(batch.columns[1].strings, ElementsAre("item1", "item2", "item3"));
}

TEST(NextStackedBatchTest, ShortLastBatchThenEmpty) {
  FakeSampler sampler({FloatSample(1, {1}, {1}), FloatSample(2, {2}, {1})},
                      absl::OutOfRangeError("max_samples"));
  StackedBatch batch;
  absl::Status status = NextStackedBatch(&sampler, 4, &batch);
  EXPECT_TRUE(absl::IsOutOfRange(status)) << status;
  EXPECT_EQ(batch.size(), 2);
  EXPECT_THAT(batch.columns[0].shape, ElementsAre(2, 1));
  status = NextStackedBatch(&sampler, 4, &batch);
  EXPECT_TRUE(absl::IsOutOfRange(status)) << status;
  EXPECT_EQ(batch.size(), 0);
  EXPECT_TRUE(batch.columns.empty());
}

TEST(NextStackedBatchTest, SamplerErrorsPassThrough) {
  FakeSampler sampler({FloatSample(1, {1}, {1})},
                      absl::DeadlineExceededError("limiter"));
  StackedBatch batch;
  const absl::Status status = NextStackedBatch(&sampler, 2, &batch);
  EXPECT_TRUE(absl::IsDeadlineExceeded(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr("limiter"));
}

TEST(NextStackedBatchTest, DifferentShapesNameTheColumnAndBothShapes) {
  FakeSampler sampler(
      {FloatSample(1, {1, 2}, {2}), FloatSample(2, {1, 2, 3}, {3})},
      absl::OutOfRangeError("done"));
  StackedBatch batch;
  const absl::Status status = NextStackedBatch(&sampler, 2, &batch);
  ASSERT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr("cannot batch column 0"));
  EXPECT_THAT(status.message(), HasSubstr("[2]"));
  EXPECT_THAT(status.message(), HasSubstr("[3]"));
}

TEST(NextStackedBatchTest, RejectsNonPositiveBatchSize) {
  FakeSampler sampler({}, absl::OutOfRangeError("done"));
  StackedBatch batch;
  EXPECT_TRUE(absl::IsInvalidArgument(NextStackedBatch(&sampler, 0, &batch)));
  EXPECT_EQ(sampler.next_calls, 0);
}

TEST(NextStackedBatchTest, RefusesABatchLargerThanThePayloadBound) {
  Sample big;
  big.columns.push_back(
      *MakePayload(DType::kUint8, {1 << 20}, std::string(1 << 20, 'x')));
  big.squeezed = {false};
  FakeSampler sampler({big}, absl::OutOfRangeError("done"));
  StackedBatch batch;
  const absl::Status status = NextStackedBatch(&sampler, 1 << 20, &batch);
  EXPECT_TRUE(absl::IsResourceExhausted(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr("smaller batch"));
}

}  // namespace
}  // namespace reverb_tf
