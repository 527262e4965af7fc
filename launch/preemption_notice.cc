#include "launch/preemption_notice.h"

#include <cstdio>
#include <filesystem>
#include <regex>
#include <set>

#include "launch/options.h"

namespace cumulus::launch {
namespace {

constexpr const char* kAwsActionPath = "/latest/meta-data/spot/instance-action";
constexpr const char* kAwsRebalancePath = "/latest/meta-data/events/recommendations/rebalance";
constexpr const char* kAzureEventsPath = "/metadata/scheduledevents";
constexpr const char* kAzureApiVersion = "api-version=2020-07-01";
constexpr const char* kAzureNamePath =
    "/metadata/instance/compute/name?api-version=2020-09-01&format=text";
constexpr const char* kGcpPreemptedPath = "/computeMetadata/v1/instance/preempted";
constexpr double kAutoProbeEverySeconds = 60;

// Warns once per source and kind of problem, so a metadata service that keeps answering 503 is
// one line, not one every poll.
class ProblemLog {
 public:
  ProblemLog(std::string source, std::function<void(const std::string&)> warn)
      : source_(std::move(source)), warn_(std::move(warn)) {}
  void report(const std::string& key, const std::string& what) {
    if (!seen_.insert(key).second) return;
    const std::string line = "cumulus-run: warning: preemption notice source " + source_ + ": " +
                             what + "; this is not read as \"no notice\" (still polling)";
    if (warn_) {
      warn_(line);
    } else {
      std::fprintf(stderr, "%s\n", line.c_str());
    }
  }

 private:
  std::string source_;
  std::function<void(const std::string&)> warn_;
  std::set<std::string> seen_;
};

class FileNotice final : public NoticeSource {
 public:
  explicit FileNotice(std::string path) : path_(std::move(path)) {}
  NoticeEvent poll() override {
    std::error_code ec;
    if (!std::filesystem::exists(path_, ec)) return {};
    return {NoticeKind::kPreemption, "notice file " + path_};
  }
  std::string describe() const override { return "file:" + path_; }

 private:
  std::string path_;
};

// What every metadata source shares: a client, a timeout and the problem log.
class MetadataNotice : public NoticeSource {
 public:
  MetadataNotice(std::string description, const NoticeSourceOptions& options)
      : description_(std::move(description)),
        http_(options.http ? options.http() : makeCurlHttpClient()),
        timeout_(options.http_timeout),
        log_(description_, options.warn) {}
  std::string describe() const override { return description_; }
  // One request that tells whether this cloud's service answers here (for `auto`).
  virtual bool answers() = 0;

 protected:
  HttpResponse get(const std::string& url, std::vector<std::string> headers) {
    HttpRequest request;
    request.url = url;
    request.headers = std::move(headers);
    request.timeout = timeout_;
    return http_->send(request);
  }
  // Reports an unexpected reading; true when there was one.
  bool reported(const std::string& request, const MetadataReading& r) {
    if (!r.unexpected()) return false;
    log_.report(request + " " + r.problem_key, request + " " + r.problem);
    return true;
  }

  std::string description_;
  std::unique_ptr<HttpClient> http_;
  std::chrono::milliseconds timeout_;
  ProblemLog log_;
};

class AwsNotice final : public MetadataNotice {
 public:
  AwsNotice(std::string description, const std::string& base, const NoticeSourceOptions& options)
      : MetadataNotice(std::move(description), options),
        base_(base),
        token_(*http_, base, options.http_timeout, options.clock) {}

  NoticeEvent poll() override {
    MetadataReading action;
    if (!getWithToken(kAwsActionPath, readAwsInstanceAction, action)) return {};
    if (action.kind == NoticeKind::kPreemption) return {action.kind, action.detail};
    if (rebalance_seen_) return {};
    MetadataReading rebalance;
    if (!getWithToken(kAwsRebalancePath, readAwsRebalance, rebalance)) return {};
    if (rebalance.kind != NoticeKind::kRebalance) return {};
    rebalance_seen_ = true;  // the recommendation stays up; one checkpoint answers it
    return {rebalance.kind, rebalance.detail};
  }

  // Only an IMDSv2 token counts: another cloud's service may refuse the PUT and answer the
  // IMDSv1 GET with a 404 that would pass for "no notice".
  bool answers() override {
    ImdsToken::Headers h = token_.headers();
    if (!h.problem.empty() || token_.usingImdsV1()) return false;
    HttpResponse r = get(base_ + kAwsActionPath, h.headers);
    return r.answered() && (r.status == 200 || r.status == 404);
  }

