#pragma once
// Where a spot-preemption notice comes from, besides SIGTERM to the launcher or a worker.
//
//   file:PATH   a notice once PATH exists (what a node's shutdown hook or a test touches)
//   aws         IMDSv2 at 169.254.169.254: spot/instance-action, and the rebalance
//               recommendation (a softer signal: checkpoint now, keep training)
//   gcp         metadata.google.internal: instance/preempted
//   azure       Scheduled Events at 169.254.169.254: a Preempt event for this VM
//   auto        whichever of gcp, aws (an IMDSv2 token), azure answers as itself; probed again
//               every 60 s until one does
//   url:URL     one of those protocols at another host (a test's fake server, a proxy), chosen
//               by the path: http://HOST[:PORT]/latest/meta-data/spot/instance-action (AWS),
//               …/metadata/scheduledevents?api-version=… (Azure), …/computeMetadata/… (GCP)
//
// The protocols are in cloud_metadata.h. A source that answers anything unexpected (401, 403,
// 5xx, a body that does not parse, no answer in time) is reported through `warn` once per kind
// of problem, naming the source and the status, and polled again; it is never read as "no
// notice".
//
// poll() blocks for at most a few request timeouts (1 s each by default; auto's probe of three
// services, at most 3). Not thread-safe.

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "launch/cloud_metadata.h"
#include "launch/http_client.h"

namespace cumulus::launch {

struct NoticeEvent {
  NoticeKind kind = NoticeKind::kNone;
  std::string detail;  // what was seen (e.g. the AWS action and time)
};

class NoticeSource {
 public:
  virtual ~NoticeSource() = default;
  // A pending preemption is reported on every poll; a rebalance recommendation once.
  virtual NoticeEvent poll() = 0;
  virtual std::string describe() const = 0;
};

struct NoticeSourceOptions {
  std::chrono::milliseconds http_timeout{1000};
  // One warning line, without a trailing newline. Empty: stderr.
  std::function<void(const std::string&)> warn;
  // The HTTP client (the source owns it). Empty: libcurl.
  std::function<std::unique_ptr<HttpClient>()> http;
  SecondsClock clock;  // empty: CLOCK_MONOTONIC
  // Where the shorthands (and auto) look: the clouds' link-local metadata addresses.
  std::string aws_base = "http://169.254.169.254";
  std::string azure_base = "http://169.254.169.254";
  std::string gcp_base = "http://metadata.google.internal";
};

// Parses the spec (see above). Throws UsageError (options.h) for a malformed one. Makes no
// request: the first poll does.
std::unique_ptr<NoticeSource> makeNoticeSource(const std::string& spec,
                                               NoticeSourceOptions options = {});

}  // namespace cumulus::launch
