#include "sandbox/sandbox.h"

#include <fmt/format.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <yaml-cpp/yaml.h>

#include <fstream>
#include <sstream>

#include "error.h"
#include "sandbox/pki.h"
#include "sandbox/strategies/builtin.h"
#include "text.h"

namespace trainctl::sandbox {
namespace fs = std::filesystem;

namespace {

std::optional<std::string> read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in)
    return std::nullopt;
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

/// Writes a file only its owner can read: keys and tokens never sit world-readable.
void write_private(const fs::path& p, const std::string& content) {
  const fs::path tmp = p.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out)
      throw Error(ErrorKind::Config, fmt::format("cannot write {}", tmp.string()));
    ::chmod(tmp.c_str(), 0600);
    out << content;
  }
  fs::rename(tmp, p);
}

/// The pair kept as <name>.crt and <name>.key under `dir`, made and saved when either is missing.
CertifiedKey load_or_make(const fs::path& dir, const std::string& name,
                          const std::function<CertifiedKey()>& make) {
  auto cert = read_file(dir / (name + ".crt"));
  auto key = read_file(dir / (name + ".key"));
  if (cert && key)
    return {*cert, *key};
  CertifiedKey fresh = make();
  write_private(dir / (name + ".crt"), fresh.cert_pem);
  write_private(dir / (name + ".key"), fresh.key_pem);
  return fresh;
}

std::string random_token() {
  unsigned char bytes[24];
  if (RAND_bytes(bytes, sizeof bytes) != 1) {
    throw Error(ErrorKind::Config, "the system random generator failed");
  }
  return hex_encode(bytes);
}

}  // namespace

std::string sandbox_kubeconfig(const std::string& server_url, const std::string& ca_pem,
                               const std::string& client_cert_pem,
                               const std::string& client_key_pem) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  out << YAML::Key << "apiVersion" << YAML::Value << "v1";
  out << YAML::Key << "kind" << YAML::Value << "Config";
  out << YAML::Key << "current-context" << YAML::Value << kSandboxContext;
  out << YAML::Key << "clusters" << YAML::Value << YAML::BeginSeq << YAML::BeginMap;
  out << YAML::Key << "name" << YAML::Value << kSandboxContext;
  out << YAML::Key << "cluster" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "server" << YAML::Value << server_url;
  out << YAML::Key << "certificate-authority-data" << YAML::Value << base64_encode(ca_pem);
  out << YAML::EndMap << YAML::EndMap << YAML::EndSeq;
  out << YAML::Key << "users" << YAML::Value << YAML::BeginSeq << YAML::BeginMap;
  out << YAML::Key << "name" << YAML::Value << kSandboxContext;
  out << YAML::Key << "user" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "client-certificate-data" << YAML::Value << base64_encode(client_cert_pem);
  out << YAML::Key << "client-key-data" << YAML::Value << base64_encode(client_key_pem);
  out << YAML::EndMap << YAML::EndMap << YAML::EndSeq;
  out << YAML::Key << "contexts" << YAML::Value << YAML::BeginSeq << YAML::BeginMap;
  out << YAML::Key << "name" << YAML::Value << kSandboxContext;
  out << YAML::Key << "context" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "cluster" << YAML::Value << kSandboxContext;
  out << YAML::Key << "user" << YAML::Value << kSandboxContext;
  out << YAML::Key << "namespace" << YAML::Value << "default";
  out << YAML::EndMap << YAML::EndMap << YAML::EndSeq;
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

namespace {

/// The kubeconfig at `target` as YAML; null when the file does not exist.
YAML::Node load_kubeconfig(const fs::path& target) {
  const auto text = read_file(target);
  if (!text)
    return YAML::Node();
  try {
    return YAML::Load(*text);
  } catch (const YAML::Exception& e) {
    throw Error(ErrorKind::Config,
                fmt::format("{}:{}: {}", target.string(), e.mark.line + 1, e.msg));
  }
}

/// `doc`'s clusters, users and contexts without the sandbox's entries.
void drop_sandbox_entries(YAML::Node& doc) {
  for (const char* section : {"clusters", "users", "contexts"}) {
    YAML::Node kept(YAML::NodeType::Sequence);
    for (const auto& entry : doc[section]) {
      if (entry["name"].as<std::string>("") != kSandboxContext)
        kept.push_back(entry);
    }
    doc[section] = kept;
  }
}

void write_kubeconfig_file(const fs::path& target, const YAML::Node& doc) {
  fs::create_directories(target.parent_path());
  YAML::Emitter out;
  out << doc;
  write_private(target, std::string(out.c_str()) + "\n");
}

}  // namespace

void merge_sandbox_kubeconfig(const fs::path& target, const std::string& sandbox_yaml) {
  YAML::Node doc = load_kubeconfig(target);
  if (!doc.IsMap()) {
    doc = YAML::Node(YAML::NodeType::Map);
    doc["apiVersion"] = "v1";
    doc["kind"] = "Config";
  }
  const YAML::Node sandbox = YAML::Load(sandbox_yaml);
  drop_sandbox_entries(doc);
  for (const char* section : {"clusters", "users", "contexts"})
    doc[section].push_back(sandbox[section][0]);
  if (!doc["current-context"] || doc["current-context"].as<std::string>("").empty()) {
    doc["current-context"] = kSandboxContext;
  }
  write_kubeconfig_file(target, doc);
}

