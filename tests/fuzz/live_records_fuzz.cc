// The live endpoint's record reader (launch/job_metrics.h): what node 0 makes of the records and
// statuses workers send through the Store (any program with the job token can write those keys).
// Each input line is one Store value; the first byte of a line picks whether it is a record or
// rank (byte % 4)'s status. Whatever arrives, rendering must not throw, every line of /metrics
// must be a comment or a well-formed sample, and the report page's data must hold no "<" (a
// "</script" would end the page's script, a "<!--" make the rest of it script data).

#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "launch/job_metrics.h"
#include "launch/metrics_server.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using cumulus::fuzz::check;

bool isNameChar(char c) { return (c >= 'a' && c <= 'z') || c == '_'; }

// `name{label="escaped"} value` or `name value`.
bool wellFormedSample(const std::string& line) {
  size_t i = 0;
  while (i < line.size() && isNameChar(line[i])) ++i;
  if (i == 0 || line.compare(0, 8, "cumulus_") != 0) return false;
  if (i < line.size() && line[i] == '{') {
    ++i;
    while (i < line.size() && isNameChar(line[i])) ++i;
    if (line.compare(i, 2, "=\"") != 0) return false;
    i += 2;
    for (; i < line.size() && line[i] != '"'; ++i) {
      if (line[i] == '\n') return false;
      if (line[i] == '\\') ++i;
    }
    if (line.compare(i, 2, "\"}") != 0) return false;
    i += 2;
  }
  return i + 1 < line.size() && line[i] == ' ' && line.find(' ', i + 1) == std::string::npos;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  cumulus::launch::JobMetrics metrics("fuzz", [] { return 1000.0; });
  metrics.agentEvent("start", 0, 4);
  size_t start = 0;
  while (start < input.size()) {
    size_t end = input.find('\n', start);
    if (end == std::string::npos) end = input.size();
    const std::string line = input.substr(start, end - start);
    start = end + 1;
    if (line.empty()) continue;
    const nlohmann::json value = nlohmann::json::parse(line.substr(1), nullptr, false);
    const uint8_t pick = static_cast<uint8_t>(line[0]);
    if (pick % 2 == 0) {
      metrics.addRecord(value);
    } else if (value.is_object()) {
      metrics.setRankStatus(pick % 4 / 2 + (pick % 8 >= 4 ? 2 : 0), value);
    }
  }
  const std::string text = metrics.prometheus();
  check(!text.empty() && text.back() == '\n', "/metrics does not end with a newline");
  for (size_t at = 0; at < text.size();) {
    const size_t nl = text.find('\n', at);
    const std::string line = text.substr(at, nl - at);
    at = nl + 1;
    if (line.rfind("# HELP cumulus_", 0) == 0 || line.rfind("# TYPE cumulus_", 0) == 0) continue;
    check(wellFormedSample(line), "a malformed /metrics line: " + line);
  }
  const nlohmann::json status = metrics.status();
  const nlohmann::json records = metrics.records(0, 1000000);
  const std::string page =
      cumulus::launch::dashboardReport({{"records", records["records"]}, {"status", status}});
  const std::string marker = "const CUMULUS_EMBEDDED = ";
  const size_t data_at = page.find(marker);
  check(data_at != std::string::npos, "the report has no data line");
  // The data is one line (JSON escapes newlines), up to the line's comment, which has no "<".
  const size_t line_end = page.find('\n', data_at);
  check(page.substr(data_at, line_end - data_at).find('<') == std::string::npos,
        "the report's data holds \"<\"");
  return 0;
}
