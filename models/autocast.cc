// Autocast (<cumulus/precision.h>): the calling thread's LibTorch CPU autocast, on for a scope.
// LibTorch's C++ API has the switches (at::autocast) but no guard; this is the guard that
// torch.autocast("cpu", dtype=torch.bfloat16) is in Python: enable, count the nesting, and on the
// way out restore the previous state and, at the outermost level, drop the cached weight casts.

#include <ATen/autocast_mode.h>

#include <stdexcept>

#include "cumulus/precision.h"

namespace cumulus {

Autocast::Autocast(Precision precision) {
  if (precision == Precision::kAuto) {
    throw std::invalid_argument(
        "cumulus::Autocast: Precision::kAuto is not a precision to run in; pass "
        "choosePrecision(Precision::kAuto).precision");
  }
  if (precision != Precision::kBf16) return;
  active_ = true;
  was_enabled_ = at::autocast::is_autocast_enabled(at::kCPU);
  was_dtype_ = static_cast<int>(at::autocast::get_autocast_dtype(at::kCPU));
  at::autocast::set_autocast_enabled(at::kCPU, true);
  at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
  at::autocast::increment_nesting();
}

Autocast::~Autocast() {
  if (!active_) return;
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_autocast_enabled(at::kCPU, was_enabled_);
  at::autocast::set_autocast_dtype(at::kCPU, static_cast<at::ScalarType>(was_dtype_));
}

}  // namespace cumulus
