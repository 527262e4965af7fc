// cumulus-report: the live dashboard of cumulus-run --metrics-port, as one static page for a run
// that has ended (or is still going): the run directory's metrics.jsonl built into the page, which
// then needs nothing else to open (no server, no network).
//
//   cumulus-report RUN_DIR [-o FILE]     (default FILE: RUN_DIR/report.html)
//
// Prints the path it wrote and what the run did. A line of metrics.jsonl that is not a JSON object
// (the torn last line of a killed run) is skipped and counted. Exit codes: 0 written; 1 the page
// could not be written; 2 usage (no such run directory, no metrics.jsonl in it, no record).

#include <fstream>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "base/command_line.h"
#include "launch/job_metrics.h"
#include "launch/metrics_server.h"

namespace {

using namespace cumulus::launch;
namespace base = cumulus::base;

constexpr const char* kProgram = "cumulus-report";

// The state a finished run's records tell.
std::string stateOf(const nlohmann::json& last_end) {
  if (last_end.is_null()) return "stopped";
  const std::string type = last_end.value("type", "");
  return type == "summary" ? "finished" : type == "preempted" ? "preempted" : "stopped";
}

int runMain(int argc, char** argv) {
  CLI::App app{"Writes a run's dashboard as one static HTML page.", kProgram};
  base::setUpCommandLine(app, "0 written, 1 the page could not be written, 2 usage");
  std::string run_dir;
  std::string out;
  app.add_option("RUN_DIR", run_dir, "the run directory (trainer.run_dir)")->required();
  app.add_option("-o,--output", out, "the page to write (default RUN_DIR/report.html)")
      ->type_name("FILE");
  if (!base::parseCommandLine(app, argc, argv)) return 0;
  const std::string metrics_path = run_dir + "/metrics.jsonl";
  std::ifstream in(metrics_path);
  if (!in) {
    throw base::UsageError(metrics_path +
                           ": cannot read it; RUN_DIR is the trainer.run_dir of "
                           "a run (it holds metrics.jsonl)");
  }
  JobMetrics metrics(run_dir);
  nlohmann::json records = nlohmann::json::array();
  nlohmann::json last_end;
  int64_t skipped = 0;
  std::string line;
  while (std::getline(in, line)) {
    nlohmann::json record = nlohmann::json::parse(line, nullptr, false);
    if (!record.is_object()) {
      ++skipped;
      continue;
    }
    const std::string type = record.value("type", "");
    if (type == "summary" || type == "preempted" || type == "resume") last_end = record;
    metrics.addRecord(record);
    records.push_back(std::move(record));
  }
  if (records.empty()) throw base::UsageError(metrics_path + ": no record in it yet");
  metrics.setState(stateOf(last_end));
  nlohmann::json status = metrics.status();
  status.erase("last_checkpoint");  // its age is the live page's; a report has no "now"
  if (out.empty()) out = run_dir + "/report.html";
  std::ofstream page(out, std::ios::trunc);
  page << dashboardReport({{"records", records}, {"status", status}});
  page.close();
  if (!page) {
    std::cerr << kProgram << ": " << out << ": cannot write the page" << std::endl;
    return 1;
  }
  std::cout << "wrote " << out << ": " << records.size() << " records, state "
            << status.value("state", "") << ", step " << status["step"].dump();
  if (skipped > 0) std::cout << " (" << skipped << " line(s) that are not records skipped)";
  std::cout << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return runMain(argc, argv);
  } catch (const std::exception& e) {
    return base::reportError(kProgram, e);
  }
}
