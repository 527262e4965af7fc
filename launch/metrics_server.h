#pragma once
// MetricsServer: the HTTP endpoint of cumulus-run --metrics-port on node 0. Routes, GET (and
// HEAD) only:
//   /              the live dashboard (launch/dashboard.html, one self-contained page)
//   /metrics       Prometheus text exposition format 0.0.4 (launch/job_metrics.h)
//   /api/status    the dashboard's JSON summary
//   /api/records   ?after=N: the records from the N-th on, at most 1000 per answer
// Any other path is 404, any other method 405, a malformed request 400; nothing else of the job
// (no token, no path outside the run) is served. Bounded (launch/bounded_http_server.h): a request
// line or header over 8 KiB is refused (414, 400), a request's head must arrive within 2 s of its
// connection (a client that trickles it is closed then), a connection idle for 2 s is closed, at
// most 64 connections are served at once (more wait their turn, and a slow one among them is
// closed as soon as its turn comes); the endpoint runs on threads of its own, apart from the
// workers, so nothing it serves slows the training.
//
// A poller thread reads the workers' records and statuses from the Store every 250 ms into the
// JobMetrics; an answer never waits on the Store. A Store error is tried again at the next poll
// (the Store is node 0's own, beside this server).

#include <memory>
#include <string>
#include <thread>

#include "base/annotated_mutex.h"
#include "comm/store.h"
#include "launch/job_metrics.h"

namespace cumulus::launch {

class BoundedHttpServer;

class MetricsServer {
 public:
  // Listens on host:port (port 0: a free one) and starts serving. Throws std::runtime_error naming
  // --metrics-port when it cannot listen (the port is in use, the host is not this machine's).
  MetricsServer(const std::string& host, int port, JobMetrics& metrics, comm::Store& store);
  // Polls the Store one last time and stops.
  ~MetricsServer();

  int port() const { return port_; }
  // Reads the Store now (the poller does it every 250 ms). Tests and the launcher's last word.
  void pollNow();

 private:
  void serve();
  void pollLoop();

  JobMetrics& metrics_;
  comm::Store& store_;
  std::unique_ptr<BoundedHttpServer> server_;
  int port_ = 0;
  std::thread listener_;
  std::thread poller_;
  base::Mutex mutex_;
  base::CondVar stop_changed_;
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
  base::Mutex poll_mutex_;  // one poll at a time
};

// Who can reach a server bound to `host` (--metrics-host): this machine alone (every address it
// resolves to is a loopback one), every address of this machine (0.0.0.0, ::), or other machines
// through one address. A host that does not resolve counts as the last. Blocks for name resolution.
enum class Exposure { kThisMachine, kEveryAddress, kNetwork };
Exposure exposureOf(const std::string& host);

// The dashboard page (launch/dashboard.html, built in).
const std::string& dashboardPage();
// The page with `data` ({"records": […], "status": … or null}) built in: what cumulus-report
// writes for a finished run. The data is written by scriptSafeJson.
std::string dashboardReport(const nlohmann::json& data);
// `data` as JSON that is safe inside an HTML <script>: no "<", ">" or "&" (written \u003c,
// \u003e, \u0026), and U+2028, U+2029 written \u2028, \u2029; JSON.parse and JavaScript read it
// as the same value. Invalid UTF-8 in a string becomes U+FFFD.
std::string scriptSafeJson(const nlohmann::json& data);

}  // namespace cumulus::launch
