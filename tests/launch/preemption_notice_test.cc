// The notice protocols without processes or sockets: each cloud's answers read strictly, the
// IMDSv2 token and its refresh on an injected clock, the once-per-problem warnings, `auto`, and
// the spec parser. The HTTP client is scripted; tests/launch/launcher_test.cc runs the same code
// against real fake metadata servers.

#include <gtest/gtest.h>

#include <deque>
#include <string>
#include <vector>

#include "launch/cloud_metadata.h"
#include "launch/options.h"
#include "launch/preemption_notice.h"

namespace cumulus::launch {
namespace {

HttpResponse answer(int status, std::string body = "") {
  HttpResponse r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

HttpResponse noAnswerInTime() {
  HttpResponse r;
  r.error = "no answer within 1000 ms";
  r.timed_out = true;
  return r;
}

// Answers requests in order from a script and records them as "METHOD URL | header | header".
// Each entry names the request it expects, so a protocol step out of order fails the test.
class ScriptedHttp final : public HttpClient {
 public:
  struct Step {
    std::string expect;  // "METHOD URL"
    HttpResponse response;
  };
  explicit ScriptedHttp(std::deque<Step>* script, std::vector<std::string>* seen)
      : script_(script), seen_(seen) {}
  HttpResponse send(const HttpRequest& request) override {
    std::string line = request.method + " " + request.url;
    for (const std::string& h : request.headers) line += " | " + h;
    seen_->push_back(line);
    if (script_->empty()) {
      ADD_FAILURE() << "unscripted request: " << line;
      return answer(599);
    }
    Step step = script_->front();
    script_->pop_front();
    EXPECT_EQ(line.substr(0, line.find(" | ")), step.expect);
    return step.response;
  }

 private:
  std::deque<ScriptedHttp::Step>* script_;
  std::vector<std::string>* seen_;
};

class NoticeTest : public ::testing::Test {
 protected:
  NoticeSourceOptions options() {
    NoticeSourceOptions o;
    o.http = [this] { return std::make_unique<ScriptedHttp>(&script_, &seen_); };
    o.warn = [this](const std::string& line) { warnings_.push_back(line); };
    o.clock = [this] { return now_; };
    return o;
  }
  void expect(std::string request, HttpResponse response) {
    script_.push_back({std::move(request), std::move(response)});
  }

  std::deque<ScriptedHttp::Step> script_;
  std::vector<std::string> seen_;
  std::vector<std::string> warnings_;
  double now_ = 1000;
};

const std::string kAws = "http://127.0.0.1:8000";
const std::string kAction = "/latest/meta-data/spot/instance-action";
const std::string kRebalance = "/latest/meta-data/events/recommendations/rebalance";

TEST(MetadataReadingTest, AwsInstanceAction) {
  EXPECT_EQ(readAwsInstanceAction(answer(404)).kind, NoticeKind::kNone);
  EXPECT_FALSE(readAwsInstanceAction(answer(404)).unexpected());
  MetadataReading r =
      readAwsInstanceAction(answer(200, R"({"action": "stop", "time": "2026-11-23T22:30:00Z"})"));
  EXPECT_EQ(r.kind, NoticeKind::kPreemption);
  EXPECT_EQ(r.detail, "AWS spot/instance-action stop at 2026-11-23T22:30:00Z");
  EXPECT_EQ(readAwsInstanceAction(answer(401)).problem, "answered 401 Unauthorized");
  EXPECT_EQ(readAwsInstanceAction(answer(403)).problem, "answered 403 Forbidden");
  EXPECT_EQ(readAwsInstanceAction(answer(503)).problem, "answered 503 Service Unavailable");
  EXPECT_EQ(readAwsInstanceAction(answer(200, "{\"action\": \"reboot\"}")).problem,
            "answered 200 with a body that is not an instance-action JSON: "
            "\"{\"action\": \"reboot\"}\"");
  EXPECT_EQ(readAwsInstanceAction(answer(200, "<html>")).problem_key, "body");
  EXPECT_EQ(readAwsInstanceAction(noAnswerInTime()).problem, "gave no answer within 1000 ms");
  EXPECT_EQ(readAwsInstanceAction(noAnswerInTime()).problem_key, "timeout");
}

TEST(MetadataReadingTest, AwsRebalance) {
  EXPECT_EQ(readAwsRebalance(answer(404)).kind, NoticeKind::kNone);
  MetadataReading r = readAwsRebalance(answer(200, R"({"noticeTime": "2026-11-23T22:25:00Z"})"));
  EXPECT_EQ(r.kind, NoticeKind::kRebalance);
  EXPECT_EQ(r.detail, "AWS rebalance recommendation at 2026-11-23T22:25:00Z");
  EXPECT_EQ(readAwsRebalance(answer(200, "[]")).problem_key, "body");
  EXPECT_EQ(readAwsRebalance(answer(500)).problem, "answered 500 Internal Server Error");
}

TEST(MetadataReadingTest, AzureScheduledEventsOnlyAPreemptOfThisVm) {
  const std::string none = R"({"DocumentIncarnation": 1, "Events": []})";
  const std::string other_vm =
      R"({"DocumentIncarnation": 2, "Events": [{"EventId": "E1", "EventType": "Preempt",
          "Resources": ["vm-2"], "NotBefore": "Mon, 23 Nov 2026 22:30:30 GMT"}]})";
  const std::string freeze_ours =
      R"({"DocumentIncarnation": 2, "Events": [{"EventId": "E2", "EventType": "Freeze",
          "Resources": ["vm-1"]}]})";
  const std::string preempt_ours =
      R"({"DocumentIncarnation": 3, "Events": [{"EventId": "E3", "EventType": "Preempt",
          "Resources": ["vm-1"], "NotBefore": "Mon, 23 Nov 2026 22:30:30 GMT"}]})";
  EXPECT_EQ(readAzureScheduledEvents(answer(200, none), "vm-1").kind, NoticeKind::kNone);
  EXPECT_EQ(readAzureScheduledEvents(answer(200, other_vm), "vm-1").kind, NoticeKind::kNone);
  EXPECT_EQ(readAzureScheduledEvents(answer(200, freeze_ours), "vm-1").kind, NoticeKind::kNone);
  MetadataReading r = readAzureScheduledEvents(answer(200, preempt_ours), "vm-1");
  EXPECT_EQ(r.kind, NoticeKind::kPreemption);
  EXPECT_EQ(r.detail, "Azure Scheduled Events Preempt E3 not before Mon, 23 Nov 2026 22:30:30 GMT");
  EXPECT_EQ(readAzureScheduledEvents(answer(200, "{\"Events\": 3}"), "vm-1").problem_key, "body");
  EXPECT_EQ(readAzureScheduledEvents(answer(200, "not json"), "vm-1").problem_key, "body");
  EXPECT_EQ(readAzureScheduledEvents(answer(400), "vm-1").problem, "answered 400 Bad Request");
}

