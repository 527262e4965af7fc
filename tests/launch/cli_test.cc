// launch/'s programs as a user runs them: cumulus-run, cumulus-spot and cumulus-allreduce-probe
// share one command line (base/command_line.h), so a malformed number exits 2 naming the flag
// and --help prints on stdout and exits 0.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "launch/metrics_server.h"
#include "tests/launch/free_port.h"
#include "tests/trainer/process_runner.h"

namespace {

struct Outcome {
  int exit_code = -1;
  std::string out;
  std::string err;
};

Outcome run(const std::string& program, const std::string& args) {
  const std::string err_path =
      ::testing::TempDir() + "/launch_cli_test_" + std::to_string(::getpid()) + ".err";
  const std::string command =
      std::string(CUMULUS_BINARY_DIR) + "/bin/" + program + " " + args + " 2>" + err_path;
  Outcome o;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return o;
  char chunk[4096];
  for (size_t n; (n = std::fread(chunk, 1, sizeof chunk, pipe)) > 0;) o.out.append(chunk, n);
  const int status = ::pclose(pipe);
  o.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(err_path);
  o.err.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  std::remove(err_path.c_str());
  return o;
}

TEST(LaunchCli, CumulusRunRejectsAMalformedNumberAndHelpsOnStdout) {
  Outcome o = run("cumulus-run", "--max-restarts 2x -- /bin/true");
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_EQ(o.err,
            "cumulus-run: error: --max-restarts: expected an integer in [0, 1000000], got "
            "\"2x\"\n");
  EXPECT_EQ(o.out, "");
  o = run("cumulus-run", "--help");
  EXPECT_EQ(o.exit_code, 0);
  EXPECT_EQ(o.err, "");
  EXPECT_NE(o.out.find("Usage: cumulus-run [FLAGS] [PROGRAM...]\n"), std::string::npos) << o.out;
}

TEST(LaunchCli, CumulusSpotRejectsAMalformedNumberAndHelpsOnStdout) {
  Outcome o = run("cumulus-spot", "--max-crashes 2x -- /bin/true");
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_EQ(o.err,
            "cumulus-spot: error: --max-crashes: expected an integer in [0, 1000000000], got "
            "\"2x\"\n");
  EXPECT_EQ(o.out, "");
  o = run("cumulus-spot", "--notice= -- /bin/true");
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_EQ(o.err, "cumulus-spot: error: --notice: the value is empty; give --notice S\n");
  o = run("cumulus-spot", "--help");
  EXPECT_EQ(o.exit_code, 0);
  EXPECT_EQ(o.err, "");
  EXPECT_NE(o.out.find("Usage: cumulus-spot [FLAGS] [COMMAND...]\n"), std::string::npos) << o.out;
}

TEST(LaunchCli, CumulusAllreduceProbeRejectsAMalformedNumberAndHelpsOnStdout) {
  Outcome o = run("cumulus-allreduce-probe", "--max-iters 2x");
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_EQ(o.err,
            "cumulus-allreduce-probe: error: --max-iters: expected an integer in [1, 1000000], "
            "got \"2x\"\n");
  o = run("cumulus-allreduce-probe", "--sizes 4096,1e3");
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_EQ(o.err,
            "cumulus-allreduce-probe: error: --sizes: expected an integer in [4, 1099511627776], "
            "got \"1e3\"\n");
  o = run("cumulus-allreduce-probe", "--help");
  EXPECT_EQ(o.exit_code, 0);
  EXPECT_EQ(o.err, "");
  EXPECT_NE(o.out.find("Usage: cumulus-allreduce-probe [FLAGS]\n"), std::string::npos) << o.out;
}

// The delay line: a malformed time or a namespace that is not there is an error naming it, and
// the foreground command says so instead of leaving a background process behind.
TEST(LaunchCli, CumulusLinkDelayNamesABadDelayAndAMissingNamespace) {
  Outcome o = run("cumulus-link-delay", "--delay 20 somens");
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_EQ(o.err,
            "cumulus-link-delay: error: --delay: expected a time like 20ms, 0.5ms or 800us, got "
            "\"20\"\n");
  o = run("cumulus-link-delay", "--delay 11s somens");
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_EQ(o.err, "cumulus-link-delay: error: --delay: at most 10s, got \"11s\"\n");
  o = run("cumulus-link-delay", "--delay 20ms /nonexistent/netns");
  EXPECT_EQ(o.exit_code, 1);
  EXPECT_EQ(o.err,
            "cumulus-link-delay: error: cannot open network namespace /nonexistent/netns: No such "
            "file or directory\n");
}

}  // namespace

