#include "kube/http.h"

#include <curl/curl.h>
#include <fmt/format.h>
#include <openssl/crypto.h>
#include <poll.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <map>
#include <semaphore>
#include <thread>
#include <unordered_map>

#include "error.h"
#include "http_status.h"
#include "kube/direct_transport.h"
#include "kube/websocket.h"
#include "text.h"
#include "trainctl/version.h"

namespace trainctl::kube {

std::string HttpResponse::header(const std::string& lower_name) const {
  auto it = headers.find(lower_name);
  return it == headers.end() ? std::string() : it->second;
}

std::vector<std::string> warning_texts(std::string_view header) {
  std::vector<std::string> texts;
  std::size_t at = 0;
  const auto skip = [&](std::string_view chars) {
    while (at < header.size() && chars.find(header[at]) != std::string_view::npos)
      ++at;
  };
  // A quoted-string, unescaped; nullopt when there is none at `at`.
  const auto quoted = [&]() -> std::optional<std::string> {
    if (at >= header.size() || header[at] != '"')
      return std::nullopt;
    std::string text;
    for (++at; at < header.size(); ++at) {
      if (header[at] == '"') {
        ++at;
        return text;
      }
      if (header[at] == '\\' && at + 1 < header.size())
        ++at;
      text += header[at];
    }
    return std::nullopt;  // unterminated
  };
  while (at < header.size()) {
    skip(" \t,");
    // warn-code SP warn-agent SP warn-text [SP warn-date]
    const std::size_t code_end = header.find(' ', at);
    if (code_end == std::string_view::npos)
      break;
    at = header.find(' ', code_end + 1);
    if (at == std::string_view::npos)
      break;
    skip(" ");
    const std::optional<std::string> text = quoted();
    if (!text)
      break;
    texts.push_back(*text);
    skip(" ");
    quoted();  // a date, if any
  }
  return texts;
}

namespace {

struct CurlGlobal {
  CurlGlobal() { curl_global_init(CURL_GLOBAL_DEFAULT); }
  ~CurlGlobal() { curl_global_cleanup(); }
};

/// Whether the environment names a proxy for https (https_proxy, HTTPS_PROXY, all_proxy,
/// ALL_PROXY), which libcurl uses when the config names none: requests then go through libcurl,
/// which also honours no_proxy.
bool proxy_from_environment() {
  for (const char* name : {"https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"}) {
    const char* value = std::getenv(name);
    if (value != nullptr && *value != '\0')
      return true;
  }
  return false;
}

/// Loads libcurl (and its ~30 libraries, about 3.5 ms), once per process. libcurl's TLS is its
/// own shared OpenSSL, not the one linked into trainctl: it sets it up on its first connection.
void start_libcurl() {
  static CurlGlobal global;
}

/// The parts of a server URL needed to steer TLS verification at a different name.
struct ServerUrl {
  std::string scheme, host, port, prefix;
};

ServerUrl parse_server(const std::string& server) {
  ServerUrl u;
  auto scheme_end = server.find("://");
  if (scheme_end == std::string::npos) {
    throw Error(ErrorKind::Config,
                fmt::format("server {:?} is not a URL (expected https://host:port)", server));
  }
  u.scheme = server.substr(0, scheme_end);
  std::string rest = server.substr(scheme_end + 3);
  auto slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  u.prefix = slash == std::string::npos ? "" : rest.substr(slash);
  while (!u.prefix.empty() && u.prefix.back() == '/')
    u.prefix.pop_back();
  auto colon = authority.rfind(':');
  auto bracket = authority.rfind(']');
  if (colon != std::string::npos && (bracket == std::string::npos || colon > bracket)) {
    u.host = authority.substr(0, colon);
    u.port = authority.substr(colon + 1);
  } else {
    u.host = authority;
    u.port = u.scheme == "http" ? "80" : "443";
  }
  return u;
}

/// Per-transfer state the libcurl callbacks write into.
struct Transfer {
  CURL* easy = nullptr;
  HttpResponse* response = nullptr;
  const BodySink* sink = nullptr;
  std::stop_token stop;
  bool sink_ended = false;
};

size_t on_header(char* data, size_t size, size_t nitems, void* user) {
  auto* t = static_cast<Transfer*>(user);
  std::string_view line(data, size * nitems);
  if (line.starts_with("HTTP/")) {
    t->response->headers.clear();  // a new response head (after 100 Continue or a proxy CONNECT)
    return size * nitems;
  }
  auto colon = line.find(':');
  if (colon != std::string_view::npos) {
    // A repeated field (one Warning per unknown field) is one list, as RFC 9110 combines them.
    std::string& value = t->response->headers[to_lower(trim(line.substr(0, colon)))];
    value += (value.empty() ? "" : ", ") + std::string(trim(line.substr(colon + 1)));
  }
  return size * nitems;
}

size_t on_body(char* data, size_t size, size_t nmemb, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t n = size * nmemb;
  if (t->response->status == 0) {
    long code = 0;
    curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &code);
    t->response->status = static_cast<int>(code);
  }
  const bool success = t->response->status >= 200 && t->response->status < 300;
  if (t->sink != nullptr && success) {
    if (!(*t->sink)(std::string_view(data, n))) {
      t->sink_ended = true;
      return 0;  // makes libcurl abort the transfer with CURLE_WRITE_ERROR
    }
    return n;
  }
  t->response->body.append(data, n);
  return n;
}

int on_progress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto* t = static_cast<Transfer*>(user);
  return t->stop.stop_requested() ? 1 : 0;
}

