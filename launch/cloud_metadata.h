#pragma once
// The three clouds' spot-notice protocols, each read strictly (docs/launch.md,
// "Preemption"). No LibTorch; the HTTP goes through an HttpClient, so tests script it.
//
//   AWS    IMDSv2: PUT /latest/api/token (X-aws-ec2-metadata-token-ttl-seconds) for a session
//          token, then GETs with X-aws-ec2-metadata-token. IMDSv1 (plain GETs) only when the PUT
//          is refused (403, 404 or 405). /latest/meta-data/spot/instance-action: 404 = none,
//          200 {"action": "terminate"|"stop"|"hibernate", "time": …} = preemption.
//          /latest/meta-data/events/recommendations/rebalance: 404 = none, 200 {"noticeTime": …}
//          = rebalance recommendation (checkpoint now, keep training).
//   Azure  GET /metadata/scheduledevents?api-version=2020-07-01 with "Metadata: true": 200 JSON
//          whose Events hold one with EventType "Preempt" naming this VM in Resources =
//          preemption (about 30 s ahead). This VM's name comes from
//          /metadata/instance/compute/name.
//   GCP    GET /computeMetadata/v1/instance/preempted with "Metadata-Flavor: Google": 200 TRUE =
//          preemption, 200 FALSE = none.
//
// Anything else (401, 403, 5xx, a body that does not parse, no answer in time) is a reading with
// a `problem`, never "no notice".

#include <functional>
#include <string>
#include <vector>

#include "launch/http_client.h"

namespace cumulus::launch {

enum class NoticeKind { kNone, kPreemption, kRebalance };

// One metadata answer read by its cloud's rules.
struct MetadataReading {
  NoticeKind kind = NoticeKind::kNone;
  std::string detail;       // what was seen, e.g. "AWS spot/instance-action terminate at T"
  std::string problem;      // non-empty: an unexpected answer, e.g. "answered 401 Unauthorized"
  std::string problem_key;  // the same problem on a later poll has the same key ("401", "body")
  bool unexpected() const { return !problem.empty(); }
};

// The problem when `response` is not a 200 (no answer, or another status); none for a 200.
MetadataReading readAnswerFailure(const HttpResponse& response);
MetadataReading readAwsInstanceAction(const HttpResponse& response);
MetadataReading readAwsRebalance(const HttpResponse& response);
// `vm_name`: events that do not list it in Resources concern another VM and are not notices.
MetadataReading readAzureScheduledEvents(const HttpResponse& response, const std::string& vm_name);
MetadataReading readGcpPreempted(const HttpResponse& response);

// "401 Unauthorized", "503 Service Unavailable", "418".
std::string statusText(int status);

// Monotonic seconds; tests pass a fake one.
using SecondsClock = std::function<double()>;
double monotonicNow();

// An IMDSv2 session token, fetched when first needed and again before it expires.
// Not thread-safe. Each call blocks for at most one request's timeout.
class ImdsToken {
 public:
  static constexpr int kDefaultTtlSeconds = 21600;  // 6 h, the most IMDS grants
  static constexpr double kRefreshMarginSeconds = 60;

  ImdsToken(HttpClient& http, std::string base_url, std::chrono::milliseconds timeout,
            SecondsClock clock, int ttl_seconds = kDefaultTtlSeconds);

  struct Headers {
    std::vector<std::string> headers;  // the token header; empty under IMDSv1
    std::string problem;               // the PUT failed in an unexpected way: no GET this time
    std::string problem_key;
  };
  // The headers for the next GET. Fetches a token when none is held or when fewer than
  // kRefreshMarginSeconds of its TTL are left. A refused PUT switches to IMDSv1.
  Headers headers();
  // A GET with our token (or without one, under IMDSv1) was answered 401: forget the token and
  // the IMDSv1 decision, so that the next headers() asks for a new one.
  void invalidate();
  bool usingImdsV1() const { return v1_; }
  int tokensFetched() const { return fetched_; }

 private:
  HttpClient& http_;
  std::string url_;
  std::chrono::milliseconds timeout_;
  SecondsClock clock_;
  int ttl_seconds_;
  std::string token_;
  double expires_at_ = 0;
  bool v1_ = false;
  int fetched_ = 0;
};

}  // namespace cumulus::launch