// --metrics-port: a port in use is a set-up error naming the flag (exit 2, before any worker);
// on a node other than 0 it is ignored, saying so.
TEST(LaunchCli, CumulusRunNamesAMetricsPortInUse) {
  const cumulus::testing::BusyPort busy;
  ASSERT_NE(busy.port(), 0);
  const std::string port = std::to_string(busy.port());
  const std::string logs = ::testing::TempDir() + "/launch_cli_metrics_logs";
  const Outcome o = run("cumulus-run", "--standalone --log-dir " + logs + " --metrics-port " +
                                           port + " -- /bin/true");
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_NE(o.out.find("cumulus-run: error: --metrics-port " + port +
                       ": cannot listen on 127.0.0.1:" + port +
                       " (the port is in use, or the address is not this machine's); pick "
                       "another port, or 0 to serve no metrics\n"),
            std::string::npos)
      << o.out;

  const Outcome other = run("cumulus-run",
                            "--nnodes 2 --node-rank 1 --rdzv-endpoint 127.0.0.1:1 "
                            "--rdzv-timeout 0.2 --log-dir " +
                                logs + " --metrics-port 9400 -- /bin/true");
  EXPECT_EQ(other.out.rfind("cumulus-run: --metrics-port 9400 is node 0's to serve: node 1 "
                            "serves none, and its workers send their metrics to node 0\n",
                            0),
            0u)
      << other.out;
  std::filesystem::remove_all(logs);
}

// cumulus-report: a finished run's page, the torn last line of a killed run skipped; no run
// directory is a usage error that says what RUN_DIR is.
TEST(LaunchCli, CumulusReportWritesTheRunsPage) {
  const std::string dir = ::testing::TempDir() + "/launch_cli_report";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/metrics.jsonl")
      << R"({"type":"train","step":8,"loss":0.5,"time":1.0})"
      << "\n"
      << R"({"type":"eval","step":8,"test_loss":0.75,"time":2.0})"
      << "\n"
      << R"({"type":"summary","steps":8,"test_loss":0.75,"time":3.0})"
      << "\n"
      << R"({"type":"tra)";
  const Outcome o = run("cumulus-report", dir);
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_EQ(o.out, "wrote " + dir +
                       "/report.html: 3 records, state finished, step 8 (1 line(s) "
                       "that are not records skipped)\n");
  std::ifstream page(dir + "/report.html");
  const std::string html((std::istreambuf_iterator<char>(page)), std::istreambuf_iterator<char>());
  EXPECT_NE(html.find(R"(const CUMULUS_EMBEDDED = {"records":[{"loss":0.5,"step":8,"time":1.0,)"
                      R"("type":"train"},)"),
            std::string::npos);

  const Outcome missing = run("cumulus-report", dir + "/nothing");
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_EQ(missing.err, "cumulus-report: error: " + dir +
                             "/nothing/metrics.jsonl: cannot read it; RUN_DIR is the "
                             "trainer.run_dir of a run (it holds metrics.jsonl)\n");
  std::filesystem::remove_all(dir);
}

namespace {

const std::string kBin = std::string(CUMULUS_BINARY_DIR) + "/bin/";

std::string readAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A fresh directory of this test's own.
std::string freshDir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/" + name + "_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace

// An experiment YAML that is a FIFO no one writes: cumulus-run read it for its launch: section and
// waited in open(2) for a writer. It is refused at once, naming it, before any worker starts.
TEST(LaunchCli, CumulusRunRefusesAFifoExperimentAtOnce) {
  const std::string dir = freshDir("launch_cli_fifo_run");
  const std::string fifo = dir + "/x.yaml";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const cumulus::testing::ProcessResult r = cumulus::testing::runProcess(
      {kBin + "cumulus-run", "--standalone", "--log-dir", dir + "/logs", "--", "/bin/true", fifo},
      {}, {}, /*timeout_s=*/60);
  ASSERT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.output, "cumulus-run: error: " + fifo + ": is a FIFO, not a regular file\n");
  std::filesystem::remove_all(dir);
}