void check(CURLcode code, const char* what) {
  if (code != CURLE_OK) {
    throw Error(ErrorKind::Config,
                fmt::format("libcurl rejected option {}: {}", what, curl_easy_strerror(code)));
  }
}

}  // namespace

struct HttpTransport::Handle {
  CURL* easy = nullptr;
  curl_slist* headers = nullptr;
  curl_slist* connect_to = nullptr;
  char errbuf[CURL_ERROR_SIZE] = {};

  Handle() : easy(curl_easy_init()) {
    if (easy == nullptr)
      throw Error(ErrorKind::Connection, "libcurl could not create a handle");
  }
  ~Handle() {
    free_lists();
    curl_easy_cleanup(easy);
  }
  void free_lists() {
    curl_slist_free_all(headers);
    curl_slist_free_all(connect_to);
    headers = connect_to = nullptr;
  }
  void reset() {
    free_lists();
    curl_easy_reset(easy);  // keeps the connection cache: that is the keep-alive reuse
    errbuf[0] = '\0';
  }
};

class HttpTransport::Multiplexer {
 public:
  Multiplexer() : multi_(curl_multi_init()) {
    if (multi_ == nullptr)
      throw Error(ErrorKind::Connection, "libcurl could not create a multi handle");
    curl_multi_setopt(multi_, CURLMOPT_PIPELINING, static_cast<long>(CURLPIPE_MULTIPLEX));
    // Idle connections kept for reuse, for a server that speaks only HTTP/1.1: one per request a
    // controller's workers, informers' lists and event sender may have in flight at once.
    curl_multi_setopt(multi_, CURLMOPT_MAXCONNECTS, 64L);
    thread_ = std::thread([this] { run(); });
  }

  ~Multiplexer() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    curl_multi_wakeup(multi_);
    thread_.join();
    curl_multi_cleanup(multi_);
  }

  Multiplexer(const Multiplexer&) = delete;
  Multiplexer& operator=(const Multiplexer&) = delete;

  /// Performs a configured transfer as curl_easy_perform does, blocking the calling thread until
  /// it has ended; its callbacks run on the multiplexer's thread meanwhile.
  CURLcode perform(CURL* easy) {
    Pending pending{easy};
    ++in_flight_;
    {
      std::lock_guard lock(mu_);
      incoming_.push_back(&pending);
    }
    curl_multi_wakeup(multi_);
    pending.done.acquire();
    --in_flight_;
    return pending.result;
  }

  /// Whether no transfer is in flight here.
  bool idle() const { return in_flight_ == 0; }

 private:
  struct Pending {
    CURL* easy;
    CURLcode result = CURLE_OK;
    std::binary_semaphore done{0};
  };

  void run() {
    std::unordered_map<CURL*, Pending*> active;
    while (true) {
      {
        std::lock_guard lock(mu_);
        if (stopping_)
          return;  // the transport is being destroyed: nobody waits on a transfer any more
        for (Pending* p : incoming_) {
          if (curl_multi_add_handle(multi_, p->easy) != CURLM_OK) {
            p->result = CURLE_FAILED_INIT;
            p->done.release();
            continue;
          }
          active.emplace(p->easy, p);
        }
        incoming_.clear();
      }
      int running = 0;
      curl_multi_perform(multi_, &running);
      int left = 0;
      while (CURLMsg* message = curl_multi_info_read(multi_, &left)) {
        if (message->msg != CURLMSG_DONE)
          continue;
        CURL* easy = message->easy_handle;
        const CURLcode result = message->data.result;
        curl_multi_remove_handle(multi_, easy);
        const auto it = active.find(easy);
        Pending* p = it->second;
        active.erase(it);
        p->result = result;
        p->done.release();
      }
      // Wakes for socket activity, libcurl's own timers (timeouts), or a new transfer.
      curl_multi_poll(multi_, nullptr, 0, 1000, nullptr);
    }
  }

  CURLM* multi_;
  std::atomic<int> in_flight_{0};
  std::mutex mu_;
  std::vector<Pending*> incoming_;
  bool stopping_ = false;
  std::thread thread_;
};

