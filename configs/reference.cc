#include "configs/reference.h"

#include "configs/parse.h"

namespace cumulus::configs {
namespace {

struct Span {
  size_t begin;  // first character after the begin-marker line
  size_t end;    // first character of the end-marker line
};

std::optional<Span> findSection(const std::string& readme) {
  size_t begin = readme.find(kReferenceBegin);
  if (begin == std::string::npos) return std::nullopt;
  size_t after = readme.find('\n', begin);
  if (after == std::string::npos) return std::nullopt;
  size_t end = readme.find(kReferenceEnd, after);
  if (end == std::string::npos) return std::nullopt;
  return Span{after + 1, end};
}

}  // namespace

std::optional<std::string> referenceSection(const std::string& readme) {
  std::optional<Span> span = findSection(readme);
  if (!span) return std::nullopt;
  return readme.substr(span->begin, span->end - span->begin);
}

std::string withReferenceSection(const std::string& readme) {
  if (std::optional<Span> span = findSection(readme)) {
    return readme.substr(0, span->begin) + referenceMarkdown() + readme.substr(span->end);
  }
  std::string out = readme;
  if (!out.empty() && out.back() != '\n') out += '\n';
  out += "\n## Configuration reference\n\n";
  out +=
      std::string(kReferenceBegin) + "\n" + referenceMarkdown() + std::string(kReferenceEnd) + "\n";
  return out;
}

}  // namespace cumulus::configs