TEST(MetadataReadingTest, GcpPreempted) {
  EXPECT_EQ(readGcpPreempted(answer(200, "FALSE")).kind, NoticeKind::kNone);
  EXPECT_EQ(readGcpPreempted(answer(200, "TRUE\n")).kind, NoticeKind::kPreemption);
  EXPECT_EQ(readGcpPreempted(answer(200, "true")).problem,
            "answered 200 with a body that is not TRUE or FALSE: \"true\"");
  EXPECT_EQ(readGcpPreempted(answer(403)).problem, "answered 403 Forbidden");
  EXPECT_EQ(readGcpPreempted(answer(404)).problem, "answered 404 Not Found");
}

TEST_F(NoticeTest, ImdsV2TokenIsFetchedOnceAndRefreshedAMinuteBeforeItExpires) {
  std::vector<std::string> seen;
  ScriptedHttp http(&script_, &seen);
  ImdsToken token(
      http, kAws, std::chrono::milliseconds(1000), [this] { return now_; }, 600);
  expect("PUT " + kAws + "/latest/api/token", answer(200, "tok-1"));
  EXPECT_EQ(token.headers().headers, std::vector<std::string>{"X-aws-ec2-metadata-token: tok-1"});
  EXPECT_EQ(seen, std::vector<std::string>{"PUT " + kAws +
                                           "/latest/api/token | "
                                           "X-aws-ec2-metadata-token-ttl-seconds: 600"});
  now_ += 600 - 61;  // 61 s left: still good
  EXPECT_EQ(token.headers().headers, std::vector<std::string>{"X-aws-ec2-metadata-token: tok-1"});
  EXPECT_EQ(token.tokensFetched(), 1);
  now_ += 2;  // 59 s left: a new one before the old one dies
  expect("PUT " + kAws + "/latest/api/token", answer(200, "tok-2\n"));
  EXPECT_EQ(token.headers().headers, std::vector<std::string>{"X-aws-ec2-metadata-token: tok-2"});
  EXPECT_EQ(token.tokensFetched(), 2);
  token.invalidate();  // a 401: the next call fetches at once
  expect("PUT " + kAws + "/latest/api/token", answer(200, "tok-3"));
  EXPECT_EQ(token.headers().headers, std::vector<std::string>{"X-aws-ec2-metadata-token: tok-3"});
  EXPECT_TRUE(script_.empty());
}

