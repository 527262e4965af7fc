// Synthetic data, normalization and batch gathering.
#include "data/dataset.h"

#include "data/random.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <string>

namespace cumulus::data {
namespace {

constexpr int64_t kSide = 28;
constexpr int64_t kPixels = kSide * kSide;
// Templates do not depend on the dataset seed: a train set and a test set made with different
// seeds must pose the same task.
constexpr uint64_t kTemplateSeed = 0x43554D554C5553ULL;  // "CUMULUS"

// One class's template: three bumps 1 - d^2/r^2 at random places, clipped to [0, 1]. Only +, *
// and / of floats, so the result is identical wherever IEEE float32 is (no libm calls).
void drawTemplate(int64_t cls, float* out) {
  SplitMix64 rng(streamKey(kTemplateSeed, static_cast<uint64_t>(cls)));
  std::fill(out, out + kPixels, 0.0f);
  for (int blob = 0; blob < 3; ++blob) {
    const float cy = 5.0f + 18.0f * rng.uniform();
    const float cx = 5.0f + 18.0f * rng.uniform();
    const float r = 3.0f + 5.0f * rng.uniform();
    for (int64_t y = 0; y < kSide; ++y) {
      for (int64_t x = 0; x < kSide; ++x) {
        const float dy = static_cast<float>(y) - cy;
        const float dx = static_cast<float>(x) - cx;
        const float v = 1.0f - (dy * dy + dx * dx) / (r * r);
        float& p = out[y * kSide + x];
        p = std::min(1.0f, p + std::max(0.0f, v));
      }
    }
  }
}

}  // namespace

TensorDataset makeSynthetic(int64_t n, uint64_t seed, int64_t num_classes) {
  if (n <= 0)
    throw std::invalid_argument("synthetic dataset: size must be positive, got " +
                                std::to_string(n));
  if (num_classes <= 0) {
    throw std::invalid_argument("synthetic dataset: num_classes must be positive, got " +
                                std::to_string(num_classes));
  }
  std::vector<float> templates(static_cast<size_t>(num_classes * kPixels));
  for (int64_t c = 0; c < num_classes; ++c) drawTemplate(c, &templates[c * kPixels]);

  TensorDataset out;
  out.inputs = torch::empty({n, 1, kSide, kSide}, torch::kFloat32);
  out.targets = torch::empty({n}, torch::kInt64);
  float* images = out.inputs.data_ptr<float>();
  int64_t* labels = out.targets.data_ptr<int64_t>();
  // Sample i draws from its own stream, so the output is independent of the thread count.
  at::parallel_for(0, n, 256, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      SplitMix64 rng(streamKey(seed, static_cast<uint64_t>(i)));
      const int64_t label = static_cast<int64_t>(rng.below(static_cast<uint64_t>(num_classes)));
      labels[i] = label;
      // A shifted (up to 2 pixels each way), dimmed copy of the template plus triangular noise.
      const auto dy = static_cast<int64_t>(rng.below(5)) - 2;
      const auto dx = static_cast<int64_t>(rng.below(5)) - 2;
      const float gain = 0.6f + 0.4f * rng.uniform();
      const float* t = &templates[label * kPixels];
      float* img = images + i * kPixels;
      for (int64_t y = 0; y < kSide; ++y) {
        for (int64_t x = 0; x < kSide; ++x) {
          const int64_t sy = y - dy;
          const int64_t sx = x - dx;
          const bool inside = sy >= 0 && sy < kSide && sx >= 0 && sx < kSide;
          const float base = inside ? gain * t[sy * kSide + sx] : 0.0f;
          // Two 24-bit uniforms from one draw: triangular noise on [-0.35, 0.35].
          const uint64_t r = rng.next();
          const float u1 = static_cast<float>(static_cast<int32_t>(r >> 40)) * (1.0f / 16777216.0f);
          const float u2 =
              static_cast<float>(static_cast<int32_t>((r >> 16) & 0xFFFFFF)) * (1.0f / 16777216.0f);
          const float noise = 0.35f * (u1 + u2 - 1.0f);
          img[y * kSide + x] = std::min(1.0f, std::max(0.0f, base + noise));
        }
      }
    }
  });
  return out;
}

// Summed in double, serially, in index order: the result is the same for every thread count and
// so on every rank, whatever its OMP_NUM_THREADS.
Normalization computeNormalization(const TensorDataset& train) {
  if (!train.inputs.defined() || train.inputs.numel() == 0) {
    throw std::invalid_argument("normalization: the training images are empty");
  }
  const torch::Tensor images = train.inputs.to(torch::kFloat32).contiguous();
  const float* p = images.data_ptr<float>();
  const int64_t count = images.numel();
  double sum = 0.0;
  double sum_sq = 0.0;
  for (int64_t i = 0; i < count; ++i) {
    sum += p[i];
    sum_sq += static_cast<double>(p[i]) * p[i];
  }
  Normalization norm;
  norm.mean = sum / static_cast<double>(count);
  norm.std = std::sqrt(std::max(0.0, sum_sq / static_cast<double>(count) - norm.mean * norm.mean));
  return norm;
}

