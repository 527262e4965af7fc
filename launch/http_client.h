#pragma once
// One HTTP request at a time, for polling cloud metadata services (plain http on a link-local
// address or loopback). The production client is libcurl; tests pass in a scripted one.
//
// send() blocks for at most the request's timeout (connect, send and receive together). It never
// throws for a network problem: an unreachable host, a timeout or a garbled answer comes back as
// HttpResponse::error. No proxy is used (metadata must come from this host's own service), no
// redirect is followed, and a body past 1 MiB is an error. Not thread-safe; one client per thread.

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace cumulus::launch {

struct HttpRequest {
  std::string method = "GET";        // "GET" or "PUT" (a PUT sends an empty body)
  std::string url;                   // http://HOST[:PORT]/PATH[?QUERY]
  std::vector<std::string> headers;  // "Name: value"
  std::chrono::milliseconds timeout{1000};
};

struct HttpResponse {
  int status = 0;  // the HTTP status; 0 when no answer came (then `error` says why)
  std::string body;
  std::string error;  // empty when an answer came
  bool timed_out = false;
  bool answered() const { return error.empty(); }
};

class HttpClient {
 public:
  virtual ~HttpClient() = default;
  virtual HttpResponse send(const HttpRequest& request) = 0;
};

// libcurl, one easy handle reused across requests (keep-alive to the metadata service).
std::unique_ptr<HttpClient> makeCurlHttpClient();

}  // namespace cumulus::launch
