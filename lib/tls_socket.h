#pragma once

// One TLS connection on a non-blocking socket, either side: the sandbox's HTTPS server accepts
// them and the CLI's HTTP/1.1 client (kube/direct_transport.h) makes them. Every wait is a
// poll(2) that ends on progress, a deadline, or shutdown(2) from abort(). Writes go through a BIO
// that sends with MSG_NOSIGNAL, so a peer that has gone away never raises SIGPIPE (library code
// should not change process-wide signal handling).

#include <openssl/ssl.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <mutex>
#include <string>
#include <string_view>

namespace trainctl {

using SteadyClock = std::chrono::steady_clock;
using Deadline = SteadyClock::time_point;

/// `timeout` from now; no deadline for a timeout of 0 or less.
Deadline deadline_after(std::chrono::milliseconds timeout);

/// What a BIO of socket_bio_method() reads and writes: set as its data (BIO_set_data).
struct SocketBioState {
  int fd = -1;
  bool eof = false;  // recv() returned 0: OpenSSL asks, to tell an EOF from an error
};

/// A socket BIO that sends with MSG_NOSIGNAL.
const BIO_METHOD* socket_bio_method();

/// A TLS connection over `fd`, which it owns. Reads and writes hold the lock only around the
/// OpenSSL call, so one thread may read while another writes (an upgraded stream).
class TlsSocket {
 public:
  /// Throws Error(Connection) when OpenSSL cannot set the connection up (and closes `fd`).
  TlsSocket(int fd, SSL_CTX* ctx, std::string remote);
  ~TlsSocket();
  TlsSocket(const TlsSocket&) = delete;
  TlsSocket& operator=(const TlsSocket&) = delete;

  const std::string& remote() const { return remote_; }
  /// The connection's SSL, to set up before the handshake (server name, verification).
  SSL* ssl() { return ssl_; }

  /// The server's side of the handshake. Throws Error(Connection) when it fails,
  /// Error(Timeout) when it takes too long.
  void accept(Deadline deadline) { handshake(SSL_accept, deadline); }
  /// The client's side of the handshake; throws as accept() does.
  void connect(Deadline deadline) { handshake(SSL_connect, deadline); }

  /// Reads at least one byte; 0 at the end of the stream (or once aborted). Throws
  /// Error(Timeout) when nothing arrives before `deadline`, Error(Connection) on failure.
  std::size_t read_some(char* buf, std::size_t n, Deadline deadline);

  /// Writes every byte or throws Error(Connection) (Error(Timeout) when the peer stops reading).
  void write_all(std::string_view data, Deadline deadline);

  /// True once the peer has closed its side or reset the connection (or abort() ran).
  bool peer_closed() const;

  /// Sends close_notify and a FIN; with `linger`, then reads (and drops) what the peer still
  /// sends until it closes too, for at most `linger_timeout`.
  void close_gracefully(bool linger, std::chrono::milliseconds linger_timeout);

  /// Cuts the connection from any thread: every wait on it ends, later writes fail.
  void abort();

 private:
  void handshake(int (*step)(SSL*), Deadline deadline);
  std::string describe(int err) const;
  void wait(short events, Deadline deadline, std::string_view during) const;

  int fd_;
  SSL* ssl_ = nullptr;
  SocketBioState bio_state_;
  std::string remote_;
  std::mutex mu_;
  std::atomic<bool> aborted_{false};
};

}  // namespace trainctl