 private:
  // GETs `path` with the session token; a 401 gets a fresh token and one retry (the token can
  // die early, e.g. when the metadata service restarts). False when the answer was unexpected.
  bool getWithToken(const char* path, MetadataReading (*read)(const HttpResponse&),
                    MetadataReading& out) {
    for (int attempt = 0;; ++attempt) {
      ImdsToken::Headers h = token_.headers();
      if (!h.problem.empty()) {
        log_.report(h.problem_key, h.problem);
        return false;
      }
      HttpResponse response = get(base_ + path, h.headers);
      if (attempt == 0 && response.answered() && response.status == 401) {
        token_.invalidate();
        continue;
      }
      out = read(response);
      std::string request = std::string("GET ") + path;
      if (response.status == 401 && token_.usingImdsV1()) {
        request += " (IMDSv1: the token PUT was refused)";
      }
      return !reported(request, out);
    }
  }

  std::string base_;
  ImdsToken token_;
  bool rebalance_seen_ = false;
};

class AzureNotice final : public MetadataNotice {
 public:
  AzureNotice(std::string description, std::string base, std::string events_url,
              const NoticeSourceOptions& options)
      : MetadataNotice(std::move(description), options),
        base_(std::move(base)),
        events_url_(std::move(events_url)) {}

  NoticeEvent poll() override {
    if (vm_name_.empty()) {
      // Scheduled Events lists the events of every VM in the availability set or scale set;
      // only those naming this VM are its notice.
      HttpResponse r = get(base_ + kAzureNamePath, {"Metadata: true"});
      MetadataReading name = readAnswerFailure(r);
      if (!name.unexpected()) {
        vm_name_ = r.body.substr(0, r.body.find_last_not_of(" \r\n") + 1);
        if (vm_name_.empty()) name = {NoticeKind::kNone, "", "answered 200 with no name", "body"};
      }
      if (reported("GET /metadata/instance/compute/name", name)) return {};
    }
    MetadataReading events =
        readAzureScheduledEvents(get(events_url_, {"Metadata: true"}), vm_name_);
    if (reported("GET /metadata/scheduledevents", events)) return {};
    return {events.kind, events.detail};
  }

  bool answers() override {
    HttpResponse r = get(events_url_, {"Metadata: true"});
    return r.answered() && r.status == 200 && !readAzureScheduledEvents(r, "").unexpected();
  }

 private:
  std::string base_;
  std::string events_url_;
  std::string vm_name_;
};

class GcpNotice final : public MetadataNotice {
 public:
  GcpNotice(std::string description, std::string url, const NoticeSourceOptions& options)
      : MetadataNotice(std::move(description), options), url_(std::move(url)) {}

  NoticeEvent poll() override {
    MetadataReading r = readGcpPreempted(get(url_, {"Metadata-Flavor: Google"}));
    if (reported("GET " + url_.substr(url_.find("/computeMetadata/")), r)) return {};
    return {r.kind, r.detail};
  }

  bool answers() override {
    HttpResponse r = get(url_, {"Metadata-Flavor: Google"});
    return r.answered() && !readGcpPreempted(r).unexpected();
  }

 private:
  std::string url_;
};

std::unique_ptr<MetadataNotice> makeAws(const NoticeSourceOptions& o, std::string description) {
  return std::make_unique<AwsNotice>(std::move(description), o.aws_base, o);
}
std::unique_ptr<MetadataNotice> makeAzure(const NoticeSourceOptions& o, std::string description) {
  return std::make_unique<AzureNotice>(std::move(description), o.azure_base,
                                       o.azure_base + kAzureEventsPath + "?" + kAzureApiVersion, o);
}
std::unique_ptr<MetadataNotice> makeGcp(const NoticeSourceOptions& o, std::string description) {
  return std::make_unique<GcpNotice>(std::move(description), o.gcp_base + kGcpPreemptedPath, o);
}

// Probes gcp, aws and azure in turn until one answers as itself, then polls that one.
class AutoNotice final : public NoticeSource {
 public:
  explicit AutoNotice(NoticeSourceOptions options)
      : options_(std::move(options)),
        clock_(options_.clock ? options_.clock : SecondsClock(monotonicNow)),
        log_("auto", options_.warn) {}

