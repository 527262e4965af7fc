#pragma once
// The configuration reference in docs/configuration.md: the Markdown table from
// referenceMarkdown() (parse.h), kept between two marker lines so that a test can check it is
// current and `cumulus-config reference --file docs/configuration.md` can regenerate it in place.
// Any Markdown file with the markers works the same way.

#include <optional>
#include <string>
#include <string_view>

namespace cumulus::configs {

inline constexpr std::string_view kReferenceBegin = "<!-- config-reference:begin -->";
inline constexpr std::string_view kReferenceEnd = "<!-- config-reference:end -->";

// The text between the end of the begin-marker line and the start of the end-marker line, or
// nullopt when the markers are missing or out of order.
std::optional<std::string> referenceSection(const std::string& markdown);

// `markdown` with that text replaced by referenceMarkdown(). When the markers are missing,
// appends "## Configuration reference" with the markers and the table.
std::string withReferenceSection(const std::string& markdown);

}  // namespace cumulus::configs