// --metrics-host on an address other machines reach says so on the console: the endpoint has no
// authentication.
TEST(LaunchCli, CumulusRunWarnsThatAnExposedMetricsHostHasNoAuthentication) {
  const std::string dir = freshDir("launch_cli_exposed");
  const std::string port = std::to_string(cumulus::testing::freePort());
  const cumulus::testing::ProcessResult r = cumulus::testing::runProcess(
      {kBin + "cumulus-run", "--standalone", "--log-dir", dir, "--metrics-port", port,
       "--metrics-host", "0.0.0.0", "--", "/bin/true"},
      {}, {}, /*timeout_s=*/60);
  ASSERT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("cumulus-run: live metrics: http://0.0.0.0:" + port +
                          "/ (dashboard), http://0.0.0.0:" + port +
                          "/metrics (Prometheus)\n"
                          "cumulus-run: warning: --metrics-host 0.0.0.0 serves this job's "
                          "dashboard and metrics (its run id, loss and every record its workers "
                          "write) on every address of this machine, port " +
                          port +
                          ", with no authentication: anyone who can reach that port can read "
                          "them; keep the default 127.0.0.1 to serve this machine alone (an SSH "
                          "tunnel reaches it from elsewhere), or firewall the port\n"),
            std::string::npos)
      << r.output;
  const cumulus::testing::ProcessResult local = cumulus::testing::runProcess(
      {kBin + "cumulus-run", "--standalone", "--log-dir", dir, "--metrics-port", port,
       "--metrics-host", "localhost", "--", "/bin/true"},
      {}, {}, /*timeout_s=*/60);
  EXPECT_EQ(local.exit_code, 0) << local.output;
  EXPECT_NE(local.output.find("cumulus-run: live metrics: http://localhost:"), std::string::npos)
      << local.output;
  EXPECT_EQ(local.output.find("warning"), std::string::npos) << local.output;
  EXPECT_EQ(cumulus::launch::exposureOf("127.0.0.1"), cumulus::launch::Exposure::kThisMachine);
  EXPECT_EQ(cumulus::launch::exposureOf("::1"), cumulus::launch::Exposure::kThisMachine);
  EXPECT_EQ(cumulus::launch::exposureOf("::"), cumulus::launch::Exposure::kEveryAddress);
  EXPECT_EQ(cumulus::launch::exposureOf("192.0.2.7"), cumulus::launch::Exposure::kNetwork);
  std::filesystem::remove_all(dir);
}

// metrics.jsonl as a FIFO no one writes: cumulus-report waited in open(2). Refused at once.
TEST(LaunchCli, CumulusReportRefusesAFifoAtOnce) {
  const std::string dir = freshDir("launch_cli_fifo_report");
  const std::string fifo = dir + "/metrics.jsonl";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const cumulus::testing::ProcessResult r =
      cumulus::testing::runProcess({kBin + "cumulus-report", dir}, {}, {}, /*timeout_s=*/60);
  ASSERT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.output, "cumulus-report: error: " + fifo + ": is a FIFO, not a regular file\n");
  std::filesystem::remove_all(dir);
}

// A binary file is not "a run with no record yet": it is named as what it is not, with its first
// bad line; an empty file still has no record yet.
TEST(LaunchCli, CumulusReportTellsGarbageFromAnEmptyRun) {
  const std::string dir = freshDir("launch_cli_report_garbage");
  std::ofstream(dir + "/metrics.jsonl", std::ios::binary)
      << std::string("\x7f\x45LF\x02\x01\x01\0\0\0\n\xff\xfe", 13);
  const Outcome garbage = run("cumulus-report", dir);
  EXPECT_EQ(garbage.exit_code, 2);
  EXPECT_EQ(garbage.err, "cumulus-report: error: " + dir +
                             "/metrics.jsonl: not a metrics.jsonl: line 1 is not a JSON record (a "
                             "run's metrics.jsonl holds one JSON object a line)\n");
  std::ofstream(dir + "/metrics.jsonl", std::ios::trunc);
  const Outcome empty = run("cumulus-report", dir);
  EXPECT_EQ(empty.exit_code, 2);
  EXPECT_EQ(empty.err, "cumulus-report: error: " + dir + "/metrics.jsonl: no record in it yet\n");
  EXPECT_FALSE(std::filesystem::exists(dir + "/report.html"));
  std::filesystem::remove_all(dir);
}

