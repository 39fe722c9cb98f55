#include "kube/credentials.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string_view>
#include <utility>
#include <vector>

#include "error.h"
#include "text.h"

extern char** environ;

namespace trainctl::kube {
namespace {

/// Bound service-account tokens rotate; client-go re-reads token files once a minute.
constexpr auto kTokenFileMaxAge = std::chrono::seconds(60);
/// A credential plugin prints one small JSON object; anything near this is a broken plugin.
constexpr std::size_t kMaxPluginOutput = 4 << 20;

bool same_credentials(const RequestCredentials& a, const RequestCredentials& b) {
  return a.authorization == b.authorization && a.client_cert_pem == b.client_cert_pem &&
         a.client_key_pem == b.client_key_pem;
}

/// Parses an RFC 3339 timestamp ("2024-05-01T12:00:00Z", "...T12:00:00.5+02:00").
std::optional<std::chrono::system_clock::time_point> parse_rfc3339(std::string_view s) {
  auto digits = [&](std::size_t pos, std::size_t n, int& out) {
    if (pos + n > s.size())
      return false;
    out = 0;
    for (std::size_t i = pos; i < pos + n; ++i) {
      if (s[i] < '0' || s[i] > '9')
        return false;
      out = out * 10 + (s[i] - '0');
    }
    return true;
  };
  int year, month, day, hour, minute, second;
  if (!digits(0, 4, year) || s.size() < 20 || s[4] != '-' || !digits(5, 2, month) || s[7] != '-' ||
      !digits(8, 2, day) || (s[10] != 'T' && s[10] != 't') || !digits(11, 2, hour) ||
      s[13] != ':' || !digits(14, 2, minute) || s[16] != ':' || !digits(17, 2, second)) {
    return std::nullopt;
  }
  std::size_t pos = 19;
  std::chrono::nanoseconds fraction{0};
  if (pos < s.size() && s[pos] == '.') {
    ++pos;
    std::int64_t scale = 100000000;
    const std::size_t begin = pos;
    while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9') {
      fraction += std::chrono::nanoseconds((s[pos] - '0') * scale);
      scale /= 10;
      ++pos;
    }
    if (pos == begin)
      return std::nullopt;
  }
  std::chrono::minutes offset{0};
  if (pos < s.size() && (s[pos] == 'Z' || s[pos] == 'z')) {
    ++pos;
  } else if (pos < s.size() && (s[pos] == '+' || s[pos] == '-')) {
    int oh, om;
    if (!digits(pos + 1, 2, oh) || pos + 3 >= s.size() || s[pos + 3] != ':' ||
        !digits(pos + 4, 2, om)) {
      return std::nullopt;
    }
    offset = std::chrono::minutes(oh * 60 + om) * (s[pos] == '-' ? -1 : 1);
    pos += 6;
  } else {
    return std::nullopt;
  }
  if (pos != s.size())
    return std::nullopt;
  const std::chrono::year_month_day date{std::chrono::year(year), std::chrono::month(month),
                                         std::chrono::day(day)};
  if (!date.ok() || hour > 23 || minute > 59 || second > 60)
    return std::nullopt;
  const auto utc = std::chrono::sys_days(date) + std::chrono::hours(hour) +
                   std::chrono::minutes(minute) + std::chrono::seconds(second) - offset;
  return std::chrono::time_point_cast<std::chrono::system_clock::duration>(utc + fraction);
}

/// A token, basic-auth pair or client certificate that never changes.
class StaticCredentials final : public CredentialSource {
 public:
  explicit StaticCredentials(RequestCredentials credentials)
      : credentials_(std::move(credentials)) {}
  RequestCredentials current() override { return credentials_; }
  bool refresh_after_unauthorized(const RequestCredentials&) override { return false; }

 private:
  const RequestCredentials credentials_;
};

/// A bearer token read from a file that rotates (projected service-account tokens).
class TokenFileCredentials final : public CredentialSource {
 public:
  TokenFileCredentials(std::string path, std::string cert_pem, std::string key_pem, Clock& clock)
      : path_(std::move(path)),
        cert_pem_(std::move(cert_pem)),
        key_pem_(std::move(key_pem)),
        clock_(clock) {}

  RequestCredentials current() override {
    std::lock_guard lock(mu_);
    if (!read_at_ || clock_.monotonic() - *read_at_ >= kTokenFileMaxAge)
      reload();
    return credentials();
  }

  bool refresh_after_unauthorized(const RequestCredentials& used) override {
    std::lock_guard lock(mu_);
    try {
      reload();
    } catch (const Error&) {
      return false;
    }
    return credentials().authorization != used.authorization;
  }

 private:
  RequestCredentials credentials() const { return {"Bearer " + token_, cert_pem_, key_pem_}; }

  void reload() {
    std::string why;
    std::optional<std::string> token = read_token(why);
    if (!token) {
      // Like client-go: once we have a token, a failed re-read keeps it and retries next time.
      if (!token_.empty())
        return;
      throw Error(ErrorKind::Config, fmt::format("cannot read token file {}: {}", path_, why));
    }
    token_ = std::move(*token);
    read_at_ = clock_.monotonic();
  }