HttpTransport::HttpTransport(const RestConfig& config) : config_(config) {
  ServerUrl url = parse_server(config.server);
  if (url.scheme != "https" && url.scheme != "http") {
    throw Error(ErrorKind::Config,
                fmt::format("server {:?}: scheme must be https or http", config.server));
  }
  const bool direct = config.transport == Transport::Direct && url.scheme == "https" &&
                      config.proxy_url.empty() && !proxy_from_environment();
  if (direct) {
    // OpenSSL's clean-up at exit frees what the process is about to give back anyway (0.25 ms
    // of a one-request command): declined before anything else initialises OpenSSL.
    OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, nullptr);
  } else {
    start_libcurl();
  }
  std::string host = url.host;
  if (!config.tls.server_name.empty() && config.tls.server_name != url.host) {
    // Verify the certificate against tls-server-name while connecting to the real address.
    host = config.tls.server_name;
    connect_to_ = fmt::format("{}:{}:{}:{}", host, url.port, url.host, url.port);
  }
  server_ = fmt::format("{}://{}:{}{}", url.scheme, host, url.port, url.prefix);
  path_prefix_ = url.prefix;
  if (direct) {
    direct_ = std::make_unique<DirectTransport>(
        config_, DirectTransport::Endpoint{fmt::format("{}://{}:{}", url.scheme, host, url.port),
                                           url.host, url.port, host});
  }
}

HttpTransport::~HttpTransport() = default;

std::unique_ptr<HttpTransport::Handle> HttpTransport::checkout() {
  {
    std::lock_guard lock(mu_);
    if (!idle_.empty()) {
      auto h = std::move(idle_.back());
      idle_.pop_back();
      return h;
    }
  }
  return std::make_unique<Handle>();
}

void HttpTransport::checkin(std::unique_ptr<Handle> handle) {
  std::lock_guard lock(mu_);
  idle_.push_back(std::move(handle));
}

HttpTransport::Multiplexer& HttpTransport::multiplexer() {
  std::lock_guard lock(mu_);
  if (!multiplexer_)
    multiplexer_ = std::make_unique<Multiplexer>();
  return *multiplexer_;
}

