#include "launch/http_client.h"

#include <curl/curl.h>

#include <stdexcept>

namespace cumulus::launch {
namespace {

constexpr size_t kMaxBody = size_t{1} << 20;

struct BodySink {
  std::string body;
  bool too_large = false;
};

extern "C" size_t appendBody(char* data, size_t size, size_t count, void* user) {
  auto* sink = static_cast<BodySink*>(user);
  const size_t n = size * count;
  if (sink->body.size() + n > kMaxBody) {
    sink->too_large = true;
    return 0;  // makes curl stop with CURLE_WRITE_ERROR
  }
  sink->body.append(data, n);
  return n;
}

class CurlHttpClient final : public HttpClient {
 public:
  CurlHttpClient() : curl_(curl_easy_init()) {
    if (curl_ == nullptr) throw std::runtime_error("libcurl: curl_easy_init failed");
  }
  ~CurlHttpClient() override { curl_easy_cleanup(curl_); }
  CurlHttpClient(const CurlHttpClient&) = delete;
  CurlHttpClient& operator=(const CurlHttpClient&) = delete;

  HttpResponse send(const HttpRequest& request) override {
    curl_easy_reset(curl_);
    BodySink sink;
    curl_slist* headers = nullptr;
    for (const std::string& h : request.headers) headers = curl_slist_append(headers, h.c_str());
    const long timeout_ms = static_cast<long>(request.timeout.count());
    curl_easy_setopt(curl_, CURLOPT_URL, request.url.c_str());
    curl_easy_setopt(curl_, CURLOPT_PROTOCOLS_STR, "http");
    curl_easy_setopt(curl_, CURLOPT_NOSIGNAL, 1L);  // no SIGALRM: the launcher owns its signals
    curl_easy_setopt(curl_, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(curl_, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms);
    curl_easy_setopt(curl_, CURLOPT_PROXY, "");  // ignore http_proxy: metadata is host-local
    curl_easy_setopt(curl_, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(curl_, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl_, CURLOPT_WRITEFUNCTION, appendBody);
    curl_easy_setopt(curl_, CURLOPT_WRITEDATA, &sink);
    if (request.method == "PUT") {
      curl_easy_setopt(curl_, CURLOPT_CUSTOMREQUEST, "PUT");
      curl_easy_setopt(curl_, CURLOPT_POSTFIELDS, "");
      curl_easy_setopt(curl_, CURLOPT_POSTFIELDSIZE, 0L);
    } else if (request.method != "GET") {
      curl_easy_setopt(curl_, CURLOPT_CUSTOMREQUEST, request.method.c_str());
    }
    const CURLcode rc = curl_easy_perform(curl_);
    curl_slist_free_all(headers);

    HttpResponse response;
    if (rc != CURLE_OK) {
      response.timed_out = rc == CURLE_OPERATION_TIMEDOUT;
      if (sink.too_large) {
        response.error = "an answer larger than 1 MiB";
      } else if (response.timed_out) {
        response.error = "no answer within " + std::to_string(timeout_ms) + " ms";
      } else {
        response.error = curl_easy_strerror(rc);
      }
      return response;
    }
    long status = 0;
    curl_easy_getinfo(curl_, CURLINFO_RESPONSE_CODE, &status);
    response.status = static_cast<int>(status);
    response.body = std::move(sink.body);
    return response;
  }

 private:
  CURL* curl_;
};

}  // namespace

std::unique_ptr<HttpClient> makeCurlHttpClient() { return std::make_unique<CurlHttpClient>(); }

}  // namespace cumulus::launch