  NoticeEvent poll() override {
    if (chosen_) return chosen_->poll();
    const double now = clock_();
    if (next_probe_ >= 0 && now < next_probe_) return {};
    next_probe_ = now + kAutoProbeEverySeconds;
    std::unique_ptr<MetadataNotice> candidates[] = {makeGcp(options_, "auto (gcp)"),
                                                    makeAws(options_, "auto (aws)"),
                                                    makeAzure(options_, "auto (azure)")};
    for (auto& candidate : candidates) {
      if (!candidate->answers()) continue;
      chosen_ = std::move(candidate);
      const std::string line = "cumulus-run: preemption notices: using " + chosen_->describe();
      if (options_.warn) {
        options_.warn(line);
      } else {
        std::fprintf(stderr, "%s\n", line.c_str());
      }
      return chosen_->poll();
    }
    log_.report("none",
                "no cloud metadata service answered (tried gcp, aws, azure; trying again "
                "every 60 s)");
    return {};
  }
  std::string describe() const override {
    return chosen_ ? chosen_->describe() : "auto (gcp, aws or azure)";
  }

 private:
  NoticeSourceOptions options_;
  SecondsClock clock_;
  ProblemLog log_;
  std::unique_ptr<MetadataNotice> chosen_;
  double next_probe_ = -1;
};

std::unique_ptr<NoticeSource> makeUrlSource(const std::string& url, NoticeSourceOptions options) {
  std::smatch m;
  if (!std::regex_match(
          url, m, std::regex(R"((http://(?:\[[^\]]+\]|[^/:?]+)(?::(\d+))?)(/[^?]*)?(\?.*)?)"))) {
    throw UsageError("--preemption-notice: expected url:http://HOST[:PORT]/PATH, got \"url:" + url +
                     "\" (https is not supported: metadata services are plain http)");
  }
  if (m[2].matched) {
    const long port = std::stol(m[2]);
    if (port < 1 || port > 65535) throw UsageError("--preemption-notice: bad port in " + url);
  }
  const std::string origin = m[1];
  const std::string path = m[3];
  const std::string query = m[4];
  auto endsWith = [&](const std::string& tail) {
    return path.size() >= tail.size() &&
           path.compare(path.size() - tail.size(), tail.size(), tail) == 0;
  };
  const std::string description = "url:" + url;
  if (endsWith(kAwsActionPath)) {
    options.aws_base = origin + path.substr(0, path.size() - std::string(kAwsActionPath).size());
    return makeAws(options, description);
  }
  if (endsWith(kAzureEventsPath)) {
    const std::string base =
        origin + path.substr(0, path.size() - std::string(kAzureEventsPath).size());
    const std::string events =
        origin + path + (query.empty() ? std::string("?") + kAzureApiVersion : query);
    return std::make_unique<AzureNotice>(description, base, events, options);
  }
  if (path.find("/computeMetadata/") != std::string::npos) {
    return std::make_unique<GcpNotice>(description, url, options);
  }
  throw UsageError("--preemption-notice: " + url +
                   " is none of the metadata paths Cumulus speaks: …" + kAwsActionPath +
                   " (AWS), …" + kAzureEventsPath + "?" + kAzureApiVersion +
                   " (Azure), …/computeMetadata/v1/instance/preempted (GCP)");
}

}  // namespace

std::unique_ptr<NoticeSource> makeNoticeSource(const std::string& spec,
                                               NoticeSourceOptions options) {
  if (spec.rfind("file:", 0) == 0 && spec.size() > 5) {
    return std::make_unique<FileNotice>(spec.substr(5));
  }
  if (spec.rfind("url:", 0) == 0) return makeUrlSource(spec.substr(4), std::move(options));
  if (spec == "aws") {
    return makeAws(options, "aws (" + options.aws_base + kAwsActionPath + ")");
  }
  if (spec == "azure") {
    return makeAzure(options, "azure (" + options.azure_base + kAzureEventsPath + ")");
  }
  if (spec == "gcp") {
    return makeGcp(options, "gcp (" + options.gcp_base + kGcpPreemptedPath + ")");
  }
  if (spec == "auto") return std::make_unique<AutoNotice>(std::move(options));
  throw UsageError(
      "--preemption-notice: expected aws, gcp, azure, auto, file:PATH or "
      "url:http://…, got \"" +
      spec + "\"");
}

}  // namespace cumulus::launch