void HttpTransport::configure(Handle& h, const HttpRequest& request,
                              const RequestCredentials& creds, bool http1_only) {
  h.reset();
  CURL* e = h.easy;
  const std::string url = server_ + request.path;
  check(curl_easy_setopt(e, CURLOPT_URL, url.c_str()), "URL");
  check(curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L), "NOSIGNAL");
  check(curl_easy_setopt(e, CURLOPT_ERRORBUFFER, h.errbuf), "ERRORBUFFER");
  check(curl_easy_setopt(e, CURLOPT_HTTP_VERSION,
                         http1_only ? CURL_HTTP_VERSION_1_1 : CURL_HTTP_VERSION_2TLS),
        "HTTP_VERSION");
  check(curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L), "TCP_KEEPALIVE");
  check(curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, 30000L), "CONNECTTIMEOUT");
  const auto timeout = request.timeout.count() > 0 ? request.timeout : config_.timeout;
  check(curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, static_cast<long>(timeout.count())), "TIMEOUT");

  // TLS: verification stays on unless the config explicitly turns it off.
  if (config_.tls.insecure_skip_verify) {
    check(curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 0L), "SSL_VERIFYPEER");
    check(curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 0L), "SSL_VERIFYHOST");
  } else if (!config_.tls.ca_pem.empty()) {
    curl_blob ca{const_cast<char*>(config_.tls.ca_pem.data()), config_.tls.ca_pem.size(),
                 CURL_BLOB_COPY};
    check(curl_easy_setopt(e, CURLOPT_CAINFO_BLOB, &ca), "CAINFO_BLOB");
  }
  if (!creds.client_cert_pem.empty()) {
    curl_blob cert{const_cast<char*>(creds.client_cert_pem.data()), creds.client_cert_pem.size(),
                   CURL_BLOB_COPY};
    curl_blob key{const_cast<char*>(creds.client_key_pem.data()), creds.client_key_pem.size(),
                  CURL_BLOB_COPY};
    check(curl_easy_setopt(e, CURLOPT_SSLCERT_BLOB, &cert), "SSLCERT_BLOB");
    check(curl_easy_setopt(e, CURLOPT_SSLCERTTYPE, "PEM"), "SSLCERTTYPE");
    check(curl_easy_setopt(e, CURLOPT_SSLKEY_BLOB, &key), "SSLKEY_BLOB");
    check(curl_easy_setopt(e, CURLOPT_SSLKEYTYPE, "PEM"), "SSLKEYTYPE");
  }
  if (!config_.proxy_url.empty()) {
    check(curl_easy_setopt(e, CURLOPT_PROXY, config_.proxy_url.c_str()), "PROXY");
  }
  if (!connect_to_.empty()) {
    h.connect_to = curl_slist_append(nullptr, connect_to_.c_str());
    check(curl_easy_setopt(e, CURLOPT_CONNECT_TO, h.connect_to), "CONNECT_TO");
  }

  // Method and body.
  if (request.method == "GET") {
    check(curl_easy_setopt(e, CURLOPT_HTTPGET, 1L), "HTTPGET");
  } else {
    check(curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, request.method.c_str()), "CUSTOMREQUEST");
    if (!request.body.empty()) {
      check(curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE,
                             static_cast<curl_off_t>(request.body.size())),
            "POSTFIELDSIZE");
      check(curl_easy_setopt(e, CURLOPT_COPYPOSTFIELDS, request.body.c_str()), "COPYPOSTFIELDS");
    }
  }

  for (const auto& [name, value] : headers_for(request, creds)) {
    const std::string line = value.empty() ? name + ":" : name + ": " + value;
    h.headers = curl_slist_append(h.headers, line.c_str());
  }
  check(curl_easy_setopt(e, CURLOPT_HTTPHEADER, h.headers), "HTTPHEADER");
}

std::vector<std::pair<std::string, std::string>> HttpTransport::headers_for(
    const HttpRequest& request, const RequestCredentials& creds) const {
  // Credentials go only into this list, never into messages; the request log masks them.
  std::vector<std::pair<std::string, std::string>> headers = request.headers;
  const bool has_accept = std::any_of(headers.begin(), headers.end(),
                                      [](const auto& h) { return to_lower(h.first) == "accept"; });
  if (!has_accept)
    headers.emplace_back("Accept", "application/json");
  headers.emplace_back("User-Agent", fmt::format("trainctl/{} (linux)", kVersion));
  headers.emplace_back("Expect", "");  // no 100-continue round trip
  if (!creds.authorization.empty())
    headers.emplace_back("Authorization", creds.authorization);
  if (!config_.auth.impersonate_user.empty()) {
    headers.emplace_back("Impersonate-User", config_.auth.impersonate_user);
    for (const auto& g : config_.auth.impersonate_groups)
      headers.emplace_back("Impersonate-Group", g);
  }
  return headers;
}

