#include "probe_server.h"

#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string_view>

#include "error.h"
#include "http_status.h"

namespace trainctl::controller {
namespace {

constexpr int kPollMs = 100;             // how soon a stop is noticed
constexpr int kRequestTimeoutMs = 2000;  // a client that sends no full request head is dropped
constexpr std::size_t kMaxHead = 16 * 1024;

int listen_on(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &found) != 0)
    return -1;
  int fd = -1;
  for (const addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0)
      continue;
    // As cpp-httplib, which served these before: two controllers on one host (tests running in
    // parallel with the default :8080) may share the port.
    const int on = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &on, sizeof on);
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, SOMAXCONN) != 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  return fd;
}

int bound_port(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  return addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                                    : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
}

/// The request head (up to the blank line), or "" when the client does not send one in time.
std::string read_head(int fd) {
  std::string head;
  char buf[4096];
  while (head.find("\r\n\r\n") == std::string::npos && head.size() < kMaxHead) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, kRequestTimeoutMs) <= 0)
      return "";
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0)
      return "";
    head.append(buf, static_cast<std::size_t>(n));
  }
  return head;
}

void write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n <= 0)
      return;
    data.remove_prefix(static_cast<std::size_t>(n));
  }
}

}  // namespace

ProbeServer::ProbeServer(const std::string& host, int port, const char* flag, Routes routes)
    : routes_(std::move(routes)), listener_(listen_on(host, port)) {
  if (listener_ < 0)
    throw Error(ErrorKind::Usage, fmt::format("{}: cannot listen on {}:{}", flag, host, port));
  port_ = bound_port(listener_);
  thread_ = std::jthread([this](std::stop_token stop) { serve(stop); });
}

ProbeServer::~ProbeServer() {
  thread_.request_stop();
  if (thread_.joinable())
    thread_.join();
  close(listener_);
  std::unique_lock lock(mu_);
  idle_.wait(lock, [this] { return in_flight_ == 0; });
}

void ProbeServer::serve(std::stop_token stop) {
  while (!stop.stop_requested()) {
    pollfd p{listener_, POLLIN, 0};
    if (poll(&p, 1, kPollMs) <= 0)
      continue;
    const int connection = accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
    if (connection < 0)
      continue;
    {
      std::lock_guard lock(mu_);
      if (in_flight_ >= kMaxConnections) {
        close(connection);
        continue;
      }
      ++in_flight_;
    }
    std::thread([this, connection] {
      answer(connection);
      close(connection);
      std::lock_guard lock(mu_);  // notified under the lock: the destructor may go on after it
      if (--in_flight_ == 0)
        idle_.notify_all();
    }).detach();
  }
}

void ProbeServer::answer(int connection) const {
  const std::string head = read_head(connection);
  // "GET /readyz?verbose HTTP/1.1": the method and the path without its query.
  const auto method_end = head.find(' ');
  const auto target_end = head.find(' ', method_end + 1);
  if (method_end == std::string::npos || target_end == std::string::npos)
    return;
  const std::string_view method = std::string_view(head).substr(0, method_end);
  std::string_view path =
      std::string_view(head).substr(method_end + 1, target_end - method_end - 1);
  path = path.substr(0, path.find('?'));
  ProbeResponse response;
  if (const auto route = routes_.find(path); route == routes_.end())
    response = {404, "404 page not found\n"};
  else if (method != "GET" && method != "HEAD")
    response = {405, "method not allowed\n"};
  else
    response = route->second();
  std::string out = fmt::format(
      "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
      response.status, reason_phrase(response.status), response.content_type, response.body.size());
  if (method != "HEAD")
    out += response.body;
  write_all(connection, out);
}

}  // namespace trainctl::controller