TEST_F(NoticeTest, ImdsV1OnlyWhenThePutIsRefused) {
  for (int refused : {403, 404, 405}) {
    std::vector<std::string> seen;
    ScriptedHttp http(&script_, &seen);
    ImdsToken token(http, kAws, std::chrono::milliseconds(1000), [this] { return now_; });
    expect("PUT " + kAws + "/latest/api/token", answer(refused));
    ImdsToken::Headers h = token.headers();
    EXPECT_TRUE(h.headers.empty()) << refused;
    EXPECT_TRUE(h.problem.empty()) << refused;
    EXPECT_TRUE(token.usingImdsV1()) << refused;
  }
  for (HttpResponse failed : {answer(500), answer(401), noAnswerInTime(), answer(200, "")}) {
    std::vector<std::string> seen;
    ScriptedHttp http(&script_, &seen);
    ImdsToken token(http, kAws, std::chrono::milliseconds(1000), [this] { return now_; });
    expect("PUT " + kAws + "/latest/api/token", failed);
    ImdsToken::Headers h = token.headers();
    EXPECT_FALSE(token.usingImdsV1()) << failed.status;
    EXPECT_TRUE(h.headers.empty());
    EXPECT_EQ(h.problem.rfind("PUT /latest/api/token ", 0), 0u) << h.problem;
  }
}

TEST_F(NoticeTest, AwsPollsWithTheTokenAndReportsTheRebalanceOnce) {
  auto source = makeNoticeSource("url:" + kAws + kAction, options());
  expect("PUT " + kAws + "/latest/api/token", answer(200, "tok"));
  expect("GET " + kAws + kAction, answer(404));
  expect("GET " + kAws + kRebalance, answer(404));
  EXPECT_EQ(source->poll().kind, NoticeKind::kNone);
  EXPECT_EQ(seen_[1], "GET " + kAws + kAction + " | X-aws-ec2-metadata-token: tok");
  expect("GET " + kAws + kAction, answer(404));
  expect("GET " + kAws + kRebalance, answer(200, R"({"noticeTime": "T1"})"));
  NoticeEvent e = source->poll();
  EXPECT_EQ(e.kind, NoticeKind::kRebalance);
  EXPECT_EQ(e.detail, "AWS rebalance recommendation at T1");
  expect("GET " + kAws + kAction, answer(404));  // the recommendation is not asked again
  EXPECT_EQ(source->poll().kind, NoticeKind::kNone);
  expect("GET " + kAws + kAction, answer(200, R"({"action": "terminate", "time": "T2"})"));
  e = source->poll();
  EXPECT_EQ(e.kind, NoticeKind::kPreemption);
  EXPECT_EQ(e.detail, "AWS spot/instance-action terminate at T2");
  EXPECT_TRUE(warnings_.empty());
  EXPECT_TRUE(script_.empty());
}

TEST_F(NoticeTest, AnAwsTokenRejectedEarlyIsReplacedWithoutAWarning) {
  auto source = makeNoticeSource("url:" + kAws + kAction, options());
  expect("PUT " + kAws + "/latest/api/token", answer(200, "old"));
  expect("GET " + kAws + kAction, answer(401));
  expect("PUT " + kAws + "/latest/api/token", answer(200, "new"));
  expect("GET " + kAws + kAction, answer(404));
  expect("GET " + kAws + kRebalance, answer(404));
  EXPECT_EQ(source->poll().kind, NoticeKind::kNone);
  EXPECT_EQ(seen_[3], "GET " + kAws + kAction + " | X-aws-ec2-metadata-token: new");
  EXPECT_TRUE(warnings_.empty());
  EXPECT_TRUE(script_.empty());
}

