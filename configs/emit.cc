// toYaml and referenceMarkdown: both are walks over the schema table.
#include "configs/parse.h"
#include "configs/schema.h"

namespace cumulus::configs {

std::string toYaml(const Experiment& experiment) {
  std::string out;
  std::string_view section;
  for (const KeySpec& key : schema()) {
    if (key.section() != section) {
      section = key.section();
      out += std::string(section) + ":\n";
    }
    out += section.empty() ? "" : "  ";
    out += std::string(key.leaf()) + ": " + formatValue(key.get(experiment)) + "\n";
  }
  return out;
}

namespace {

std::string cell(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

std::string code(std::string_view text) { return "`" + cell(text) + "`"; }

}  // namespace

std::string referenceMarkdown() {
  std::string out =
      "| key | type | default | allowed | meaning |\n"
      "|---|---|---|---|---|\n";
  for (const KeySpec& key : schema()) {
    std::string default_text = key.required ? "required" : code(formatValue(key.default_value));
    std::string allowed = allowedText(key);
    if (!key.choices.empty()) {  // as code, so that "torchscript:<path>" is not read as HTML
      allowed.clear();
      for (std::string_view choice : key.choices) {
        allowed += (allowed.empty() ? "" : ", ") + code(choice);
      }
      if (!key.choice_prefix.empty())
        allowed += ", " + code(std::string(key.choice_prefix) + "<path>");
    }
    out += "| " + code(key.path) + " | " + std::string(typeName(key.type)) + " | " + default_text +
           " | " + cell(allowed) + " | " + cell(key.meaning) + " |\n";
  }
  return out;
}

}  // namespace cumulus::configs
