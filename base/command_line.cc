#include "base/command_line.h"

#include "cumulus/version.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <iomanip>
#include <memory>
#include <sstream>

#include "base/integer.h"
#include "base/suggest.h"

namespace cumulus::base {
namespace {

std::string formatNumber(double value) {
  std::ostringstream text;
  text << std::setprecision(12) << value;
  return text.str();
}


bool readNumber(const std::string& text, double& value) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0]))) return false;
  char* end = nullptr;
  const double parsed = std::strtod(text.c_str(), &end);
  if (*end != '\0' || !std::isfinite(parsed)) return false;
  value = parsed;
  return true;
}

// Every option of `app` and of its subcommands, for "--name=" checks and suggestions.
std::vector<const CLI::Option*> allOptions(const CLI::App& app) {
  std::vector<const CLI::Option*> options = app.get_options();
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    for (const CLI::Option* option : allOptions(*sub)) options.push_back(option);
  }
  return options;
}

// The options that apply where parsing stopped: the app's and those of the subcommands chosen.
std::vector<const CLI::Option*> optionsInScope(const CLI::App& app) {
  std::vector<const CLI::Option*> options = app.get_options();
  for (const CLI::App* sub : app.get_subcommands()) {
    for (const CLI::Option* option : optionsInScope(*sub)) options.push_back(option);
  }
  return options;
}

const CLI::Option* findLong(const CLI::App& app, const std::string& name) {
  for (const CLI::Option* option : allOptions(app)) {
    if (option->check_lname(name)) return option;
  }
  return nullptr;
}

std::string seeHelp(const CLI::App& app) { return " (see " + app.get_name() + " --help)"; }

// CLI11 reads `--flag=` as "take the next argument" and `--switch=yes` as true: both hide a
// mistake, so they are refused before CLI11 sees them. What follows `--`, or the first positional
// of an app whose positionals end the flags (cumulus-run's PROGRAM), is not ours to check.
void rejectEmptyAndSwitchValues(const CLI::App& app, const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--" || (arg.rfind('-', 0) != 0 && app.get_positionals_at_end())) return;
    if (arg.rfind("--", 0) != 0) continue;
    const size_t eq = arg.find('=');
    const std::string name = arg.substr(2, eq == std::string::npos ? eq : eq - 2);
    const CLI::Option* option = findLong(app, name);
    if (option == nullptr) continue;  // CLI11 reports it as unknown
    if (eq == std::string::npos) {
      if (option->get_expected_max() > 0) ++i;  // its value, whatever it looks like
    } else if (option->get_expected_max() == 0) {
      throw UsageError("--" + name + " takes no value");
    } else if (eq + 1 == arg.size()) {
      throw UsageError("--" + name + ": the value is empty; give --" + name + " " +
                       option->get_type_name());
    }
  }
}

std::string unexpected(const CLI::App& app, const std::vector<std::string>& extras) {
  const std::string& first = extras.front();
  if (first.size() < 2 || first[0] != '-') {
    return "unexpected argument \"" + first + "\"" + seeHelp(app);
  }
  std::string guess;
  if (first.rfind("--", 0) == 0) {
    std::vector<std::string> names;
    for (const CLI::Option* option : optionsInScope(app)) {
      for (const std::string& name : option->get_lnames()) names.push_back(name);
    }
    guess = closestSpelling(first.substr(2, first.find('=') - 2), names);
  }
  return "unknown flag " + first.substr(0, first.find('=')) +
         (guess.empty() ? "" : "; did you mean --" + guess + "?") + seeHelp(app);
}

// A program made of commands (cumulus-config check …) needs one; `app.require_subcommand(1)`
// shows that in the usage line, and this says it in our words.
void requireCommand(const CLI::App& app) {
  const std::vector<const CLI::App*> commands =
      app.get_subcommands([](const CLI::App*) { return true; });
  if (commands.empty() || !app.get_subcommands().empty()) return;
  const std::vector<std::string> extras = app.remaining(true);
  if (!extras.empty()) throw UsageError(unexpected(app, extras));
  std::string names;
  for (size_t i = 0; i < commands.size(); ++i) {
    names += (i == 0 ? "" : i + 1 == commands.size() ? " or " : ", ") + commands[i]->get_name();
  }
  throw UsageError("missing COMMAND: " + names + seeHelp(app));
}

constexpr size_t kHelpWidth = 100;  // the line length of the code, and of the help
constexpr size_t kNameColumn = 30;  // "  --preemption-grace S" and its padding

// `text` broken at spaces into lines of at most `width` characters (a longer word keeps its own
// line); each line after the first starts with `indent`.
std::string wrap(const std::string& text, size_t width, const std::string& indent = "") {
  std::string out;
  size_t line = 0;
  std::istringstream words(text);
  for (std::string word; words >> word;) {
    if (line > 0 && line + 1 + word.size() > width) {
      out += "\n" + indent;
      line = indent.size();
    } else if (line > 0) {
      out += " ";
      ++line;
    }
    out += word;
    line += word.size();
  }
  return out;
}

