#include "trainer/datasets.h"

#include <torch/types.h>

#include <optional>
#include <stdexcept>

#include "data/dataset.h"
#include "data/npy.h"

namespace cumulus::trainer {
namespace {

// data.dataset from data.dir (or generated), in memory.
Datasets loadIdx(const configs::DataConfig& config, uint64_t seed, const std::string& cache_dir) {
  data::TensorDataset train, test;
  const bool synthetic = config.dataset == configs::Dataset::kSynthetic;
  if (synthetic) {
    // One draw split in two, so train and test share the class patterns.
    const int64_t n_train = config.synthetic_train_samples;
    const int64_t n_test = config.synthetic_test_samples;
    // The schema caps both; a config built in code is not read through it.
    int64_t n_all = 0;
    if (__builtin_add_overflow(n_train, n_test, &n_all)) {
      throw data::DataError(
          "data.synthetic_train_samples + data.synthetic_test_samples: " + std::to_string(n_train) +
          " + " + std::to_string(n_test) + " samples is more than a 64-bit count holds");
    }
    const data::TensorDataset all = data::makeSynthetic(n_all, seed);
    train = {all.inputs.narrow(0, 0, n_train).contiguous(),
             all.targets.narrow(0, 0, n_train).contiguous()};
    test = {all.inputs.narrow(0, n_train, n_test).contiguous(),
            all.targets.narrow(0, n_train, n_test).contiguous()};
    if (config.normalize) {
      const data::Normalization norm = data::computeNormalization(train);
      data::applyNormalization(train, norm);
      data::applyNormalization(test, norm);
    }
  } else {  // fashion-mnist or mnist: the same IDX layout
    // Bytes first: the statistics come from a histogram and the floats from one table lookup
    // per pixel, the same bits as converting and normalizing in two passes, in a third the time.
    const data::ByteImages train_bytes =
        data::loadMnistLikeBytes(config.dir, data::Split::kTrain, cache_dir);
    const data::ByteImages test_bytes =
        data::loadMnistLikeBytes(config.dir, data::Split::kTest, cache_dir);
    std::optional<data::Normalization> norm;
    if (config.normalize) norm = data::normalizationOfBytes(train_bytes.pixels);
    train = data::toFloatImages(train_bytes, norm);
    test = data::toFloatImages(test_bytes, norm);
  }
  const std::string name = base::nameOf(config.dataset);
  const std::string where = synthetic ? "" : " in " + config.dir;
  Datasets d;
  d.train_source = "the " + name + " training set" + where;
  d.test_source = "the " + name + " test set" + where;
  d.train = data::inMemory(train, d.train_source);
  d.test = data::inMemory(test, d.test_source);
  return d;
}

// Runs `open`; a DataError gets the key in front, so the user knows which setting to fix.
template <typename Open>
auto underKey(const std::string& key, Open&& open) -> decltype(open()) {
  try {
    return open();
  } catch (const data::DataError& e) {
    throw data::DataError(key + ": " + e.what());
  }
}

// data.format npy or tokens.
Datasets loadFiles(const configs::DataConfig& config) {
  Datasets d;
  d.train_source = config.train;
  d.test_source = config.test;
  if (config.format == configs::DataFormat::kNpy) {
    d.train = underKey("data.train", [&] { return data::openNpyExamples(config.train); });
    d.test = underKey("data.test", [&] { return data::openNpyExamples(config.test); });
  } else {  // tokens
    d.train_tokens = underKey(
        "data.train", [&] { return data::TokenExamples::open(config.train, config.seq_len); });
    d.test_tokens = underKey(
        "data.test", [&] { return data::TokenExamples::open(config.test, config.seq_len); });
    d.train = d.train_tokens;
    d.test = d.test_tokens;
  }
  return d;
}

// A sampler over no samples would fail without naming the files: name them here.
void checkHasSamples(const data::Examples& examples, const std::string& key) {
  if (examples.size() > 0) return;
  throw data::DataError(key + ": " + examples.describe() +
                        " holds no samples; training needs at least one");
}

}  // namespace

Datasets loadDatasets(const configs::DataConfig& config, uint64_t seed,
                      const std::string& cache_dir) {
  const bool idx = config.format == configs::DataFormat::kIdx;
  Datasets d = idx ? loadIdx(config, seed, cache_dir) : loadFiles(config);
  checkHasSamples(*d.train, idx ? "data.dir" : "data.train");
  return d;
}

}  // namespace cumulus::trainer
