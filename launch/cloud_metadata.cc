#include "launch/cloud_metadata.h"

#include <time.h>

#include <nlohmann/json.hpp>

#include <algorithm>

namespace cumulus::launch {
namespace {

using nlohmann::json;

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  const size_t e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

// A body quoted in a warning: one line, at most 80 characters.
std::string excerpt(const std::string& body) {
  std::string one_line = trim(body);
  std::replace(one_line.begin(), one_line.end(), '\n', ' ');
  std::replace(one_line.begin(), one_line.end(), '\r', ' ');
  if (one_line.size() > 80) one_line = one_line.substr(0, 77) + "...";
  return "\"" + one_line + "\"";
}

MetadataReading problem(std::string text, std::string key) {
  MetadataReading r;
  r.problem = std::move(text);
  r.problem_key = std::move(key);
  return r;
}

// The problem for an answer that is not a 200 (or no answer at all).
MetadataReading unexpectedAnswer(const HttpResponse& response) {
  if (!response.answered()) {
    return problem(response.timed_out ? "gave " + response.error : "failed: " + response.error,
                   response.timed_out ? "timeout" : "error");
  }
  return problem("answered " + statusText(response.status), std::to_string(response.status));
}

MetadataReading badBody(const HttpResponse& response, const std::string& expected) {
  return problem("answered 200 with a body that is not " + expected + ": " + excerpt(response.body),
                 "body");
}

// The JSON object in `body`, or null when the body is not one.
json parseObject(const std::string& body) {
  json doc = json::parse(body, nullptr, /*allow_exceptions=*/false);
  return doc.is_object() ? doc : json();
}

std::string stringField(const json& object, const char* key) {
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : "";
}

MetadataReading notice(NoticeKind kind, std::string detail) {
  MetadataReading r;
  r.kind = kind;
  r.detail = std::move(detail);
  return r;
}

}  // namespace

MetadataReading readAnswerFailure(const HttpResponse& response) {
  if (response.answered() && response.status == 200) return {};
  return unexpectedAnswer(response);
}

std::string statusText(int status) {
  switch (status) {
    case 400:
      return "400 Bad Request";
    case 401:
      return "401 Unauthorized";
    case 403:
      return "403 Forbidden";
    case 404:
      return "404 Not Found";
    case 405:
      return "405 Method Not Allowed";
    case 500:
      return "500 Internal Server Error";
    case 502:
      return "502 Bad Gateway";
    case 503:
      return "503 Service Unavailable";
    case 504:
      return "504 Gateway Timeout";
    default:
      return std::to_string(status);
  }
}

double monotonicNow() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

MetadataReading readAwsInstanceAction(const HttpResponse& response) {
  if (response.answered() && response.status == 404) return {};
  if (!response.answered() || response.status != 200) return unexpectedAnswer(response);
  const json doc = parseObject(response.body);
  const std::string action = stringField(doc, "action");
  if (action != "terminate" && action != "stop" && action != "hibernate") {
    return badBody(response, "an instance-action JSON");
  }
  std::string detail = "AWS spot/instance-action " + action;
  const std::string time = stringField(doc, "time");
  if (!time.empty()) detail += " at " + time;
  return notice(NoticeKind::kPreemption, detail);
}

MetadataReading readAwsRebalance(const HttpResponse& response) {
  if (response.answered() && response.status == 404) return {};
  if (!response.answered() || response.status != 200) return unexpectedAnswer(response);
  const std::string time = stringField(parseObject(response.body), "noticeTime");
  if (time.empty()) return badBody(response, "a rebalance-recommendation JSON");
  return notice(NoticeKind::kRebalance, "AWS rebalance recommendation at " + time);
}

MetadataReading readAzureScheduledEvents(const HttpResponse& response, const std::string& vm_name) {
  if (!response.answered() || response.status != 200) return unexpectedAnswer(response);
  const json doc = parseObject(response.body);
  auto events = doc.find("Events");
  if (events == doc.end() || !events->is_array()) {
    return badBody(response, "a Scheduled Events JSON");
  }
  for (const json& event : *events) {
    if (!event.is_object()) return badBody(response, "a Scheduled Events JSON");
    if (stringField(event, "EventType") != "Preempt") continue;
    auto resources = event.find("Resources");
    if (resources == event.end() || !resources->is_array()) {
      return badBody(response, "a Scheduled Events JSON");
    }
    const bool ours = std::any_of(resources->begin(), resources->end(), [&](const json& r) {
      return r.is_string() && r.get<std::string>() == vm_name;
    });
    if (!ours) continue;
    std::string detail = "Azure Scheduled Events Preempt";
    const std::string id = stringField(event, "EventId");
    const std::string not_before = stringField(event, "NotBefore");
    if (!id.empty()) detail += " " + id;
    if (!not_before.empty()) detail += " not before " + not_before;
    return notice(NoticeKind::kPreemption, detail);
  }
  return {};
}

MetadataReading readGcpPreempted(const HttpResponse& response) {
  if (!response.answered() || response.status != 200) return unexpectedAnswer(response);
  const std::string body = trim(response.body);
  if (body == "TRUE") return notice(NoticeKind::kPreemption, "GCP instance/preempted = TRUE");
  if (body == "FALSE") return {};
  return badBody(response, "TRUE or FALSE");
}

ImdsToken::ImdsToken(HttpClient& http, std::string base_url, std::chrono::milliseconds timeout,
                     SecondsClock clock, int ttl_seconds)
    : http_(http),
      url_(std::move(base_url) + "/latest/api/token"),
      timeout_(timeout),
      clock_(clock ? std::move(clock) : SecondsClock(monotonicNow)),
      ttl_seconds_(ttl_seconds) {}

ImdsToken::Headers ImdsToken::headers() {
  Headers out;
  if (v1_) return out;
  const double now = clock_();
  if (token_.empty() || now >= expires_at_ - kRefreshMarginSeconds) {
    HttpRequest put;
    put.method = "PUT";
    put.url = url_;
    put.headers = {"X-aws-ec2-metadata-token-ttl-seconds: " + std::to_string(ttl_seconds_)};
    put.timeout = timeout_;
    const HttpResponse response = http_.send(put);
    const bool refused = response.answered() && (response.status == 403 || response.status == 404 ||
                                                 response.status == 405);
    if (refused) {
      v1_ = true;
      token_.clear();
      return out;
    }
    if (!response.answered() || response.status != 200 || trim(response.body).empty()) {
      const MetadataReading r = response.answered() && response.status == 200
                                    ? problem("answered 200 with an empty token", "body")
                                    : unexpectedAnswer(response);
      out.problem = "PUT /latest/api/token " + r.problem;
      if (response.timed_out) {
        out.problem += " (inside a container, the instance's metadata hop limit must be 2 or more)";
      }
      out.problem_key = "token " + r.problem_key;
      return out;
    }
    token_ = trim(response.body);
    expires_at_ = now + ttl_seconds_;
    ++fetched_;
  }
  out.headers = {"X-aws-ec2-metadata-token: " + token_};
  return out;
}

void ImdsToken::invalidate() {
  token_.clear();
  v1_ = false;
}

}  // namespace cumulus::launch