bool remove_sandbox_kubeconfig(const fs::path& target) {
  YAML::Node doc = load_kubeconfig(target);
  if (!doc.IsMap())
    return false;
  bool found = false;
  for (const char* section : {"clusters", "users", "contexts"}) {
    for (const auto& entry : doc[section])
      found = found || entry["name"].as<std::string>("") == kSandboxContext;
  }
  if (!found)
    return false;
  drop_sandbox_entries(doc);
  if (doc["current-context"].as<std::string>("") == kSandboxContext)
    doc["current-context"] = "";  // as `kind delete cluster` leaves it
  write_kubeconfig_file(target, doc);
  return true;
}

Sandbox::Sandbox(SandboxOptions options) : options_(std::move(options)) {}

Sandbox::~Sandbox() {
  stop();
}

void Sandbox::load_or_create_credentials() {
  const fs::path& dir = options_.data_dir;
  fs::create_directories(dir);
  ::chmod(dir.c_str(), 0700);
  const CertifiedKey authority =
      load_or_make(dir, "ca", [] { return make_certificate_authority("trainctl-sandbox-ca"); });
  ca_pem_ = authority.cert_pem;
  ca_key_pem_ = authority.key_pem;
  // The serving certificate is cheap: issue a fresh one each start, for today's host names.
  const CertifiedKey serving = issue_certificate(
      authority,
      {.common_name = "trainctl-sandbox-apiserver",
       .dns_names = {"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
       .ip_addresses = {"127.0.0.1"},
       .server_auth = true});
  server_cert_pem_ = serving.cert_pem;
  server_key_pem_ = serving.key_pem;
  const CertifiedKey admin = load_or_make(dir, "admin", [&] {
    return issue_certificate(authority, {.common_name = "trainctl-admin",
                                         .organizations = {"system:masters"},
                                         .client_auth = true});
  });
  admin_cert_pem_ = admin.cert_pem;
  admin_key_pem_ = admin.key_pem;
  auto tokens = read_file(dir / "tokens.csv");
  if (!tokens) {
    tokens = fmt::format("{},trainctl-admin,trainctl-admin,\"system:masters\"\n", random_token());
    write_private(dir / "tokens.csv", *tokens);
  }
  admin_token_ = tokens->substr(0, tokens->find(','));
}

void Sandbox::start() {
  if (options_.data_dir.empty())
    throw Error(ErrorKind::Usage, "the sandbox needs a data dir");
  load_or_create_credentials();
  store_ = std::make_unique<Store>(options_.watch_window);
  install_builtin_resources(*store_);
  for (const char* ns : {"default", "kube-system", "kube-public", "kube-node-lease"})
    publish_root_ca(*store_, ns, ca_pem_);
  ClusterOptions cluster = options_.cluster;
  cluster.error_log = options_.log;
  cluster_ = std::make_unique<SimulatedCluster>(*store_, cluster);
  ApiServerOptions api;
  api.tokens = ApiServer::parse_token_file(*read_file(options_.data_dir / "tokens.csv"));
  api.faults = options_.faults;
  api.error_log = options_.log;
  api.audit = options_.audit;
  api_ = std::make_unique<ApiServer>(*store_, api);
  api_->set_cluster(cluster_.get());
  HttpsServerConfig http;
  http.cert_pem = server_cert_pem_;
  http.key_pem = server_key_pem_;
  http.client_ca_pem = ca_pem_;
  http.host = options_.host;
  http.port = options_.port;
  http.error_log = options_.log;
  server_ = std::make_unique<HttpsServer>(
      http, [this](const Request& req, ResponseWriter& w) { api_->handle(req, w); });
  server_->start();
  api_->set_advertise_address(fmt::format("{}:{}", options_.host, server_->port()));
  publish_kubernetes_service(*store_, server_->port());
  cluster_->start();
  jobs_ = std::make_unique<JobController>(*store_);
  jobs_->start();
  write_kubeconfig();
}

void Sandbox::stop() {
  if (server_)
    server_->stop();
  if (cluster_)
    cluster_->stop();
  if (jobs_)
    jobs_->stop();
  server_.reset();
  jobs_.reset();
  api_.reset();
  cluster_.reset();
  store_.reset();
}

int Sandbox::port() const {
  return server_ ? server_->port() : 0;
}

std::string Sandbox::server_url() const {
  return fmt::format("https://{}:{}", options_.host, port());
}

fs::path Sandbox::kubeconfig_path() const {
  return options_.data_dir / "kubeconfig";
}

void Sandbox::write_kubeconfig() const {
  write_private(kubeconfig_path(),
                sandbox_kubeconfig(server_url(), ca_pem_, admin_cert_pem_, admin_key_pem_));
}

kube::RestConfig Sandbox::admin_config() const {
  kube::RestConfig config;
  config.server = server_url();
  config.tls.ca_pem = ca_pem_;
  config.auth.client_cert_pem = admin_cert_pem_;
  config.auth.client_key_pem = admin_key_pem_;
  config.qps = 0;
  config.context_name = kSandboxContext;
  config.source = kubeconfig_path().string();
  return config;
}

}  // namespace trainctl::sandbox
