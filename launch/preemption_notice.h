#pragma once
// Where a spot-preemption notice comes from, besides SIGTERM to the launcher or a worker.
//
//   file:PATH    a notice once PATH exists (what a node's shutdown hook or a test touches)
//   url:URL      polled with HTTP GET (plain http://, as cloud metadata services are):
//                - AWS  …/latest/meta-data/spot/instance-action: 404 = no notice; 200 with
//                  JSON {"action": "terminate"|"stop"|"hibernate", "time": …} = notice
//                - GCP  …/computeMetadata/v1/instance/preempted (sent with
//                  "Metadata-Flavor: Google"): body TRUE = notice, FALSE = none
//                Any other 200 body is not a notice. An unreachable or slow URL is not a notice
//                either: it is reported once, then polled again.
//
// poll() blocks for at most the source's timeout (1 s by default). Not thread-safe.

#include <chrono>
#include <memory>
#include <string>

namespace cumulus::launch {

class NoticeSource {
 public:
  virtual ~NoticeSource() = default;
  // True once a notice is pending; `detail` says what was seen (e.g. the AWS action and time).
  virtual bool poll(std::string& detail) = 0;
  virtual std::string describe() const = 0;
};

// Parses "file:PATH" or "url:http://HOST[:PORT]/PATH". Throws UsageError (options.h) otherwise.
std::unique_ptr<NoticeSource> makeNoticeSource(const std::string& spec,
                                               std::chrono::milliseconds http_timeout =
                                                   std::chrono::milliseconds(1000));

// The decision for one metadata response, exposed for tests: status code and body → notice?
bool isPreemptionResponse(int status, const std::string& body, std::string& detail);

}  // namespace cumulus::launch
