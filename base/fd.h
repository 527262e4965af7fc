#pragma once
// Fd: the sole owner of a POSIX file descriptor, closed when the owner goes away, on every path
// out of a function. Move-only. Not thread-safe (one owner, one thread at a time).
//
// The destructor ignores close()'s result: by then there is no one to tell. Where a close error
// matters (a delayed write error on NFS), call close() and check what it returns.

namespace cumulus::base {

class Fd {
 public:
  Fd() = default;
  // Takes ownership of `fd`; -1 (or any negative value) means "owns nothing".
  explicit Fd(int fd) : fd_(fd < 0 ? -1 : fd) {}
  ~Fd() { close(); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  Fd(Fd&& other) noexcept : fd_(other.release()) {}
  Fd& operator=(Fd&& other) noexcept;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // Gives up ownership without closing; returns the descriptor (or -1).
  int release();
  // Closes the owned descriptor, if any, and owns `fd` instead.
  void reset(int fd = -1);
  // Closes the owned descriptor now. Returns 0, or the errno of a failed close (the descriptor is
  // released either way, as POSIX leaves it unusable). 0 when nothing was owned.
  int close();

 private:
  int fd_ = -1;
};

}  // namespace cumulus::base
