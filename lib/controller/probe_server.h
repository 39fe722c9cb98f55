#pragma once

// The controller's plain-HTTP endpoints (/metrics, /healthz, /readyz).

#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>

namespace trainctl::controller {

/// What a route answers.
struct ProbeResponse {
  int status = 200;
  std::string body;
  std::string content_type = "text/plain";
};

/// A GET-only HTTP/1.1 server for a few fixed paths, as Prometheus and the kubelet's probes call
/// them: one request per connection (`Connection: close`), each connection on a thread of its
/// own (at most kMaxConnections at once), so a client that sends nothing never holds up a probe;
/// other methods get 405, other paths 404. Not cpp-httplib: its library constructor initialises
/// OpenSSL's error strings (and loads zlib and brotli) in every process that links it, about
/// 1.3 ms of each offline verb's start-up.
class ProbeServer {
 public:
  using Routes = std::map<std::string, std::function<ProbeResponse()>, std::less<>>;

  /// Listens on `host`:`port` (port 0: any free one) and starts serving; throws Error(Usage)
  /// naming `flag` when it cannot.
  ProbeServer(const std::string& host, int port, const char* flag, Routes routes);
  /// Stops accepting, then waits for the connections being answered.
  ~ProbeServer();
  ProbeServer(const ProbeServer&) = delete;
  ProbeServer& operator=(const ProbeServer&) = delete;

  /// The port listened on.
  int port() const { return port_; }

 private:
  static constexpr int kMaxConnections = 16;

  void serve(std::stop_token stop);
  void answer(int connection) const;

  Routes routes_;
  int listener_ = -1;
  int port_ = 0;
  std::mutex mu_;
  std::condition_variable idle_;
  int in_flight_ = 0;  // connections being answered
  std::jthread thread_;
};

}  // namespace trainctl::controller
