// cumulus-report: the live dashboard of cumulus-run --metrics-port, as one static page for a run
// that has ended (or is still going): the run directory's metrics.jsonl built into the page, which
// then needs nothing else to open (no server, no network).
//
//   cumulus-report RUN_DIR [-o FILE]     (default FILE: RUN_DIR/report.html)
//
// Prints the path it wrote and what the run did. The file is read line by line and the page holds
// a bounded selection of its records (launch/run_report.h); a line that is not a JSON object (the
// torn line of a killed run) is skipped and counted. Exit codes: 0 written; 1 the page could not
// be written; 2 usage (no such run directory, no metrics.jsonl in it, no record, not a
// metrics.jsonl, not a regular file).

#include <fstream>
#include <iostream>
#include <string>

#include "base/command_line.h"
#include "launch/metrics_server.h"
#include "launch/run_report.h"

namespace {

using namespace cumulus::launch;
namespace base = cumulus::base;

constexpr const char* kProgram = "cumulus-report";

int runMain(int argc, char** argv) {
  CLI::App app{"Writes a run's dashboard as one static HTML page.", kProgram};
  base::setUpCommandLine(app, "0 written, 1 the page could not be written, 2 usage");
  std::string run_dir;
  std::string out;
  app.add_option("RUN_DIR", run_dir, "the run directory (trainer.run_dir)")->required();
  app.add_option("-o,--output", out, "the page to write (default RUN_DIR/report.html)")
      ->type_name("FILE");
  if (!base::parseCommandLine(app, argc, argv)) return 0;
  RunReport report = readRunReport(run_dir);
  const size_t in_page = report.records.size();
  if (out.empty()) out = run_dir + "/report.html";
  std::ofstream page(out, std::ios::trunc);
  page << dashboardReport({{"records", std::move(report.records)}, {"status", report.status}});
  page.close();
  if (!page) {
    std::cerr << kProgram << ": " << out << ": cannot write the page" << std::endl;
    return 1;
  }
  std::cout << "wrote " << out << ": " << report.records_read << " records";
  if (static_cast<int64_t>(in_page) < report.records_read) {
    std::cout << " (" << in_page << " of them in the page)";
  }
  std::cout << ", state " << report.status.value("state", "") << ", step "
            << report.status["step"].dump();
  if (report.skipped > 0) {
    std::cout << " (" << report.skipped << " line(s) that are not records skipped)";
  }
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
