// GradientSync::backward and DataParallel (<cumulus/data_parallel.h>).

#include "cumulus/data_parallel.h"

namespace cumulus {

void GradientSync::backward(const torch::Tensor& loss) {
  beforeBackward(true);
  loss.backward();
  afterBackward(true);
  finish();
}

}  // namespace cumulus