TEST_F(NoticeTest, EachUnexpectedAnswerIsOneWarningNamingSourceAndStatus) {
  const std::string spec = "url:" + kAws + kAction;
  auto source = makeNoticeSource(spec, options());
  expect("PUT " + kAws + "/latest/api/token", answer(200, "tok"));
  for (int poll = 0; poll < 3; ++poll) {
    expect("GET " + kAws + kAction, answer(503));
    EXPECT_EQ(source->poll().kind, NoticeKind::kNone);
  }
  expect("GET " + kAws + kAction, answer(401));  // still 401 with a fresh token
  expect("PUT " + kAws + "/latest/api/token", answer(200, "tok2"));
  expect("GET " + kAws + kAction, answer(401));
  EXPECT_EQ(source->poll().kind, NoticeKind::kNone);
  expect("GET " + kAws + kAction, answer(200, "<html>"));
  EXPECT_EQ(source->poll().kind, NoticeKind::kNone);
  expect("GET " + kAws + kAction, noAnswerInTime());
  EXPECT_EQ(source->poll().kind, NoticeKind::kNone);
  expect("GET " + kAws + kAction, answer(200, R"({"action": "terminate"})"));
  EXPECT_EQ(source->poll().kind, NoticeKind::kPreemption);  // polling went on
  const std::string head = "cumulus-run: warning: preemption notice source " + spec + ": ";
  const std::string tail = "; this is not read as \"no notice\" (still polling)";
  EXPECT_EQ(
      warnings_,
      (std::vector<std::string>{
          head + "GET " + kAction + " answered 503 Service Unavailable" + tail,
          head + "GET " + kAction + " answered 401 Unauthorized" + tail,
          head + "GET " + kAction +
              " answered 200 with a body that is not an instance-action JSON: \"<html>\"" + tail,
          head + "GET " + kAction + " gave no answer within 1000 ms" + tail}));
  EXPECT_TRUE(script_.empty());
}

TEST_F(NoticeTest, ATokenPutThatTimesOutIsAWarningThatMentionsTheHopLimit) {
  auto source = makeNoticeSource("aws", options());
  expect("PUT http://169.254.169.254/latest/api/token", noAnswerInTime());
  EXPECT_EQ(source->poll().kind, NoticeKind::kNone);
  ASSERT_EQ(warnings_.size(), 1u);
  EXPECT_EQ(warnings_[0],
            "cumulus-run: warning: preemption notice source aws "
            "(http://169.254.169.254/latest/meta-data/spot/instance-action): PUT /latest/api/token "
            "gave no answer within 1000 ms (inside a container, the instance's metadata hop limit "
            "must be 2 or more); this is not read as \"no notice\" (still polling)");
}

TEST_F(NoticeTest, AzureAsksForThisVmsNameThenForTheEvents) {
  const std::string base = "http://127.0.0.1:9000";
  auto source = makeNoticeSource("url:" + base + "/metadata/scheduledevents?api-version=2020-07-01",
                                 options());
  expect("GET " + base + "/metadata/instance/compute/name?api-version=2020-09-01&format=text",
         answer(200, "vm-1"));
  expect("GET " + base + "/metadata/scheduledevents?api-version=2020-07-01",
         answer(200, R"({"DocumentIncarnation": 0, "Events": []})"));
  EXPECT_EQ(source->poll().kind, NoticeKind::kNone);
  EXPECT_EQ(seen_[0].substr(seen_[0].find(" | ")), " | Metadata: true");
  EXPECT_EQ(seen_[1].substr(seen_[1].find(" | ")), " | Metadata: true");
  expect("GET " + base + "/metadata/scheduledevents?api-version=2020-07-01",
         answer(200, R"({"Events": [{"EventType": "Preempt", "Resources": ["vm-1"]}]})"));
  EXPECT_EQ(source->poll().kind, NoticeKind::kPreemption);
  EXPECT_TRUE(script_.empty());
}

