#include "tests/support/scripted_server.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <deque>
#include <stdexcept>

#include "error.h"
#include "http1.h"
#include "http_status.h"
#include "tests/support/https_test_server.h"
#include "text.h"
#include "tls_socket.h"

namespace trainctl::testing {

ScriptedServer::ScriptedServer(std::vector<std::vector<std::string>> replies, Responder respond)
    : replies_(std::move(replies)),
      respond_(std::move(respond)),
      ctx_(SSL_CTX_new(TLS_server_method())) {
  const TestPki& pki = TestPki::shared();
  SSL_CTX_use_certificate(ctx_.get(), read_certificates(pki.server.cert_pem).front().get());
  SSL_CTX_use_PrivateKey(ctx_.get(), read_private_key(pki.server.key_pem).get());
  listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (::bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(listener_, 8) != 0 ||
      ::getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    throw std::runtime_error("scripted server: cannot listen");
  port_ = ntohs(addr.sin_port);
  thread_ = std::thread([this] { serve(); });
}

ScriptedServer::~ScriptedServer() {
  ::shutdown(listener_, SHUT_RDWR);
  thread_.join();
  ::close(listener_);
}

std::string ScriptedServer::url() const {
  return fmt::format("https://127.0.0.1:{}", port_);
}

kube::RestConfig ScriptedServer::rest_config() const {
  kube::RestConfig config;
  config.server = url();
  config.tls.ca_pem = TestPki::shared().ca.cert_pem;
  config.transport = kube::Transport::Direct;
  return config;
}

std::vector<std::string> ScriptedServer::requests() const {
  std::lock_guard lock(mu_);
  return requests_;
}

std::string ScriptedServer::json_response(int status, const std::string& body) {
  return fmt::format(
      "HTTP/1.1 {} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{}", status,
      reason_phrase(status), body.size(), body);
}

void ScriptedServer::serve() {
  struct Request {
    std::string method, target, body;
  };
  for (const std::vector<std::string>& script : replies_) {
    const int fd = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0)
      return;
    const std::size_t index = &script - replies_.data();
    try {
      TlsSocket socket(fd, ctx_.get(), "client");
      socket.accept(deadline_after(std::chrono::seconds(10)));
      std::string buffer;
      MessageReader reader(
          [&](char* buf, std::size_t n) {
            return socket.read_some(buf, n, deadline_after(std::chrono::seconds(10)));
          },
          buffer);
      std::deque<Request> unanswered;  // in the order they came
      const auto read_request = [&] {
        std::string head;
        if (!reader.read_head(head))
          return false;
        const std::size_t length_at = to_lower(head).find("content-length: ");
        BodyFraming framing;
        if (length_at != std::string::npos)
          framing.length = std::stoul(head.substr(length_at + 16));
        Request request;
        reader.read_body(framing, SIZE_MAX, [&](std::string_view piece) {
          request.body.append(piece);
          return true;
        });
        const std::string line = head.substr(0, head.find('\r'));
        const std::size_t target = line.find(' ') + 1;
        request.method = line.substr(0, target - 1);
        request.target = line.substr(target, line.rfind(' ') - target);
        unanswered.push_back(std::move(request));
        std::lock_guard lock(mu_);
        requests_.push_back(fmt::format("{} {}", index, line));
        return true;
      };
      for (const std::string& reply : script) {
        if (reply == "<read>") {
          if (!read_request())
            break;
          continue;
        }
        if (unanswered.empty() && !read_request())
          break;
        const Request request = std::move(unanswered.front());
        unanswered.pop_front();
        if (reply.empty())
          break;
        std::string text = reply;
        if (reply == "RESPOND") {
          text = respond_(request.method, request.target, request.body);
        } else if (reply.starts_with("ECHO")) {
          text = fmt::format("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n{}\r\n{}",
                             request.target.size(),
                             reply == "ECHO close" ? "Connection: close\r\n" : "", request.target);
        }
        socket.write_all(text, deadline_after(std::chrono::seconds(10)));
      }
      socket.close_gracefully(/*linger=*/false, std::chrono::milliseconds(0));
    } catch (const Error&) {
      // the client went away: on to the next connection
    }
  }
}

}  // namespace trainctl::testing