namespace {

[[noreturn]] void throw_transfer_error(CURLcode code, const char* errbuf, const std::string& method,
                                       const std::string& url) {
  const std::string detail = errbuf[0] != '\0' ? errbuf : curl_easy_strerror(code);
  if (code == CURLE_OPERATION_TIMEDOUT) {
    throw Error(ErrorKind::Timeout, fmt::format("{} {}: timed out: {}", method, url, detail));
  }
  if (code == CURLE_PEER_FAILED_VERIFICATION) {
    throw Error(ErrorKind::Connection,
                fmt::format("{} {}: the server's certificate is not trusted ({}): give the CA that "
                            "signed it as the cluster's certificate-authority (or "
                            "--certificate-authority)",
                            method, url, detail));
  }
  throw Error(ErrorKind::Connection, fmt::format("{} {}: {}", method, url, detail));
}

/// Performs a configured transfer with `run` (curl_easy_perform, or the multiplexer's perform).
HttpResponse perform(const std::function<CURLcode(CURL*)>& run, CURL* e, const char* errbuf,
                     const HttpRequest& request, const std::string& url, const BodySink* sink,
                     std::stop_token stop) {
  HttpResponse response;
  Transfer t{e, &response, sink, std::move(stop), false};
  curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(e, CURLOPT_HEADERDATA, &t);
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, &t);
  curl_easy_setopt(e, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(e, CURLOPT_XFERINFOFUNCTION, on_progress);
  curl_easy_setopt(e, CURLOPT_XFERINFODATA, &t);
  const CURLcode code = run(e);
  const bool ended_by_us = (code == CURLE_WRITE_ERROR && t.sink_ended) ||
                           (code == CURLE_ABORTED_BY_CALLBACK && t.stop.stop_requested());
  if (code != CURLE_OK && !ended_by_us)
    throw_transfer_error(code, errbuf, request.method, url);
  long status = 0;
  curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
  response.status = static_cast<int>(status);
  long version = 0;
  curl_easy_getinfo(e, CURLINFO_HTTP_VERSION, &version);
  response.http_version = version == CURL_HTTP_VERSION_2_0 ? 2 : 11;
  return response;
}

}  // namespace

namespace {

/// `200 OK`: the status with the reason phrase HTTP/1.1 would send (HTTP/2 sends none).
std::string status_text(int status) {
  return fmt::format("{} {}", status, reason_phrase(status));
}

/// `Bearer <masked>`: the scheme of a credential, never the credential.
std::string masked(std::string_view name, const std::string& value) {
  if (to_lower(name) != "authorization")
    return value;
  const auto space = value.find(' ');
  return space == std::string::npos ? "<masked>" : value.substr(0, space) + " <masked>";
}

}  // namespace

std::string format_request_log(int verbosity, const HttpRequest& request, const std::string& url,
                               const std::vector<std::pair<std::string, std::string>>& headers,
                               const HttpResponse* response, std::string_view error,
                               std::chrono::milliseconds elapsed) {
  if (verbosity < 6)
    return "";
  std::string out = response != nullptr
                        ? fmt::format("{} {} {} in {} milliseconds\n", request.method, url,
                                      status_text(response->status), elapsed.count())
                        : fmt::format("{} {} failed in {} milliseconds: {}\n", request.method, url,
                                      elapsed.count(), error);
  if (verbosity >= 7) {
    out += "Request Headers:\n";
    for (const auto& [name, value] : headers) {
      if (!value.empty())
        out += fmt::format("    {}: {}\n", name, masked(name, value));
    }
  }
  if (verbosity >= 8 && response != nullptr) {
    out += "Response Headers:\n";
    for (const auto& [name, value] : response->headers)
      out += fmt::format("    {}: {}\n", name, masked(name, value));
  }
  return out;
}

HttpResponse HttpTransport::perform_curl(const HttpRequest& request,
                                         const RequestCredentials& creds, const BodySink* sink,
                                         std::stop_token stop) {
  auto h = checkout();
  configure(*h, request, creds, /*http1_only=*/false);
  Multiplexer* through = nullptr;
  // Over HTTP/1.1 the multiplexer only takes a request when it has none in flight, so requests one
  // after another keep one connection while concurrent ones go from their callers' threads.
  if (sink == nullptr && (!http1_server_ || multiplexer().idle())) {
    through = &multiplexer();
    // Waits for a connection being opened to say whether it multiplexes, rather than opening
    // another beside it.
    curl_easy_setopt(h->easy, CURLOPT_PIPEWAIT, 1L);
  }
  const auto run = [through](CURL* e) {
    return through != nullptr ? through->perform(e) : curl_easy_perform(e);
  };
  HttpResponse response =
      perform(run, h->easy, h->errbuf, request, server_ + request.path, sink, std::move(stop));
  if (response.http_version == 11)
    http1_server_ = true;
  checkin(std::move(h));
  return response;
}