TEST_F(NoticeTest, GcpSendsTheMetadataFlavorHeader) {
  auto source = makeNoticeSource("gcp", options());
  const std::string url = "http://metadata.google.internal/computeMetadata/v1/instance/preempted";
  expect("GET " + url, answer(200, "FALSE"));
  expect("GET " + url, answer(200, "TRUE"));
  EXPECT_EQ(source->poll().kind, NoticeKind::kNone);
  EXPECT_EQ(source->poll().kind, NoticeKind::kPreemption);
  EXPECT_EQ(seen_[0], "GET " + url + " | Metadata-Flavor: Google");
}

TEST_F(NoticeTest, AutoUsesTheFirstServiceThatAnswersAndProbesAgainAfterAMinute) {
  NoticeSourceOptions o = options();
  auto source = makeNoticeSource("auto", o);
  const std::string gcp =
      "GET http://metadata.google.internal/computeMetadata/v1/instance/preempted";
  const std::string put = "PUT http://169.254.169.254/latest/api/token";
  const std::string azure =
      "GET http://169.254.169.254/metadata/scheduledevents?api-version=2020-07-01";
  HttpResponse unreachable;
  unreachable.error = "Couldn't resolve host name";
  expect(gcp, unreachable);
  expect(put, noAnswerInTime());
  expect(azure, noAnswerInTime());
  EXPECT_EQ(source->poll().kind, NoticeKind::kNone);
  EXPECT_EQ(warnings_, std::vector<std::string>{
                           "cumulus-run: warning: preemption notice source auto: no cloud "
                           "metadata service answered (tried gcp, aws, azure; trying again every "
                           "60 s); this is not read as \"no notice\" (still polling)"});
  now_ += 30;
  EXPECT_EQ(source->poll().kind, NoticeKind::kNone);  // no probe within the minute
  EXPECT_TRUE(script_.empty());
  now_ += 31;
  expect(gcp, unreachable);
  expect(put, answer(405));  // refused: another cloud's service, not AWS without IMDSv2
  expect(azure, answer(200, "{}"));  // not a Scheduled Events document
  EXPECT_EQ(source->poll().kind, NoticeKind::kNone);
  EXPECT_EQ(warnings_.size(), 1u);  // the same problem: no second line
  now_ += 61;
  expect(gcp, unreachable);
  expect(put, answer(200, "tok"));
  expect("GET http://169.254.169.254" + kAction, answer(404));  // aws answers as itself
  expect("GET http://169.254.169.254" + kAction, answer(404));  // the first poll, same token
  expect("GET http://169.254.169.254" + kRebalance, answer(404));
  EXPECT_EQ(source->poll().kind, NoticeKind::kNone);
  EXPECT_EQ(warnings_.back(), "cumulus-run: preemption notices: using auto (aws)");
  EXPECT_EQ(source->describe(), "auto (aws)");
  EXPECT_TRUE(script_.empty());
}

TEST(NoticeSpecTest, SpecsAndTheirMistakes) {
  EXPECT_EQ(makeNoticeSource("file:/tmp/n")->describe(), "file:/tmp/n");
  EXPECT_EQ(makeNoticeSource("gcp")->describe(),
            "gcp (http://metadata.google.internal/computeMetadata/v1/instance/preempted)");
  EXPECT_EQ(makeNoticeSource("azure")->describe(),
            "azure (http://169.254.169.254/metadata/scheduledevents)");
  EXPECT_EQ(
      makeNoticeSource("url:http://[::1]:80/computeMetadata/v1/instance/preempted")->describe(),
      "url:http://[::1]:80/computeMetadata/v1/instance/preempted");
  try {
    makeNoticeSource("url:http://127.0.0.1:80/latest/meta-data/");
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()),
              "--preemption-notice: http://127.0.0.1:80/latest/meta-data/ is none of the metadata "
              "paths Cumulus speaks: …/latest/meta-data/spot/instance-action (AWS), "
              "…/metadata/scheduledevents?api-version=2020-07-01 (Azure), "
              "…/computeMetadata/v1/instance/preempted (GCP)");
  }
  EXPECT_THROW(
      makeNoticeSource("url:https://169.254.169.254/latest/meta-data/spot/instance-action"),
      UsageError);
  EXPECT_THROW(makeNoticeSource("url:http://h:99999/computeMetadata/v1/instance/preempted"),
               UsageError);
  EXPECT_THROW(makeNoticeSource("ec2"), UsageError);
}

}  // namespace
}  // namespace cumulus::launch