// A long run's metrics.jsonl takes the report memory for its page, not for its file: it used to
// hold every record twice over. 100 000 train records and their evaluations and checkpoints
// (17 MB) took 378 MB then and 15 MB now: the bound is 100 MB, the page under 1 MB, the status the
// whole run's.
TEST(LaunchCli, CumulusReportReadsALongRunInBoundedMemory) {
  if (::access("/usr/bin/time", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/time to measure with";
  const std::string dir = freshDir("launch_cli_report_long");
  {
    std::ofstream out(dir + "/metrics.jsonl");
    for (int step = 1; step <= 100000; ++step) {
      const std::string s = std::to_string(step);
      out << R"({"type":"train","step":)" << s << R"(,"epoch":)" << step / 938
          << R"(,"loss":0.5,"lr":0.05,"samples_per_sec":1234.5,"step_time_ms":51.8,)"
          << R"("comm_wait_ms":3.2,"comm_bytes_sent":)" << s << R"(802816,"time":)" << s << "}\n";
      if (step % 100 == 0) {
        out << R"({"type":"eval","step":)" << s << R"(,"test_loss":0.5,"time":)" << s << "}\n";
      }
      if (step % 1000 == 0) {
        out << R"({"type":"checkpoint","step":)" << s << R"(,"stall_ms":3.4,"time":)" << s << "}\n";
      }
    }
  }
  const cumulus::testing::ProcessResult r = cumulus::testing::runProcess(
      {"/usr/bin/time", "-f", "max_rss_kb=%M", kBin + "cumulus-report", dir}, {}, {},
      /*timeout_s=*/120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("wrote " + dir +
                          "/report.html: 101100 records (4226 of them in the page), state "
                          "stopped, step 100000\n"),
            std::string::npos)
      << r.output;
  const std::string rss = cumulus::testing::lastAfter(r.output, "max_rss_kb=");
  ASSERT_FALSE(rss.empty()) << r.output;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // A sanitizer keeps freed memory in quarantine (256 MB under ASan): the same report took 429 MB
  // there. The sanitizer build checks the report's memory accesses, the plain build its size.
#else
  EXPECT_LT(std::stol(rss), 100 * 1024) << r.output;
#endif
  EXPECT_LT(std::filesystem::file_size(dir + "/report.html"), 1u << 20);
  std::filesystem::remove_all(dir);
}

// "<!--<script>" in a record or in the run directory's path made the page's script never run
// (the HTML parser reads "<!--" then "<script" inside a script as the start of an escaped one, and
// the page's own "</script>" no longer ends it). The page's data holds no "<"; it parses back to
// the same strings, and the page has exactly the dashboard's own markup.
TEST(LaunchCli, CumulusReportKeepsMarkupInItsDataOutOfThePage) {
  const std::string base = freshDir("launch_cli_report_markup");
  const std::string dir = base + "/<!--<script>run</script>";  // "<" + "/script>": two directories
  std::filesystem::create_directories(dir);
  const std::string error = "<!--<script>alert(1)</script> & \u2028";
  std::ofstream(dir + "/metrics.jsonl")
      << R"({"type":"train","step":1,"loss":0.5,"time":1.0})"
         "\n"
      << nlohmann::json{{"type", "checkpoint_failed"}, {"step", 1}, {"error", error}, {"time", 2.0}}
             .dump()
      << "\n";
  const cumulus::testing::ProcessResult r =
      cumulus::testing::runProcess({kBin + "cumulus-report", dir}, {}, {}, /*timeout_s=*/60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string html = readAll(dir + "/report.html");
  const std::string marker = "const CUMULUS_EMBEDDED = ";
  const size_t at = html.find(marker);
  ASSERT_NE(at, std::string::npos);
  const size_t end = html.find("; // replaced by cumulus-report\n", at);
  ASSERT_NE(end, std::string::npos);
  const std::string data = html.substr(at + marker.size(), end - at - marker.size());
  EXPECT_EQ(data.find('<'), std::string::npos) << data;
  const nlohmann::json parsed = nlohmann::json::parse(data);
  EXPECT_EQ(parsed["status"]["run_id"], dir);
  EXPECT_EQ(parsed["records"][1]["error"], error);
  const auto count = [](const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t i = text.find(what); i != std::string::npos; i = text.find(what, i + 1)) ++n;
    return n;
  };
  const std::string& page = cumulus::launch::dashboardPage();
  for (const std::string what : {"<!--", "<script", "</script"}) {
    EXPECT_EQ(count(html, what), count(page, what)) << what;
  }
  std::filesystem::remove_all(base);
}
