// loadDatasets: what the schema does not guard, for a config built in code.
#include "trainer/datasets.h"

#include <gtest/gtest.h>

#include <cstdint>

#include "configs/schema.h"
#include "data/error.h"

namespace cumulus::trainer {
namespace {

// The train and test samples are drawn as one set: their sum wrapped around to a negative size,
// "synthetic dataset: size must be positive, got -9223372036854775297".
TEST(DatasetsTest, SyntheticSampleCountsWhoseSumOverflowsAreRefusedNamingTheKeys) {
  configs::DataConfig config = configs::schemaDefaults().data;
  config.dataset = configs::Dataset::kSynthetic;
  config.synthetic_train_samples = INT64_MAX;
  config.synthetic_test_samples = 512;
  try {
    loadDatasets(config, 1, "");
    ADD_FAILURE() << "no error";
  } catch (const data::DataError& e) {
    EXPECT_STREQ(e.what(),
                 "data.synthetic_train_samples + data.synthetic_test_samples: "
                 "9223372036854775807 + 512 samples is more than a 64-bit count holds");
  }
}

}  // namespace
}  // namespace cumulus::trainer
