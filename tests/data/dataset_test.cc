#include "data/dataset.h"

#include <gtest/gtest.h>

#include <cmath>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

namespace cumulus::data {
namespace {

constexpr const char* kFashionDir = "/usr/share/datasets/fashion-mnist";

struct Expected {
  int64_t size;
  int64_t first_image_byte_sum;
  int64_t all_bytes_sum;
  int64_t index_weighted_label_sum;  // sum of i * label[i]: pins the order, not just the counts
  int64_t per_class;
};

void checkFashion(Split split, const Expected& want) {
  if (!std::filesystem::exists(kFashionDir)) GTEST_SKIP() << kFashionDir << " is absent";
  const auto start = std::chrono::steady_clock::now();
  const TensorDataset d = loadMnistLike(kFashionDir, split);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("loaded %ld Fashion-MNIST images in %.3f s\n", static_cast<long>(d.size()), seconds);
  ASSERT_EQ(d.size(), want.size);
  EXPECT_EQ(d.inputs.sizes(), torch::IntArrayRef({want.size, 1, 28, 28}));
  EXPECT_TRUE(d.inputs.is_contiguous());
  const torch::Tensor bytes = d.inputs.mul(255.0).round_().to(torch::kInt64);
  EXPECT_EQ(bytes[0].sum().item<int64_t>(), want.first_image_byte_sum);
  EXPECT_EQ(bytes.sum().item<int64_t>(), want.all_bytes_sum);
  EXPECT_EQ((d.targets * torch::arange(want.size, torch::kInt64)).sum().item<int64_t>(),
            want.index_weighted_label_sum);
  const torch::Tensor histogram = torch::bincount(d.targets, {}, 10);
  EXPECT_TRUE(torch::equal(histogram, torch::full({10}, want.per_class, torch::kInt64)))
      << histogram;
  EXPECT_LT(seconds, 10.0);  // generous: well under 1 s unloaded
}

// Reference numbers computed once with Python's gzip module from the same files.
TEST(FashionMnistTest, Train) {
  checkFashion(Split::kTrain, {60000, 76247, 3431114169, 8087216427, 6000});
}

TEST(FashionMnistTest, Test) {
  checkFashion(Split::kTest, {10000, 33456, 573469082, 225732341, 1000});
}

TEST(FashionMnistTest, Normalization) {
  if (!std::filesystem::exists(kFashionDir)) GTEST_SKIP() << kFashionDir << " is absent";
  TensorDataset d = loadMnistLike(kFashionDir, Split::kTrain);
  const Normalization norm = computeNormalization(d);
  EXPECT_NEAR(norm.mean, 0.2860405969887955, 1e-7);
  EXPECT_NEAR(norm.std, 0.35302424451492254, 1e-7);
  applyNormalization(d, norm);
  EXPECT_NEAR(d.inputs.mean().item<double>(), 0.0, 1e-4);
  EXPECT_NEAR(d.inputs.std(false).item<double>(), 1.0, 1e-4);
}

// The one-pass path the trainer uses (bytes, histogram statistics, table lookup) gives the very
// tensor of the two-pass path (floats, serial statistics, subtract and divide).
TEST(FashionMnistTest, BytePathIsBitIdenticalToTheFloatPath) {
  if (!std::filesystem::exists(kFashionDir)) GTEST_SKIP() << kFashionDir << " is absent";
  TensorDataset floats = loadMnistLike(kFashionDir, Split::kTrain);
  const Normalization two_pass = computeNormalization(floats);
  applyNormalization(floats, two_pass);
  const ByteImages bytes = loadMnistLikeBytes(kFashionDir, Split::kTrain);
  const Normalization one_pass = normalizationOfBytes(bytes.pixels);
  EXPECT_NEAR(one_pass.mean, two_pass.mean, 1e-9);
  EXPECT_NEAR(one_pass.std, two_pass.std, 1e-9);
  const TensorDataset fast = toFloatImages(bytes, one_pass);
  EXPECT_TRUE(torch::equal(fast.inputs, floats.inputs));
  EXPECT_TRUE(torch::equal(fast.targets, floats.targets));
}

TEST(NormalizationTest, BytesGiveExactStatisticsAndTheSameFloats) {
  // 1000 bytes: 0 ... 255 cycling, so the mean and std of byte/255 are known in closed form.
  ByteImages bytes;
  bytes.pixels =
      torch::arange(1000, torch::kInt64).remainder(256).to(torch::kUInt8).view({10, 1, 10, 10});
  bytes.targets = torch::zeros({10}, torch::kInt64);
  double sum = 0, sum_sq = 0;
  for (int i = 0; i < 1000; ++i) {
    const double v = static_cast<float>(i % 256) / 255.0f;
    sum += v;
    sum_sq += v * v;
  }
  const Normalization norm = normalizationOfBytes(bytes.pixels);
  EXPECT_NEAR(norm.mean, sum / 1000, 1e-15);
  EXPECT_NEAR(norm.std, std::sqrt(sum_sq / 1000 - (sum / 1000) * (sum / 1000)), 1e-15);
  TensorDataset two_pass{bytes.pixels.to(torch::kFloat32).div_(255.0f), bytes.targets};
  EXPECT_TRUE(torch::equal(toFloatImages(bytes, std::nullopt).inputs, two_pass.inputs));
  applyNormalization(two_pass, norm);
  EXPECT_TRUE(torch::equal(toFloatImages(bytes, norm).inputs, two_pass.inputs));
  EXPECT_THROW(normalizationOfBytes(torch::empty({0}, torch::kUInt8)), std::invalid_argument);
}

TEST(SyntheticTest, SameSeedIsBitIdentical) {
  const TensorDataset a = makeSynthetic(300, 17);
  const TensorDataset b = makeSynthetic(300, 17);
  EXPECT_TRUE(torch::equal(a.inputs, b.inputs));
  EXPECT_TRUE(torch::equal(a.targets, b.targets));
  const TensorDataset c = makeSynthetic(300, 18);
  EXPECT_FALSE(torch::equal(a.inputs, c.inputs));
  // A prefix of a larger set is the smaller set: sample i depends only on (seed, i).
  const TensorDataset big = makeSynthetic(500, 17);
  EXPECT_TRUE(torch::equal(big.inputs.slice(0, 0, 300), a.inputs));
}

// Pins the generator: changing it would silently change every synthetic experiment.
TEST(SyntheticTest, Pinned) {
  const TensorDataset d = makeSynthetic(64, 1);
  EXPECT_EQ(d.inputs.sizes(), torch::IntArrayRef({64, 1, 28, 28}));
  EXPECT_EQ(d.inputs.scalar_type(), torch::kFloat32);
  EXPECT_EQ(d.targets.sum().item<int64_t>(), 279);
  // Scaling by 2^20 is exact and truncation to integers is too, so the sum is exact.
  EXPECT_EQ(d.inputs.mul(1 << 20).to(torch::kInt64).sum().item<int64_t>(), 9589250451);
  EXPECT_GE(d.inputs.min().item<float>(), 0.0f);
  EXPECT_LE(d.inputs.max().item<float>(), 1.0f);
}

// Learnable: class means from one seed classify another seed's samples well; with 10 classes,
// chance is 10%.
TEST(SyntheticTest, NearestClassMeanClassifies) {
  const TensorDataset train = makeSynthetic(2000, 1);
  const TensorDataset test = makeSynthetic(1000, 2);
  const torch::Tensor x = train.inputs.flatten(1);
  std::vector<torch::Tensor> means;
  for (int64_t c = 0; c < 10; ++c) {
    const torch::Tensor rows = x.index({train.targets == c});
    ASSERT_GT(rows.size(0), 100) << "class " << c;
    means.push_back(rows.mean(0));
  }
  const torch::Tensor predicted =
      torch::cdist(test.inputs.flatten(1), torch::stack(means)).argmin(1);
  const double accuracy = predicted.eq(test.targets).to(torch::kFloat64).mean().item<double>();
  std::printf("nearest-class-mean accuracy %.3f\n", accuracy);
  EXPECT_GT(accuracy, 0.8);
  EXPECT_LT(accuracy, 1.0);  // noisy enough that a model has something to learn
}

TEST(SyntheticTest, Validates) {
  EXPECT_THROW(makeSynthetic(0, 1), std::invalid_argument);
  EXPECT_THROW(makeSynthetic(10, 1, 0), std::invalid_argument);
  EXPECT_EQ(makeSynthetic(100, 3, 2).targets.max().item<int64_t>(), 1);
}

TEST(NormalizationTest, ComputesPopulationMeanAndStd) {
  TensorDataset d;
  d.inputs = torch::tensor({0.0f, 1.0f, 2.0f, 3.0f}).reshape({2, 1, 1, 2});
  d.targets = torch::zeros({2}, torch::kInt64);
  const Normalization norm = computeNormalization(d);
  EXPECT_DOUBLE_EQ(norm.mean, 1.5);
  EXPECT_DOUBLE_EQ(norm.std, std::sqrt(1.25));
  applyNormalization(d, norm);
  EXPECT_FLOAT_EQ(d.inputs[1][0][0][1].item<float>(), static_cast<float>(1.5 / std::sqrt(1.25)));
  EXPECT_THROW(applyNormalization(d, {0.0, 0.0}), std::invalid_argument);
}

TEST(GatherTest, SelectsRowsContiguously) {
  const TensorDataset d = makeSynthetic(50, 9);
  const Batch b = gather(d, {7, 3, 7});
  EXPECT_EQ(b.inputs.sizes(), torch::IntArrayRef({3, 1, 28, 28}));
  EXPECT_TRUE(b.inputs.is_contiguous());
  EXPECT_TRUE(torch::equal(b.inputs[0], d.inputs[7]));
  EXPECT_TRUE(torch::equal(b.inputs[1], d.inputs[3]));
  EXPECT_EQ(b.targets[2].item<int64_t>(), d.targets[7].item<int64_t>());
  EXPECT_EQ(gather(d, {}).inputs.size(0), 0);
  try {
    gather(d, {1, 50});
    FAIL() << "no exception";
  } catch (const std::out_of_range& e) {
    EXPECT_STREQ(e.what(), "gather: index 50 is out of range for a dataset of 50 samples");
  }
}

}  // namespace
}  // namespace cumulus::data
