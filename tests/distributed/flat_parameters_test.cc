#include "distributed/flat_parameters.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <stdexcept>

#include "models/model.h"

namespace cumulus::distributed {
namespace {

std::vector<torch::Tensor> someParams() {
  torch::manual_seed(5);
  return {torch::randn({3, 4}).requires_grad_(), torch::randn({5}).requires_grad_(),
          torch::randn({2, 2, 3}).requires_grad_(), torch::randn({7}).requires_grad_()};
}

std::vector<torch::Tensor> copies(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> out;
  for (const auto& p : params) out.push_back(p.detach().clone());
  return out;
}

const char* addressIn(const torch::Tensor& flat, size_t offset) {
  return static_cast<const char*>(flat.data_ptr()) + offset * flat.element_size();
}

// Caps of 64 bytes (48 for the first): 48 + 20 + 48 + 28 bytes, in reverse, make four buckets of
// one parameter each.
TEST(FlatParametersTest, ParametersAndGradientsAliasTheFlatBuffersAndKeepTheirValues) {
  const auto params = someParams();
  const auto before = copies(params);
  params[1].mutable_grad() = torch::full({5}, 2.5f);
  const auto layout = layoutOf(params, 64, 48);
  ASSERT_EQ(layout.size(), 4u);
  FlatParameters flat(params, layout);
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& bucket = flat.buckets()[flat.bucketOf(i)];
    EXPECT_TRUE(torch::equal(params[i], before[i])) << "parameter " << i;
    EXPECT_TRUE(params[i].requires_grad()) << "parameter " << i;
    EXPECT_EQ(params[i].data_ptr(), addressIn(bucket.values, flat.offsetOf(i))) << i;
  }
  // A gradient that existed was copied in; the others wait for zeroGrads().
  EXPECT_EQ(params[1].grad().data_ptr(),
            addressIn(flat.buckets()[flat.bucketOf(1)].grads, flat.offsetOf(1)));
  EXPECT_TRUE(torch::equal(params[1].grad(), torch::full({5}, 2.5f)));
  EXPECT_FALSE(params[0].grad().defined());
  EXPECT_FALSE(flat.gradsInPlace());
  flat.zeroGrads();
  EXPECT_TRUE(flat.gradsInPlace());
  EXPECT_EQ(params[1].grad().sum().item<float>(), 0.0f);
  // Writing the flat buffer is writing the parameter.
  flat.buckets()[flat.bucketOf(2)].values.fill_(3.0f);
  EXPECT_TRUE(torch::equal(params[2], torch::full({2, 2, 3}, 3.0f)));
}

TEST(FlatParametersTest, BackwardAccumulatesIntoTheFlatGradients) {
  const auto params = someParams();
  FlatParameters flat(params);
  flat.zeroGrads();
  (params[0].sum() * 2 + params[3].pow(2).sum()).backward();
  const auto& bucket = flat.buckets()[flat.bucketOf(0)];
  EXPECT_TRUE(torch::equal(flat.slice(bucket.grads, 0), torch::full({3, 4}, 2.0f)));
  EXPECT_TRUE(torch::equal(flat.slice(bucket.grads, 3), params[3].detach() * 2));
  EXPECT_TRUE(flat.gradsInPlace());
}

TEST(FlatParametersTest, ReplacedGradientsAreGatheredAndZeroGradsRepointsThem) {
  const auto params = someParams();
  FlatParameters flat(params);
  flat.zeroGrads();
  params[2].mutable_grad() = torch::ones({2, 2, 3});
  EXPECT_FALSE(flat.gradsInPlace());
  flat.gatherGradients();
  const auto& bucket = flat.buckets()[flat.bucketOf(2)];
  EXPECT_TRUE(torch::equal(flat.slice(bucket.grads, 2), torch::ones({2, 2, 3})));
  flat.zeroGrads();
  EXPECT_TRUE(flat.gradsInPlace());
  params[1].mutable_grad() = torch::Tensor();
  try {
    flat.gatherGradients();
    FAIL() << "expected an exception";
  } catch (const std::logic_error& e) {
    EXPECT_STREQ(e.what(), "optimizer step: parameter 1 has no gradient");
  }
}

TEST(FlatParametersTest, ReplacedValuesAreGatheredAndScatteredBack) {
  const auto params = someParams();
  FlatParameters flat(params);
  {
    torch::NoGradGuard no_grad;
    params[0].set_data(torch::full({3, 4}, 7.0f));
  }
  const std::vector<size_t> moved = flat.gatherValues();
  ASSERT_EQ(moved, std::vector<size_t>{0});
  const auto& values = flat.buckets()[flat.bucketOf(0)].values;
  EXPECT_TRUE(torch::equal(flat.slice(values, 0), torch::full({3, 4}, 7.0f)));
  flat.slice(values, 0).fill_(1.0f);
  flat.scatterValues(moved);
  EXPECT_TRUE(torch::equal(params[0], torch::ones({3, 4})));
}

TEST(FlatParametersTest, RejectsAParameterListedTwice) {
  const auto a = torch::zeros({2}).requires_grad_();
  try {
    FlatParameters flat({a, torch::zeros({3}), a});
    FAIL() << "expected an exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "parameter 2 appears twice in the parameter list (a tied weight?); list each "
                 "parameter once");
  }
}

// A TorchScript module holds its parameters in its own attribute slots: re-pointing the tensors
// that named_parameters() returned must reach the module's forward.
TEST(FlatParametersTest, TorchScriptForwardComputesWithTheFlatStorage) {
  models::ModelSpec spec;
  spec.name =
      std::string("torchscript:") + CUMULUS_SOURCE_DIR + "/models/fixtures/tiny_scripted.pt";
  auto model = models::makeModel(spec);
  model->train(false);
  torch::NoGradGuard no_grad;
  const torch::Tensor x = torch::rand({2, 1, 28, 28});
  const torch::Tensor expected = model->forward(x);
  const auto params = model->parameters();
  FlatParameters flat(params, layoutOf(params, 4096, 1024));
  EXPECT_GT(flat.buckets().size(), 1u);
  EXPECT_TRUE(torch::equal(model->forward(x), expected));
  // Doubling every weight and bias through the flat buffers changes what forward computes, the
  // same as doubling them through the module's own tensors does.
  for (const auto& bucket : flat.buckets()) bucket.values.mul_(2);
  const torch::Tensor doubled = model->forward(x);
  EXPECT_FALSE(torch::equal(doubled, expected));
  for (const auto& [name, p] : model->namedParameters()) p.div_(2);
  EXPECT_TRUE(torch::equal(model->forward(x), expected));
  for (const auto& bucket : flat.buckets()) bucket.values.mul_(2);
  EXPECT_TRUE(torch::equal(model->forward(x), doubled));
}

}  // namespace
}  // namespace cumulus::distributed