  std::optional<std::string> read_token(std::string& why) const {
    errno = 0;
    std::ifstream in(path_, std::ios::binary);
    if (!in) {
      why = std::strerror(errno != 0 ? errno : ENOENT);
      return std::nullopt;
    }
    std::ostringstream buffer;
    buffer << in.rdbuf();
    std::string token(trim(buffer.str()));
    if (in.bad() || token.empty()) {
      why = in.bad() ? "read error" : "the file is empty";
      return std::nullopt;
    }
    return token;
  }

  const std::string path_;
  const std::string cert_pem_;
  const std::string key_pem_;
  Clock& clock_;
  std::mutex mu_;
  std::string token_;
  std::optional<std::chrono::steady_clock::time_point> read_at_;
};

/// What one run of an exec plugin produced.
struct PluginResult {
  RequestCredentials credentials;
  std::optional<std::chrono::system_clock::time_point> expiry;  // none: valid until a 401
};

/// A client.authentication.k8s.io exec credential plugin, run when no valid credential is cached.
class ExecCredentials final : public CredentialSource {
 public:
  ExecCredentials(ExecPluginConfig exec, std::string server, TlsConfig tls, std::string cert_pem,
                  std::string key_pem, Clock& clock)
      : exec_(std::move(exec)),
        server_(std::move(server)),
        tls_(std::move(tls)),
        cert_pem_(std::move(cert_pem)),
        key_pem_(std::move(key_pem)),
        clock_(clock) {}

  RequestCredentials current() override {
    // One plugin run at a time: several threads asking at once share the one result.
    std::lock_guard lock(mu_);
    if (!cached_ || (cached_->expiry && clock_.now() >= *cached_->expiry))
      cached_ = run();
    return cached_->credentials;
  }

  bool refresh_after_unauthorized(const RequestCredentials& used) override {
    std::lock_guard lock(mu_);
    // Only the credential that failed is dropped; one already replaced by another thread stays.
    if (cached_ && same_credentials(cached_->credentials, used))
      cached_.reset();
    return true;
  }

 private:
  /// A plugin that cannot give a credential is an authentication failure (exit code 3, as any
  /// failure to reach the API), not a usage error: the kubeconfig itself was fine.
  [[noreturn]] void fail(std::string_view what) const {
    throw Error(ErrorKind::Unauthorized, fmt::format("exec plugin {}: {}", exec_.command, what));
  }

  bool interactive() const {
    if (exec_.interactive_mode == "Never")
      return false;
    const bool terminal = ::isatty(STDIN_FILENO) == 1;
    if (exec_.interactive_mode == "Always" && !terminal) {
      fail("interactiveMode is Always but standard input is not a terminal");
    }
    return terminal;
  }

  std::string exec_info(bool interactive) const {
    nlohmann::json spec = {{"interactive", interactive}};
    if (exec_.provide_cluster_info) {
      nlohmann::json cluster = {{"server", server_}};
      if (!tls_.server_name.empty())
        cluster["tls-server-name"] = tls_.server_name;
      if (tls_.insecure_skip_verify)
        cluster["insecure-skip-tls-verify"] = true;
      if (!tls_.ca_pem.empty())
        cluster["certificate-authority-data"] = base64_encode(tls_.ca_pem);
      spec["cluster"] = std::move(cluster);
    }
    nlohmann::json info = {
        {"apiVersion", exec_.api_version}, {"kind", "ExecCredential"}, {"spec", std::move(spec)}};
    return info.dump();
  }

  /// The parent's environment, then the kubeconfig's env (winning on clashes), then the info.
  std::vector<std::string> environment(const std::string& info) const {
    std::vector<std::pair<std::string, std::string>> extra = exec_.env;
    extra.emplace_back("KUBERNETES_EXEC_INFO", info);
    auto overridden = [&](std::string_view name) {
      for (const auto& [n, v] : extra) {
        if (n == name)
          return true;
      }
      return false;
    };
    std::vector<std::string> env;
    for (char** e = environ; e && *e; ++e) {
      const std::string_view entry(*e);
      if (!overridden(entry.substr(0, entry.find('='))))
        env.emplace_back(entry);
    }
    for (std::size_t i = 0; i < extra.size(); ++i) {
      bool later = false;
      for (std::size_t j = i + 1; j < extra.size(); ++j)
        later |= extra[j].first == extra[i].first;
      if (!later)
        env.push_back(extra[i].first + "=" + extra[i].second);
    }
    return env;
  }

