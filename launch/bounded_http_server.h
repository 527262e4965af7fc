#pragma once
// BoundedHttpServer: cpp-httplib's Server with a bound on what one client can hold. cpp-httplib
// gives each connection a thread of its pool for as long as the connection lasts, and its read
// timeout restarts with every byte, so a client that sends a header line every half second (a
// slowloris) holds a thread forever; 64 of them starve every scrape. Here each request has a
// deadline, counted from the moment the connection was accepted (or, on a kept-alive connection,
// from its next byte): its head must arrive by then, or the connection is closed. A connection that
// waited in the pool's queue past its deadline is served from what it already sent, so a queue of
// slow clients drains at once and a scrape behind them waits about one deadline, not one per
// pool's worth of them. Also bounded: the bytes of one request (head and body), the wait for the
// next request on a kept-alive connection, a connection's life (after it the answer says
// "Connection: close"), and the time to send an answer.
//
// Set routes, timeouts and options as on httplib::Server; new_task_queue is this class's own (a
// pool of `threads`), and the read, write and keep-alive timeouts of httplib::Server are replaced
// by `Limits`. Thread-safe as httplib::Server is.

#include <httplib.h>

#include <chrono>
#include <cstddef>
#include <string>

namespace cumulus::launch {

class BoundedHttpServer : public httplib::Server {
 public:
  struct Limits {
    std::chrono::milliseconds request{2000};    // from accept (or the next byte) to a whole head
    std::chrono::milliseconds idle{2000};       // between requests on one connection
    std::chrono::milliseconds answer{10000};    // to send one answer
    std::chrono::milliseconds lifetime{10000};  // keep-alive ends after this
    size_t request_bytes = 64 * 1024;           // head and body of one request
    size_t requests_per_connection = 100;
  };

  BoundedHttpServer(size_t threads, Limits limits);

  // bind_to_port (bind_to_any_port for port 0), listening with a queue of kBacklog connections
  // rather than cpp-httplib's 5: in a burst of connections (a slow client's many) the kernel
  // would drop the SYN of those past 5, a scrape's among them, and the client retry it a second
  // or more later. Returns the port, or -1 when it cannot listen.
  int bind(const std::string& host, int port);

  static constexpr int kBacklog = 256;

  // Stops listening and makes listen_after_bind() return, whenever it is called: cpp-httplib's
  // stop() does nothing until the listener's loop has begun, so a server stopped right after it
  // was started (a test's, or a launcher that fails just after) would listen forever.
  void shutDown();

 private:
  bool process_and_close_socket(socket_t sock) override;

  Limits limits_;
};

}  // namespace cumulus::launch
