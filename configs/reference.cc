#include "configs/reference.h"

#include "configs/parse.h"

namespace cumulus::configs {
namespace {

struct Span {
  size_t begin;  // first character after the begin-marker line
  size_t end;    // first character of the end-marker line
};

std::optional<Span> findSection(const std::string& markdown) {
  size_t begin = markdown.find(kReferenceBegin);
  if (begin == std::string::npos) return std::nullopt;
  size_t after = markdown.find('\n', begin);
  if (after == std::string::npos) return std::nullopt;
  size_t end = markdown.find(kReferenceEnd, after);
  if (end == std::string::npos) return std::nullopt;
  return Span{after + 1, end};
}

}  // namespace

std::optional<std::string> referenceSection(const std::string& markdown) {
  std::optional<Span> span = findSection(markdown);
  if (!span) return std::nullopt;
  return markdown.substr(span->begin, span->end - span->begin);
}

std::string withReferenceSection(const std::string& markdown) {
  if (std::optional<Span> span = findSection(markdown)) {
    return markdown.substr(0, span->begin) + referenceMarkdown() + markdown.substr(span->end);
  }
  std::string out = markdown;
  if (!out.empty() && out.back() != '\n') out += '\n';
  out += "\n## Configuration reference\n\n";
  out +=
      std::string(kReferenceBegin) + "\n" + referenceMarkdown() + std::string(kReferenceEnd) + "\n";
  return out;
}

}  // namespace cumulus::configs
