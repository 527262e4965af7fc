#include "distributed/bucket_layout.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <stdexcept>

namespace cumulus::distributed {

std::vector<BucketSpec> computeBucketLayout(const std::vector<ParamInfo>& params, size_t cap_bytes,
                                            size_t first_cap_bytes) {
  if (cap_bytes == 0 || first_cap_bytes == 0) {
    throw std::invalid_argument("bucket caps must be positive");
  }
  std::vector<BucketSpec> closed;
  std::map<int, BucketSpec> open;  // by dtype key; ordered, so the final flush is deterministic
  auto capNow = [&] { return closed.empty() ? first_cap_bytes : cap_bytes; };
  for (size_t i = params.size(); i-- > 0;) {
    const ParamInfo& p = params[i];
    auto it = open.find(p.dtype);
    if (it == open.end()) {
      BucketSpec fresh;
      fresh.dtype = p.dtype;
      fresh.element_size = p.element_size;
      it = open.emplace(p.dtype, std::move(fresh)).first;
    }
    BucketSpec& bucket = it->second;
    if (!bucket.params.empty() && (bucket.numel + p.numel) * p.element_size > capNow()) {
      closed.push_back(std::move(bucket));
      bucket = BucketSpec{};
      bucket.dtype = p.dtype;
      bucket.element_size = p.element_size;
    }
    bucket.params.push_back(i);
    bucket.offsets.push_back(bucket.numel);
    bucket.numel += p.numel;
  }
  for (auto& [dtype, bucket] : open) {
    if (!bucket.params.empty()) closed.push_back(std::move(bucket));
  }
  return closed;
}

std::string describeBuckets(const std::vector<BucketSpec>& buckets) {
  std::string text = std::to_string(buckets.size()) + " bucket(s):";
  for (size_t b = 0; b < buckets.size(); ++b) {
    char item[96];
    std::snprintf(item, sizeof(item), "%s #%zu %zu param(s) %.2f MiB", b == 0 ? "" : ",", b,
                  buckets[b].params.size(), static_cast<double>(buckets[b].bytes()) / (1 << 20));
    text += item;
  }
  return text;
}

size_t mebibytes(double mb, const char* key) {
  if (!(mb > 0) || !std::isfinite(mb)) {
    throw std::invalid_argument(std::string(key) + ": must be a positive number of MiB, got " +
                                std::to_string(mb));
  }
  return static_cast<size_t>(std::max(1.0, std::round(mb * 1024.0 * 1024.0)));
}

}  // namespace cumulus::distributed
