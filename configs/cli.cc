#include "configs/cli.h"

#include <cassert>

#include "configs/suggest.h"

namespace cumulus::configs {
namespace {

constexpr const char* kSet = "set";
constexpr const char* kPrintConfig = "print-config";
constexpr const char* kHelp = "help";

[[noreturn]] void usageError(const CliSpec& spec, const std::string& what) {
  throw CliError(spec.program + ": " + what + " (" + spec.program + " --help shows the usage)");
}

const FlagSpec* findFlag(const CliSpec& spec, const std::string& name) {
  for (const FlagSpec& flag : spec.flags) {
    if (flag.name == name) return &flag;
  }
  return nullptr;
}

void addOverride(const CliSpec& spec, CliArgs& out, const std::string& value) {
  if (value.find('=') == std::string::npos || value.front() == '=') {
    usageError(spec, "--set " + value + ": expected KEY=VALUE, e.g. --set optimizer.lr=0.05");
  }
  out.overrides.push_back(value);
}

}  // namespace

CliArgs parseCommandLine(const CliSpec& spec, const std::vector<std::string>& args) {
  for (const FlagSpec& flag : spec.flags) {
    assert(flag.name != kSet && flag.name != kPrintConfig && flag.name != kHelp &&
           "--set, --print-config and --help are built in");
    (void)flag;
  }
  CliArgs out;
  std::vector<std::string> positionals;
  bool flags_ended = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (flags_ended || arg.size() < 2 || arg[0] != '-') {
      positionals.push_back(arg);
      continue;
    }
    if (arg == "--") {
      flags_ended = true;
      continue;
    }
    if (arg == "-h" || arg == "--help") {
      out.help = true;
      continue;
    }
    if (arg.compare(0, 2, "--") != 0) usageError(spec, "unknown flag " + arg);
    size_t eq = arg.find('=');
    std::string name = arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    bool inline_value = eq != std::string::npos;
    std::string value = inline_value ? arg.substr(eq + 1) : "";
    auto takeValue = [&](const std::string& value_name) {
      if (inline_value) return value;
      if (i + 1 >= args.size()) usageError(spec, "--" + name + " needs a value " + value_name);
      return args[++i];
    };
    if (name == kSet) {
      addOverride(spec, out, takeValue("KEY=VALUE"));
    } else if (name == kPrintConfig) {
      if (inline_value) usageError(spec, "--print-config takes no value");
      out.print_config = true;
    } else if (const FlagSpec* flag = findFlag(spec, name)) {
      if (out.flags.count(name)) usageError(spec, "--" + name + " is given twice");
      if (flag->value_name.empty()) {
        if (inline_value) usageError(spec, "--" + name + " takes no value");
        out.flags[name] = "";
      } else {
        out.flags[name] = takeValue(flag->value_name);
      }
    } else {
      std::vector<std::string> known = {kSet, kPrintConfig, kHelp};
      for (const FlagSpec& f : spec.flags) known.push_back(f.name);
      std::string guess = closestSpelling(name, known);
      usageError(spec, "unknown flag --" + name +
                           (guess.empty() ? "" : "; did you mean --" + guess + "?"));
    }
  }
  if (out.help) return out;
  if (spec.positional.empty()) {
    if (!positionals.empty()) usageError(spec, "unexpected argument \"" + positionals[0] + "\"");
  } else {
    if (positionals.size() > 1) {
      usageError(spec, "unexpected argument \"" + positionals[1] + "\"; " + spec.program +
                           " takes one " + spec.positional);
    }
    if (positionals.empty() && spec.positional_required) {
      usageError(spec, "missing " + spec.positional + ", the experiment file");
    }
    if (!positionals.empty()) out.config_path = positionals[0];
  }
  return out;
}

CliArgs parseCommandLine(const CliSpec& spec, int argc, const char* const argv[]) {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  return parseCommandLine(spec, args);
}

std::string usageText(const CliSpec& spec) {
  std::string positional;
  if (!spec.positional.empty()) {
    positional = spec.positional_required ? " " + spec.positional : " [" + spec.positional + "]";
  }
  std::string text =
      "usage: " + spec.program + positional + " [--set KEY=VALUE]... [--print-config] [flags]\n";
  if (!spec.summary.empty()) text += "\n" + spec.summary + "\n";
  text += "\nflags:\n";
  auto line = [&](const std::string& left, const std::string& help) {
    std::string padded = "  " + left;
    if (padded.size() < 28)
      padded.resize(28, ' ');
    else
      padded += "  ";
    text += padded + help + "\n";
  };
  line("--set KEY=VALUE", "override one experiment key (repeatable), e.g. --set optimizer.lr=0.05");
  line("--print-config", "print the resolved experiment as YAML and exit");
  for (const FlagSpec& flag : spec.flags) {
    line("--" + flag.name + (flag.value_name.empty() ? "" : " " + flag.value_name), flag.help);
  }
  line("-h, --help", "show this help");
  text += "\nEvery key, its default and meaning: cumulus-config reference\n";
  return text;
}

}  // namespace cumulus::configs