// CLI11 2.1 does not wrap a flag's description; this does, so that the help stays within
// kHelpWidth columns (CLI11 indents each continuation line under the first).
class WrappingFormatter : public CLI::Formatter {
 public:
  std::string make_option_desc(const CLI::Option* option) const override {
    return wrap(CLI::Formatter::make_option_desc(option), kHelpWidth - kNameColumn);
  }
};

bool helpAsked(const CLI::App& app) {
  if (app.get_help_ptr() != nullptr && app.get_help_ptr()->count() > 0) return true;
  for (const CLI::App* sub : app.get_subcommands()) {
    if (helpAsked(*sub)) return true;
  }
  return false;
}

// CLI11's mistake in our words where we have better ones; its own otherwise.
std::string describe(const CLI::App& app, const CLI::ParseError& error) {
  if (dynamic_cast<const CLI::ExtrasError*>(&error) != nullptr) {
    return unexpected(app, app.remaining(true));
  }
  requireCommand(app);
  const std::string text = error.what();
  return text + (text.rfind("--", 0) == 0 ? "" : seeHelp(app));
}

}  // namespace

void setUpCommandLine(CLI::App& app, const std::string& exit_codes, const std::string& notes) {
  app.option_defaults()->group("Flags");
  app.set_help_flag("-h,--help", "print this help and exit");
  app.set_version_flag("--version", app.get_name() + " " + version(), "print the version and exit");
  auto formatter = std::make_shared<WrappingFormatter>();
  formatter->column_width(kNameColumn);
  formatter->label("OPTIONS", "FLAGS");
  app.formatter(formatter);
  app.footer((notes.empty() ? "" : wrap(notes, kHelpWidth) + "\n") +
             wrap("Exit status: " + exit_codes, kHelpWidth, "  "));
}

bool parseCommandLine(CLI::App& app, std::vector<std::string> args, std::ostream& help_out) {
  rejectEmptyAndSwitchValues(app, args);
  std::reverse(args.begin(), args.end());  // CLI11 takes them last first
  try {
    app.parse(args);
    return true;
  } catch (const CLI::CallForHelp&) {
  } catch (const CLI::CallForVersion& e) {
    help_out << e.what() << "\n";
    return false;
  } catch (const CLI::ParseError& e) {
    // CLI11 checks the values before it looks for --help; --help wins.
    if (!helpAsked(app)) throw UsageError(describe(app, e));
  } catch (const UsageError&) {  // from a flag's own parser (a list, a range)
    if (!helpAsked(app)) throw;
  }
  help_out << app.help();
  return false;
}

bool parseCommandLine(CLI::App& app, int argc, const char* const argv[], std::ostream& help_out) {
  return parseCommandLine(app, std::vector<std::string>(argv + 1, argv + argc), help_out);
}

int64_t parseInteger(const std::string& text, const std::string& flag, int64_t min, int64_t max) {
  const std::optional<int64_t> value = base::parseInteger(text, min, max);
  if (!value) throw UsageError(flag + ": " + integerProblem(text, min, max));
  return *value;
}

double parseNumber(const std::string& text, const std::string& flag, double min, double max,
                   const std::string& what) {
  double value = 0;
  if (!readNumber(text, value) || value < min || value > max) {
    throw UsageError(flag + ": expected " + what + " in [" + formatNumber(min) + ", " +
                     formatNumber(max) + "], got \"" + text + "\"");
  }
  return value;
}

CLI::Validator integerIn(int64_t min, int64_t max) {
  return CLI::Validator(
      [min, max](std::string& text) {
        const std::optional<int64_t> value = parseInteger(text, min, max);
        if (!value) return integerProblem(text, min, max);
        text = std::to_string(*value);
        return std::string();
      },
      "");
}

CLI::Validator numberIn(double min, double max, const std::string& what) {
  return CLI::Validator(
      [min, max, what](std::string& text) {
        double value = 0;
        if (!readNumber(text, value) || value < min || value > max) {
          return "expected " + what + " in [" + formatNumber(min) + ", " + formatNumber(max) +
                 "], got \"" + text + "\"";
        }
        return std::string();
      },
      "");
}

CLI::Validator positiveNumber(const std::string& what, double max) {
  return CLI::Validator(
      [what, max](std::string& text) {
        double value = 0;
        if (!readNumber(text, value) || !(value > 0)) {
          return "expected a positive " + what + ", got \"" + text + "\"";
        }
        if (value > max) {
          return "expected a positive " + what + " up to " + formatNumber(max) + ", got \"" + text +
                 "\"";
        }
        return std::string();
      },
      "");
}

CLI::Validator nonEmpty(const std::string& what) {
  return CLI::Validator(
      [what](std::string& text) { return text.empty() ? "expected a non-empty " + what : ""; }, "");
}

int reportError(const std::string& program, const std::exception& error, std::ostream& err) {
  err << program << ": error: " << error.what() << "\n";
  return exitCodeFor(error);
}

}  // namespace cumulus::base
