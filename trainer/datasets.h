#pragma once
// The experiment's training and test data, by data.format (configs/experiment.h DataConfig):
//   idx     data.dataset: fashion-mnist or mnist IDX files in data.dir (decompressed copies kept
//           in `cache_dir` when it is set), or seeded synthetic images; normalized by the training
//           set's mean and standard deviation when data.normalize. Held in memory.
//   npy     data.train and data.test are directories with inputs.npy and targets.npy,
//           memory-mapped (data/npy.h openNpyExamples).
//   tokens  data.train and data.test are 1-D token-id .npy files, read as windows of
//           data.seq_len + 1 tokens (data/npy.h TokenExamples).
// Errors: a file that is missing or invalid, a training split with no samples (its key and
// describe() in the text), or a token stream shorter than one window, throws
// data::DataError whose text starts with the key ("data.test: ...") for npy and tokens and names
// the file; an unknown format or dataset throws std::invalid_argument naming the key. Blocks on
// file I/O (a local disk).

#include <cstdint>
#include <memory>
#include <string>

#include "configs/experiment.h"

namespace cumulus::data {
class Examples;
class TokenExamples;
}  // namespace cumulus::data

namespace cumulus::trainer {

struct Datasets {
  std::shared_ptr<const data::Examples> train;
  std::shared_ptr<const data::Examples> test;
  // What each one is, for messages: data.train and data.test as written, or for idx
  // "the fashion-mnist training set in /usr/share/datasets/fashion-mnist".
  std::string train_source;
  std::string test_source;
  // data.format tokens: train and test again, with their token ranges; null otherwise.
  std::shared_ptr<const data::TokenExamples> train_tokens;
  std::shared_ptr<const data::TokenExamples> test_tokens;
};

// `seed` makes the synthetic set; `cache_dir` as above (empty: no cache).
Datasets loadDatasets(const configs::DataConfig& config, uint64_t seed,
                      const std::string& cache_dir);

}  // namespace cumulus::trainer