  /// Runs the plugin and returns what it printed on stdout.
  std::string spawn(bool interactive) const {
    std::vector<std::string> env_strings = environment(exec_info(interactive));
    std::vector<char*> envp;
    for (auto& s : env_strings)
      envp.push_back(s.data());
    envp.push_back(nullptr);
    std::vector<std::string> arg_strings{exec_.command};
    arg_strings.insert(arg_strings.end(), exec_.args.begin(), exec_.args.end());
    std::vector<char*> argv;
    for (auto& s : arg_strings)
      argv.push_back(s.data());
    argv.push_back(nullptr);

    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0)
      fail(fmt::format("cannot create a pipe: {}", std::strerror(errno)));
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    if (!interactive)
      posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
    pid_t pid = 0;
    const int rc =
        ::posix_spawnp(&pid, exec_.command.c_str(), &actions, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    ::close(fds[1]);
    if (rc != 0) {
      ::close(fds[0]);
      if (rc == ENOENT) {
        fail(exec_.install_hint.empty()
                 ? std::string("executable not found")
                 : fmt::format("executable not found\n\n{}", exec_.install_hint));
      }
      fail(fmt::format("cannot run: {}", std::strerror(rc)));
    }

    std::string out;
    bool too_big = false;
    char buffer[8192];
    for (;;) {
      const ssize_t n = ::read(fds[0], buffer, sizeof buffer);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        break;
      if (out.size() + static_cast<std::size_t>(n) > kMaxPluginOutput)
        too_big = true;
      if (!too_big)
        out.append(buffer, static_cast<std::size_t>(n));
    }
    ::close(fds[0]);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0) {
      if (errno != EINTR)
        fail(fmt::format("cannot wait for the plugin: {}", std::strerror(errno)));
    }
    if (WIFSIGNALED(status))
      fail(fmt::format("killed by signal {}", WTERMSIG(status)));
    if (WIFEXITED(status) && WEXITSTATUS(status) != 0) {
      fail(fmt::format("failed with exit code {}", WEXITSTATUS(status)));
    }
    if (too_big)
      fail("printed more than 4 MiB on stdout");
    return out;
  }

  /// Reads an ExecCredential. Never quotes the output: it holds the secret.
  PluginResult parse(const std::string& out) const {
    const nlohmann::json j = nlohmann::json::parse(out, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded())
      fail("decoding stdout: not valid JSON");
    if (!j.is_object())
      fail("decoding stdout: expected an ExecCredential object");
    auto text = [](const nlohmann::json& obj, const char* key) -> std::string {
      auto it = obj.find(key);
      return it != obj.end() && it->is_string() ? it->get<std::string>() : std::string();
    };
    const std::string kind = text(j, "kind");
    if (kind != "ExecCredential") {
      fail(fmt::format("decoding stdout: kind is \"{}\", want ExecCredential", kind));
    }
    const std::string version = text(j, "apiVersion");
    if (version != exec_.api_version) {
      fail(fmt::format("configured to use API version {}, but the plugin returned version {}",
                       exec_.api_version, version.empty() ? "(none)" : version));
    }
    auto status = j.find("status");
    if (status == j.end() || !status->is_object())
      fail("the plugin didn't return a status field");
    const std::string token = text(*status, "token");
    const std::string cert = text(*status, "clientCertificateData");
    const std::string key = text(*status, "clientKeyData");
    if (token.empty() && cert.empty() && key.empty()) {
      fail("the plugin didn't return a token or cert/key pair");
    }
    if (cert.empty() != key.empty())
      fail("the plugin returned only certificate or key, not both");

    PluginResult result;
    if (!token.empty())
      result.credentials.authorization = "Bearer " + token;
    result.credentials.client_cert_pem = cert.empty() ? cert_pem_ : cert;
    result.credentials.client_key_pem = key.empty() ? key_pem_ : key;
    auto expiry = status->find("expirationTimestamp");
    if (expiry != status->end() && !expiry->is_null()) {
      const std::string stamp = expiry->is_string() ? expiry->get<std::string>() : expiry->dump();
      result.expiry = parse_rfc3339(stamp);
      if (!result.expiry) {
        fail(fmt::format("status.expirationTimestamp \"{}\" is not an RFC 3339 time", stamp));
      }
    }
    return result;
  }

  PluginResult run() const { return parse(spawn(interactive())); }

  const ExecPluginConfig exec_;
  const std::string server_;
  const TlsConfig tls_;
  const std::string cert_pem_;
  const std::string key_pem_;
  Clock& clock_;
  std::mutex mu_;
  std::optional<PluginResult> cached_;
};

}  // namespace

std::unique_ptr<CredentialSource> make_credential_source(const AuthConfig& auth,
                                                         const std::string& server,
                                                         const TlsConfig& tls, Clock& clock) {
  if (!auth.token.empty()) {
    return std::make_unique<StaticCredentials>(
        RequestCredentials{"Bearer " + auth.token, auth.client_cert_pem, auth.client_key_pem});
  }
  if (!auth.token_file.empty()) {
    return std::make_unique<TokenFileCredentials>(auth.token_file, auth.client_cert_pem,
                                                  auth.client_key_pem, clock);
  }
  if (auth.exec) {
    return std::make_unique<ExecCredentials>(*auth.exec, server, tls, auth.client_cert_pem,
                                             auth.client_key_pem, clock);
  }
  std::string authorization;
  if (!auth.username.empty() || !auth.password.empty()) {
    authorization = "Basic " + base64_encode(auth.username + ":" + auth.password);
  }
  return std::make_unique<StaticCredentials>(
      RequestCredentials{std::move(authorization), auth.client_cert_pem, auth.client_key_pem});
}

}  // namespace trainctl::kube
