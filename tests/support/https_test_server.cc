#include "tests/support/https_test_server.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <stdexcept>

#include "openssl_handles.h"

namespace trainctl::testing {

const TestPki& TestPki::shared() {
  static const TestPki pki = [] {
    TestPki p;
    p.ca = sandbox::make_certificate_authority("trainctl-test-ca");
    p.server = sandbox::issue_certificate(p.ca, {.common_name = "test-apiserver",
                                                 .dns_names = {"localhost", "apiserver.test"},
                                                 .ip_addresses = {"127.0.0.1"},
                                                 .server_auth = true});
    p.client = sandbox::issue_certificate(
        p.ca,
        {.common_name = "test-user", .organizations = {"system:masters"}, .client_auth = true});
    return p;
  }();
  return pki;
}

HttpsTestServer::HttpsTestServer(ClientCerts client_certs, const TestPki& pki) : pki_(pki) {
  const CertPtr cert = std::move(read_certificates(pki.server.cert_pem).front());
  const KeyPtr key = read_private_key(pki.server.key_pem);
  X509_STORE* store = nullptr;
  if (client_certs == ClientCerts::Required) {
    store = X509_STORE_new();
    for (const auto& ca : read_certificates(pki.ca.cert_pem))
      X509_STORE_add_cert(store, ca.get());
  }
  server_ = std::make_unique<httplib::SSLServer>(cert.get(), key.get(), store);  // takes the store
  if (!server_->is_valid())
    throw std::runtime_error("test HTTPS server: bad certificate");
  // Without TCP_NODELAY, Nagle's algorithm and delayed ACKs add ~40 ms to every small reply.
  server_->set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    ::setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);
  });
  // httplib's logger runs after the response is sent, so a client can see its response before
  // the request is on record; requests() waits for every request that started to be logged.
  server_->set_pre_routing_handler([this](const httplib::Request&, httplib::Response&) {
    std::lock_guard lock(mu_);
    ++started_;
    return httplib::Server::HandlerResponse::Unhandled;
  });
  server_->set_logger([this](const httplib::Request& req, const httplib::Response&) {
    RecordedRequest r{req.method,      req.target,
                      req.path,        {},
                      req.headers,     req.body,
                      req.remote_port, req.ssl != nullptr && SSL_session_reused(req.ssl) == 1};
    for (const auto& [k, v] : req.params)
      r.params.emplace(k, v);
    std::lock_guard lock(mu_);
    requests_.push_back(std::move(r));
    logged_.notify_all();
  });
}

HttpsTestServer::~HttpsTestServer() {
  server_->stop();
  if (thread_.joinable())
    thread_.join();
}

void HttpsTestServer::start() {
  port_ = server_->bind_to_any_port("127.0.0.1");
  if (port_ <= 0)
    throw std::runtime_error("test HTTPS server: cannot bind");
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  while (!server_->is_running())
    std::this_thread::yield();
}

std::string HttpsTestServer::url() const {
  return "https://127.0.0.1:" + std::to_string(port_);
}

std::vector<RecordedRequest> HttpsTestServer::requests() const {
  std::unique_lock lock(mu_);
  logged_.wait_for(lock, std::chrono::seconds(5), [this] { return requests_.size() >= started_; });
  return requests_;
}

kube::RestConfig HttpsTestServer::rest_config() const {
  kube::RestConfig config;
  config.server = url();
  config.tls.ca_pem = pki_.ca.cert_pem;
  config.qps = 0;
  return config;
}

}  // namespace trainctl::testing