HttpResponse HttpTransport::perform_logged(const HttpRequest& request,
                                           const RequestCredentials& creds, const BodySink* sink,
                                           std::stop_token stop) {
  const auto performed = [&] {
    if (!direct_)
      return perform_curl(request, creds, sink, std::move(stop));
    const auto timeout = request.timeout.count() > 0 ? request.timeout : config_.timeout;
    return direct_->exchange(request.method, path_prefix_ + request.path,
                             headers_for(request, creds), request.body, timeout, creds, sink,
                             std::move(stop));
  };
  if (config_.verbosity < 6)
    return performed();
  const std::string url = server_ + request.path;
  const auto started = std::chrono::steady_clock::now();
  const auto log = [&](const HttpResponse* response, std::string_view error) {
    const auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - started);
    std::cerr << format_request_log(config_.verbosity, request, url, headers_for(request, creds),
                                    response, error, elapsed)
              << std::flush;
  };
  try {
    HttpResponse response = performed();
    log(&response, "");
    return response;
  } catch (const Error& e) {
    log(nullptr, e.message());
    throw;
  }
}

HttpResponse HttpTransport::send(const HttpRequest& request, const RequestCredentials& creds) {
  return perform_logged(request, creds, nullptr, std::stop_token());
}

HttpResponse HttpTransport::stream(const HttpRequest& request, const RequestCredentials& creds,
                                   const BodySink& sink, std::stop_token stop) {
  return perform_logged(request, creds, &sink, std::move(stop));
}

namespace {

/// A raw connection libcurl opened (CONNECT_ONLY), read and written with curl_easy_recv/send.
/// It owns the whole handle, so libcurl's error buffer outlives every call that may fill it.
class CurlByteStream final : public ws::ByteStream {
 public:
  CurlByteStream(std::unique_ptr<HttpTransport::Handle> handle, std::chrono::milliseconds idle)
      : h_(std::move(handle)), idle_timeout_(idle) {}

  void write_all(std::string_view data) override {
    while (!data.empty()) {
      size_t sent = 0;
      const CURLcode code = curl_easy_send(h_->easy, data.data(), data.size(), &sent);
      if (code == CURLE_AGAIN) {
        wait(POLLOUT);
        continue;
      }
      if (code != CURLE_OK)
        fail("sending on", code);
      data.remove_prefix(sent);
    }
  }

  std::size_t read_some(char* buf, std::size_t n) override {
    const auto deadline = std::chrono::steady_clock::now() + idle_timeout_;
    while (true) {
      size_t got = 0;
      const CURLcode code = curl_easy_recv(h_->easy, buf, n, &got);
      if (code == CURLE_AGAIN) {
        if (idle_timeout_.count() > 0 && std::chrono::steady_clock::now() >= deadline) {
          throw Error(ErrorKind::Timeout, fmt::format("the exec connection was silent for {} ms",
                                                      idle_timeout_.count()));
        }
        wait(POLLIN);
        continue;
      }
      if (code != CURLE_OK)
        fail("reading", code);
      return got;
    }
  }

 private:
  [[noreturn]] void fail(const char* what, CURLcode code) const {
    const std::string detail = h_->errbuf[0] != '\0' ? h_->errbuf : curl_easy_strerror(code);
    throw Error(ErrorKind::Connection, fmt::format("{} the exec connection: {}", what, detail));
  }

  void wait(short events) {
    curl_socket_t fd = CURL_SOCKET_BAD;
    curl_easy_getinfo(h_->easy, CURLINFO_ACTIVESOCKET, &fd);
    if (fd == CURL_SOCKET_BAD)
      throw Error(ErrorKind::Connection, "the exec connection closed");
    pollfd p{fd, events, 0};
    ::poll(&p, 1, 200);
  }

  std::unique_ptr<HttpTransport::Handle> h_;
  std::chrono::milliseconds idle_timeout_;
};

}  // namespace

std::unique_ptr<ws::ByteStream> HttpTransport::connect_raw(const RequestCredentials& creds,
                                                           std::string& host_header,
                                                           std::chrono::milliseconds idle_timeout) {
  start_libcurl();
  auto h = std::make_unique<Handle>();
  HttpRequest request;
  request.path = "/";
  configure(*h, request, creds, /*http1_only=*/true);
  curl_easy_setopt(h->easy, CURLOPT_CONNECT_ONLY, 1L);
  const CURLcode code = curl_easy_perform(h->easy);
  if (code != CURLE_OK)
    throw_transfer_error(code, h->errbuf, "CONNECT", server_);
  const ServerUrl url = parse_server(server_);
  host_header = url.host + ":" + url.port;
  return std::make_unique<CurlByteStream>(std::move(h), idle_timeout);
}

}  // namespace trainctl::kube