void applyNormalization(TensorDataset& dataset, const Normalization& norm) {
  if (!(norm.std > 0.0) || !std::isfinite(norm.std) || !std::isfinite(norm.mean)) {
    throw std::invalid_argument("normalization: std must be positive and finite, got mean " +
                                std::to_string(norm.mean) + " std " + std::to_string(norm.std));
  }
  dataset.inputs.sub_(norm.mean).div_(norm.std);
}

namespace {

// The float each byte value 0..255 becomes: byte / 255 with the very tensor ops of the two-pass
// path (loadMnistLike), so the table and the statistics see the same bits.
torch::Tensor byteValues() {
  return torch::arange(256, torch::kInt64).to(torch::kUInt8).to(torch::kFloat32).div_(255.0f);
}

}  // namespace

Normalization normalizationOfBytes(const torch::Tensor& pixels) {
  if (!pixels.defined() || pixels.numel() == 0) {
    throw std::invalid_argument("normalization: the training images are empty");
  }
  const torch::Tensor bytes = pixels.contiguous();
  const uint8_t* p = bytes.data_ptr<uint8_t>();
  const int64_t count = bytes.numel();
  // Four partial histograms, so consecutive equal bytes do not wait on one counter.
  std::array<std::array<int64_t, 256>, 4> partial{};
  int64_t i = 0;
  for (; i + 4 <= count; i += 4) {
    ++partial[0][p[i]];
    ++partial[1][p[i + 1]];
    ++partial[2][p[i + 2]];
    ++partial[3][p[i + 3]];
  }
  for (; i < count; ++i) ++partial[0][p[i]];
  std::array<int64_t, 256> histogram{};
  for (const auto& h : partial) {
    for (int b = 0; b < 256; ++b) histogram[b] += h[b];
  }
  const torch::Tensor values = byteValues();
  const float* v = values.data_ptr<float>();
  double sum = 0.0;
  double sum_sq = 0.0;
  for (int b = 0; b < 256; ++b) {
    const auto n = static_cast<double>(histogram[b]);
    sum += n * v[b];
    sum_sq += n * static_cast<double>(v[b]) * v[b];
  }
  Normalization norm;
  norm.mean = sum / static_cast<double>(count);
  norm.std = std::sqrt(std::max(0.0, sum_sq / static_cast<double>(count) - norm.mean * norm.mean));
  return norm;
}

TensorDataset toFloatImages(const ByteImages& bytes, const std::optional<Normalization>& norm) {
  TensorDataset table_set;
  table_set.inputs = byteValues();
  if (norm) applyNormalization(table_set, *norm);
  const float* table = table_set.inputs.data_ptr<float>();
  const torch::Tensor pixels = bytes.pixels.contiguous();
  TensorDataset out;
  out.inputs = torch::empty(pixels.sizes(), torch::kFloat32);
  const uint8_t* in = pixels.data_ptr<uint8_t>();
  float* images = out.inputs.data_ptr<float>();
  const int64_t count = pixels.numel();
  for (int64_t i = 0; i < count; ++i) images[i] = table[in[i]];
  out.targets = bytes.targets;
  return out;
}

Batch gather(const TensorDataset& dataset, const std::vector<int64_t>& indices) {
  const int64_t n = dataset.size();
  for (const int64_t i : indices) {
    if (i < 0 || i >= n) {
      throw std::out_of_range("gather: index " + std::to_string(i) + " is out of range for a " +
                              "dataset of " + std::to_string(n) + " samples");
    }
  }
  const torch::Tensor index = torch::from_blob(
      const_cast<int64_t*>(indices.data()), {static_cast<int64_t>(indices.size())}, torch::kInt64);
  return {dataset.inputs.index_select(0, index), dataset.targets.index_select(0, index)};
}

Batch Examples::slice(int64_t begin, int64_t count) const {
  std::vector<int64_t> indices(static_cast<size_t>(std::max<int64_t>(0, count)));
  for (size_t i = 0; i < indices.size(); ++i) indices[i] = begin + static_cast<int64_t>(i);
  return gather(indices);
}

namespace {

class InMemoryExamples final : public Examples {
 public:
  InMemoryExamples(TensorDataset dataset, std::string description)
      : dataset_(std::move(dataset)), description_(std::move(description)) {}
  int64_t size() const override { return dataset_.size(); }
  Batch gather(const std::vector<int64_t>& indices) const override {
    return data::gather(dataset_, indices);
  }
  Batch slice(int64_t begin, int64_t count) const override {
    if (begin < 0 || count < 0 || begin + count > size()) {
      throw std::out_of_range("slice: samples [" + std::to_string(begin) + ", " +
                              std::to_string(begin + count) + ") are out of range for a " +
                              "dataset of " + std::to_string(size()) + " samples");
    }
    return {dataset_.inputs.narrow(0, begin, count).clone(),
            dataset_.targets.narrow(0, begin, count).clone()};
  }
  std::string describe() const override { return description_; }

 private:
  TensorDataset dataset_;
  std::string description_;
};

}  // namespace

std::shared_ptr<const Examples> inMemory(const TensorDataset& dataset, std::string description) {
  return std::make_shared<InMemoryExamples>(dataset, std::move(description));
}

}  // namespace cumulus::data
