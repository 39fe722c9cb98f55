#include "sandbox/api_server.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "error.h"
#include "json_access.h"
#include "kube/exec_protocol.h"
#include "kube/websocket.h"
#include "sandbox/field_errors.h"
#include "sandbox/patch.h"
#include "sandbox/table.h"
#include "text.h"
#include "yaml_json.h"

namespace trainctl::sandbox {

using nlohmann::json;

namespace {

constexpr std::string_view kJson = "application/json";
constexpr const char* kServerVersion = "v1.31.0";

/// The openapi_v2.Document {swagger: "2.0", info: {title, version}} in protobuf wire format.
std::string openapi_v2_protobuf() {
  auto field = [](int number, std::string_view bytes) {
    std::string out;
    out.push_back(static_cast<char>(number << 3 | 2));  // length-delimited
    out.push_back(static_cast<char>(bytes.size()));     // every field here is < 128 bytes
    out.append(bytes);
    return out;
  };
  return field(1, "2.0") + field(2, field(1, "Kubernetes") + field(2, kServerVersion));
}

// ---------------------------------------------------------------------------------------------
// Status objects

json failure_status(int code, std::string_view reason, std::string_view message,
                    json details = nullptr) {
  json status = {{"kind", "Status"},    {"apiVersion", "v1"}, {"metadata", json::object()},
                 {"status", "Failure"}, {"message", message}, {"reason", reason},
                 {"code", code}};
  if (!details.is_null())
    status["details"] = std::move(details);
  return status;
}

json success_status() {
  return {{"kind", "Status"},
          {"apiVersion", "v1"},
          {"metadata", json::object()},
          {"status", "Success"}};
}

void respond_json(ResponseWriter& w, int code, const json& body, const HeaderList& extra = {}) {
  w.respond(code, kJson, body.dump(), extra);
}

void respond_status(ResponseWriter& w, int code, std::string_view reason, std::string_view message,
                    json details = nullptr) {
  respond_json(w, code, failure_status(code, reason, message, std::move(details)));
}

/// errors.NewInternalError: what the real server answers for a failure that is no API error.
void respond_internal_error(ResponseWriter& w, std::string_view what) {
  respond_status(w, 500, "InternalError", fmt::format("Internal error occurred: {}", what),
                 {{"causes", json::array({{{"message", what}}})}});
}

[[noreturn]] void fail(ErrorKind kind, int code, std::string message) {
  throw Error(kind, std::move(message), code);
}

std::string rfc3339_now() {
  const auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string lower_first(std::string s) {
  return to_lower(s);
}

bool is_dns1123_label(std::string_view s) {
  if (s.empty() || s.size() > 63)
    return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    if (!alnum && !(c == '-' && i > 0 && i + 1 < s.size()))
      return false;
  }
  return true;
}

/// The request body as JSON, whether the client sent JSON or YAML.
json parse_body(const Request& request) {
  const std::string type = to_lower(request.header("content-type"));
  if (request.body.empty())
    fail(ErrorKind::BadRequest, 400, "the request body is empty");
  if (type.find("yaml") != std::string::npos) {
    try {
      return yaml_to_json(YAML::Load(request.body));
    } catch (const YAML::Exception& e) {
      fail(ErrorKind::BadRequest, 400, fmt::format("error decoding YAML: {}", e.what()));
    }
  }
  json doc = json::parse(request.body, nullptr, false);
  if (doc.is_discarded()) {
    fail(ErrorKind::BadRequest, 400,
         "couldn't get version/kind; json parse error: invalid character in the request body");
  }
  return doc;
}

bool dry_run(const Request& request) {
  const std::string value = request.param("dryRun");
  if (value.empty())
    return false;
  if (value != "All") {
    fail(ErrorKind::BadRequest, 400,
         fmt::format("Invalid dry run value: {:?}: supported values are \"All\"", value));
  }
  return true;
}

std::string singular(const ResourceInfo& info) {
  return lower_first(info.kind);
}

// ---------------------------------------------------------------------------------------------
// Built-in resources

struct Builtin {
  ResourceInfo info;
  std::vector<std::string> short_names;
};

const std::vector<Builtin>& builtins() {
  static const std::vector<Builtin> list = {
      {{"", "v1", "namespaces", "Namespace", false, true}, {"ns"}},
      {{"", "v1", "pods", "Pod", true, true}, {"po"}},
      {{"", "v1", "services", "Service", true, true}, {"svc"}},
      {{"", "v1", "configmaps", "ConfigMap", true, false}, {"cm"}},
      {{"", "v1", "secrets", "Secret", true, false}, {}},
      {{"", "v1", "events", "Event", true, false}, {"ev"}},
      {{"", "v1", "nodes", "Node", false, true}, {"no"}},
      {{"", "v1", "serviceaccounts", "ServiceAccount", true, false}, {"sa"}},
      {{"coordination.k8s.io", "v1", "leases", "Lease", true, false}, {}},
      {{"scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", false, false}, {"pc"}},
      {{"batch", "v1", "jobs", "Job", true, true}, {}},
      // Stored only: the controller creates them for PyTorchJob elasticPolicy.metrics.
      {{"autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler", true, true},
       {"hpa"}},
      // Stored only (no controllers act on them), so `trainctl install` can be tested here.
      {{"apps", "v1", "deployments", "Deployment", true, true}, {"deploy"}},
      {{"rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", false, false}, {}},
      {{"rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", false,
        false},
       {}},
      {{"rbac.authorization.k8s.io", "v1", "roles", "Role", true, false}, {}},
      {{"rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", true, false}, {}},
      {{"events.k8s.io", "v1", "events", "Event", true, false}, {"ev"}},
      {{"apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition",
        false, true},
       {"crd", "crds"}},
  };
  return list;
}

}  // namespace

const std::vector<ResourceInfo>& builtin_resources() {
  static const std::vector<ResourceInfo> infos = [] {
    std::vector<ResourceInfo> v;
    for (const auto& b : builtins())
      v.push_back(b.info);
    return v;
  }();
  return infos;
}

void install_builtin_resources(Store& store) {
  for (const auto& info : builtin_resources())
    store.register_resource(info);
  for (const char* ns : {"default", "kube-system", "kube-public", "kube-node-lease"}) {
    try {
      store.create("namespaces", {{"apiVersion", "v1"},
                                  {"kind", "Namespace"},
                                  {"metadata", {{"name", ns}}},
                                  {"spec", {{"finalizers", {"kubernetes"}}}},
                                  {"status", {{"phase", "Active"}}}});
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::AlreadyExists)
        throw;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Faults

json Faults::to_json() const {
  return {{"latencyMilliseconds", latency.count()},
          {"errorRate", error_rate},
          {"throttleRate", throttle_rate},
          {"dropWatchesAfterSeconds", drop_watches_after.count()},
          {"goneOnWatchResume", gone_on_watch_resume},
          {"conflictOnUpdate", conflict_on_update}};
}

Faults Faults::from_json(const json& doc) {
  if (!doc.is_object())
    fail(ErrorKind::BadRequest, 400, "faults must be a JSON object");
  static const std::set<std::string> known = {"latencyMilliseconds", "errorRate",
                                              "throttleRate",        "dropWatchesAfterSeconds",
                                              "goneOnWatchResume",   "conflictOnUpdate"};
  for (const auto& [key, value] : doc.items()) {
    if (!known.count(key))
      fail(ErrorKind::BadRequest, 400, fmt::format("unknown fault {:?}", key));
  }
  try {
    Faults f;
    f.latency = std::chrono::milliseconds(doc.value("latencyMilliseconds", 0));
    f.error_rate = doc.value("errorRate", 0.0);
    f.throttle_rate = doc.value("throttleRate", 0.0);
    f.drop_watches_after = std::chrono::seconds(doc.value("dropWatchesAfterSeconds", 0));
    f.gone_on_watch_resume = doc.value("goneOnWatchResume", false);
    f.conflict_on_update = doc.value("conflictOnUpdate", false);
    if (f.error_rate < 0 || f.error_rate > 1 || f.throttle_rate < 0 || f.throttle_rate > 1) {
      fail(ErrorKind::BadRequest, 400, "errorRate and throttleRate are fractions in [0, 1]");
    }
    return f;
  } catch (const json::exception& e) {
    fail(ErrorKind::BadRequest, 400, fmt::format("faults: {}", e.what()));
  }
}

// ---------------------------------------------------------------------------------------------
// ApiServer

struct ApiServer::Route {
  ResourceInfo info;
  std::string group;
  std::string version;
  std::string ns;
  std::string name;
  std::string subresource;

  std::string api_version() const { return group.empty() ? version : group + "/" + version; }
  json details() const {
    json d = {{"name", name}, {"kind", info.plural}};
    if (!group.empty())
      d["group"] = group;
    return d;
  }
};

ApiServer::ApiServer(Store& store, ApiServerOptions options)
    : store_(store), options_(std::move(options)) {
  for (const auto& b : builtins()) {
    served_[{b.info.group, b.info.version, b.info.plural}] = b.info;
    short_names_[b.info.group_resource()] = b.short_names;
  }
  // CRDs that already exist in the store (a restarted server) serve again.
  for (const auto& crd : store_.list("customresourcedefinitions.apiextensions.k8s.io", {}).items) {
    crd_created(crd);
  }
}

void ApiServer::set_advertise_address(std::string address) {
  std::lock_guard lock(mu_);
  options_.advertise_address = std::move(address);
}

void ApiServer::set_faults(const Faults& faults) {
  std::lock_guard lock(mu_);
  options_.faults = faults;
}

Faults ApiServer::faults() const {
  std::lock_guard lock(mu_);
  return options_.faults;
}

std::map<std::string, UserInfo> ApiServer::parse_token_file(const std::string& text) {
  std::map<std::string, UserInfo> tokens;
  std::istringstream in(text);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    std::string_view l = trim(line);
    if (l.empty() || l.front() == '#')
      continue;
    std::vector<std::string> fields;
    std::string field;
    bool quoted = false;
    for (char c : l) {
      if (c == '"') {
        quoted = !quoted;
      } else if (c == ',' && !quoted) {
        fields.push_back(std::string(trim(field)));
        field.clear();
      } else {
        field.push_back(c);
      }
    }
    fields.push_back(std::string(trim(field)));
    if (fields.size() < 3 || fields[0].empty() || fields[1].empty()) {
      throw Error(ErrorKind::Config,
                  fmt::format("token file line {}: expected token,user,uid[,\"groups\"]", n));
    }
    UserInfo user{fields[1], fields[2], {}};
    if (fields.size() > 3) {
      std::istringstream groups(fields[3]);
      for (std::string g; std::getline(groups, g, ',');) {
        if (!trim(g).empty())
          user.groups.emplace_back(trim(g));
      }
    }
    tokens[fields[0]] = std::move(user);
  }
  return tokens;
}

std::optional<UserInfo> ApiServer::authenticate(const Request& request) const {
  // As kube-apiserver's union of authenticators: a verified client certificate is tried first
  // and wins; then the bearer token.
  if (request.peer.present) {
    return UserInfo{request.peer.common_name, "", request.peer.organizations};
  }
  const std::string auth = request.header("authorization");
  if (!auth.starts_with("Bearer "))
    return std::nullopt;
  std::lock_guard lock(mu_);
  auto it = options_.tokens.find(std::string(trim(std::string_view(auth).substr(7))));
  if (it == options_.tokens.end())
    return std::nullopt;
  return it->second;
}

bool ApiServer::inject_fault(ResponseWriter& response) {
  Faults f;
  double roll = 0;
  {
    std::lock_guard lock(mu_);
    f = options_.faults;
    roll = std::uniform_real_distribution<double>(0, 1)(rng_);
  }
  if (f.latency.count() > 0)
    std::this_thread::sleep_for(f.latency);
  if (roll < f.error_rate) {
    respond_status(response, 500, "InternalError", "an error on the server (injected fault)");
    return true;
  }
  if (roll < f.error_rate + f.throttle_rate) {
    respond_json(response, 429,
                 failure_status(429, "TooManyRequests",
                                "Too many requests, please try again later. (injected fault)",
                                {{"retryAfterSeconds", 1}}),
                 {{"Retry-After", "1"}});
    return true;
  }
  return false;
}

void ApiServer::handle(const Request& request, ResponseWriter& response) {
  try {
    const bool sandbox_admin = request.path.starts_with("/sandbox/");
    if (!sandbox_admin && inject_fault(response))
      return;
    std::optional<UserInfo> user = authenticate(request);
    if (!user) {
      const bool public_path = request.path == "/version" || request.path == "/healthz" ||
                               request.path == "/livez" || request.path == "/readyz";
      const bool bad_token = !request.header("authorization").empty();
      if (!public_path || bad_token) {
        respond_status(response, 401, "Unauthorized", "Unauthorized");
        return;
      }
      user = UserInfo{"system:anonymous", "", {"system:unauthenticated"}};
    }
    serve(request, response, *user);
  } catch (const Error& e) {
    if (response.responded())
      return;
    const json status = status_object(e);
    // As the real server's ErrorNegotiated: a Status that asks for a retry says so in a header.
    HeaderList headers;
    const json& after = member(object_member(status, "details"), "retryAfterSeconds");
    if (after.is_number_integer() && after.get<int>() > 0)
      headers.emplace_back("Retry-After", std::to_string(after.get<int>()));
    respond_json(response, status.value("code", 500), status, headers);
  } catch (const json::exception& e) {
    // A body of the wrong shape; logged as well, in case it was the server's own reading.
    log_failure(request, e.what());
    if (response.responded())
      return;
    respond_status(response, 400, "BadRequest", e.what());
  } catch (const std::exception& e) {
    // Mid-response, the HTTP server cuts the connection short (and logs it).
    if (response.responded())
      throw;
    log_failure(request, e.what());
    respond_internal_error(response, e.what());
  } catch (...) {
    if (response.responded())
      throw;
    log_failure(request, "unknown exception");
    respond_internal_error(response, "unknown exception");
  }
}

void ApiServer::log_failure(const Request& request, std::string_view what) const {
  if (options_.error_log)
    options_.error_log(fmt::format("{} {}: {}", request.method, request.path, what));
}

void ApiServer::serve(const Request& request, ResponseWriter& response, const UserInfo&) {
  const std::string& path = request.path;
  if (path == "/healthz" || path == "/livez" || path == "/readyz") {
    response.respond(200, "text/plain", "ok");
    return;
  }
  if (path == "/sandbox/faults") {
    if (request.method == "PUT" || request.method == "POST")
      set_faults(Faults::from_json(parse_body(request)));
    respond_json(response, 200, faults().to_json());
    return;
  }
  if (serve_discovery(request, response))
    return;
  std::optional<Route> r = route(path);
  if (!r) {
    respond_status(response, 404, "NotFound", "the server could not find the requested resource");
    return;
  }
  serve_resource(request, response, *r);
}

// --- Discovery --------------------------------------------------------------------------------

json ApiServer::resource_list(const std::string& group, const std::string& version) const {
  json resources = json::array();
  const std::vector<std::string> all_verbs = {"create", "delete", "deletecollection", "get",
                                              "list",   "patch",  "update",           "watch"};
  std::lock_guard lock(mu_);
  for (const auto& [key, info] : served_) {
    if (std::get<0>(key) != group || std::get<1>(key) != version)
      continue;
    json entry = {{"name", info.plural},
                  {"singularName", singular(info)},
                  {"namespaced", info.namespaced},
                  {"kind", info.kind},
                  {"verbs", all_verbs}};
    auto sn = short_names_.find(info.group_resource());
    if (sn != short_names_.end() && !sn->second.empty())
      entry["shortNames"] = sn->second;
    resources.push_back(entry);
    // `info` is captured explicitly: clang before 16 cannot capture a structured binding.
    auto sub = [&, &info = info](const std::string& name, const std::string& kind,
                                 std::vector<std::string> verbs) {
      resources.push_back({{"name", info.plural + "/" + name},
                           {"singularName", ""},
                           {"namespaced", info.namespaced},
                           {"kind", kind},
                           {"verbs", verbs}});
    };
    if (info.status_subresource)
      sub("status", info.kind, {"get", "patch", "update"});
    if (scale_paths_.contains(info.group_resource() + "/" + info.version)) {
      sub("scale", "Scale", {"get", "patch", "update"});
      resources.back()["group"] = "autoscaling";
      resources.back()["version"] = "v1";
    }
    if (info.group_resource() == "pods") {
      sub("log", "Pod", {"get"});
      sub("exec", "PodExecOptions", {"create", "get"});
      sub("binding", "Binding", {"create"});
    }
  }
  if (resources.empty())
    return nullptr;
  return {{"kind", "APIResourceList"},
          {"apiVersion", "v1"},
          {"groupVersion", group.empty() ? version : group + "/" + version},
          {"resources", resources}};
}

json ApiServer::group_list() const {
  std::map<std::string, std::vector<std::string>> versions;
  {
    std::lock_guard lock(mu_);
    for (const auto& [key, info] : served_) {
      const auto& [group, version, plural] = key;
      if (group.empty())
        continue;
      auto& v = versions[group];
      if (std::find(v.begin(), v.end(), version) == v.end())
        v.push_back(version);
    }
  }
  json groups = json::array();
  for (const auto& [group, vs] : versions) {
    json list = json::array();
    for (const auto& v : vs)
      list.push_back({{"groupVersion", group + "/" + v}, {"version", v}});
    groups.push_back({{"name", group}, {"versions", list}, {"preferredVersion", list[0]}});
  }
  return {{"kind", "APIGroupList"}, {"apiVersion", "v1"}, {"groups", groups}};
}

bool ApiServer::serve_discovery(const Request& request, ResponseWriter& response) {
  const std::string& path = request.path;
  if (request.method != "GET")
    return false;
  if (path == "/version") {
    respond_json(response, 200,
                 {{"major", "1"},
                  {"minor", "31"},
                  {"gitVersion", std::string(kServerVersion) + "-trainctl-sandbox"},
                  {"gitCommit", "0000000000000000000000000000000000000000"},
                  {"gitTreeState", "clean"},
                  {"buildDate", "2026-11-01T00:00:00Z"},
                  {"goVersion", "n/a (C++20)"},
                  {"compiler", "gc"},
                  {"platform", "linux/amd64"}});
    return true;
  }
  if (path == "/openapi/v2") {
    // An empty document: no schema, so kubectl's client-side validation has nothing to reject
    // and its field-validation probe finds the parameter unsupported. kubectl asks for protobuf.
    if (request.header("accept").find("protobuf") != std::string::npos) {
      response.respond(200, "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
                       openapi_v2_protobuf());
    } else {
      respond_json(response, 200,
                   {{"swagger", "2.0"},
                    {"info", {{"title", "Kubernetes"}, {"version", kServerVersion}}},
                    {"paths", json::object()},
                    {"definitions", json::object()}});
    }
    return true;
  }
  if (path == "/api") {
    respond_json(
        response, 200,
        {{"kind", "APIVersions"},
         {"versions", {"v1"}},
         {"serverAddressByClientCIDRs",
          {{{"clientCIDR", "0.0.0.0/0"}, {"serverAddress", options_.advertise_address}}}}});
    return true;
  }
  if (path == "/apis") {
    respond_json(response, 200, group_list());
    return true;
  }
  std::vector<std::string> seg;
  std::istringstream in(path);
  for (std::string s; std::getline(in, s, '/');) {
    if (!s.empty())
      seg.push_back(s);
  }
  std::string group, version;
  if (seg.size() == 2 && seg[0] == "api") {
    version = seg[1];
  } else if (seg.size() == 3 && seg[0] == "apis") {
    group = seg[1];
    version = seg[2];
  } else if (seg.size() == 2 && seg[0] == "apis") {
    for (const auto& g : group_list()["groups"]) {
      if (g["name"] == seg[1]) {
        json doc = g;
        doc["kind"] = "APIGroup";
        doc["apiVersion"] = "v1";
        respond_json(response, 200, doc);
        return true;
      }
    }
    respond_status(response, 404, "NotFound", "the server could not find the requested resource");
    return true;
  } else {
    return false;
  }
  json list = resource_list(group, version);
  if (list.is_null()) {
    respond_status(response, 404, "NotFound", "the server could not find the requested resource");
  } else {
    respond_json(response, 200, list);
  }
  return true;
}

std::optional<ApiServer::Route> ApiServer::route(const std::string& path) const {
  std::vector<std::string> seg;
  std::istringstream in(path);
  for (std::string s; std::getline(in, s, '/');) {
    if (!s.empty())
      seg.push_back(s);
  }
  Route r;
  size_t i = 0;
  if (seg.size() >= 3 && seg[0] == "api") {
    r.version = seg[1];
    i = 2;
  } else if (seg.size() >= 4 && seg[0] == "apis") {
    r.group = seg[1];
    r.version = seg[2];
    i = 3;
  } else {
    return std::nullopt;
  }
  std::vector<std::string> rest(seg.begin() + static_cast<long>(i), seg.end());
  const bool namespace_subresource =
      rest.size() == 3 && (rest[2] == "status" || rest[2] == "finalize");
  if (rest.size() >= 3 && rest[0] == "namespaces" && !namespace_subresource) {
    r.ns = rest[1];
    rest.erase(rest.begin(), rest.begin() + 2);
  }
  if (rest.empty() || rest.size() > 3)
    return std::nullopt;
  std::lock_guard lock(mu_);
  auto it = served_.find({r.group, r.version, rest[0]});
  if (it == served_.end())
    return std::nullopt;
  r.info = it->second;
  if (!r.info.namespaced && !r.ns.empty())
    return std::nullopt;
  if (rest.size() > 1)
    r.name = rest[1];
  if (rest.size() > 2)
    r.subresource = rest[2];
  return r;
}

// --- Verbs ------------------------------------------------------------------------------------

void ApiServer::serve_resource(const Request& request, ResponseWriter& response, Route& route) {
  const std::string& m = request.method;
  auto not_allowed = [&] {
    respond_status(response, 405, "MethodNotAllowed",
                   "the server does not allow this method on the requested resource");
  };
  const std::string gr = route.info.group_resource();
  if (route.name.empty()) {
    if (m == "GET") {
      const std::string watch = request.param("watch");
      if (watch == "true" || watch == "1") {
        serve_watch(request, response, route);
      } else {
        serve_list(request, response, route);
      }
    } else if (m == "POST") {
      serve_create(request, response, route);
    } else if (m == "DELETE") {
      serve_delete_collection(request, response, route);
    } else {
      not_allowed();
    }
    return;
  }
  if (route.subresource.empty() || route.subresource == "status") {
    if (route.subresource == "status" && !route.info.status_subresource) {
      respond_status(response, 404, "NotFound", "the server could not find the requested resource");
      return;
    }
    if (m == "GET") {
      json obj = store_.get(gr, route.ns, route.name);
      obj["apiVersion"] = route.api_version();
      respond_objects(request, response, route, std::move(obj));
    } else if (m == "PUT") {
      serve_update(request, response, route);
    } else if (m == "PATCH") {
      serve_patch(request, response, route);
    } else if (m == "DELETE" && route.subresource.empty()) {
      serve_delete(request, response, route);
    } else {
      not_allowed();
    }
    return;
  }
  if (gr == "pods" && route.subresource == "log") {
    if (m != "GET")
      return not_allowed();
    serve_logs(request, response, route);
    return;
  }
  if (gr == "pods" && route.subresource == "exec") {
    if (m != "GET" && m != "POST")
      return not_allowed();
    serve_exec(request, response, route);
    return;
  }
  if (gr == "pods" && route.subresource == "binding") {
    if (m != "POST")
      return not_allowed();
    serve_binding(request, response, route);
    return;
  }
  if (route.subresource == "scale") {
    if (m != "GET" && m != "PUT" && m != "PATCH")
      return not_allowed();
    serve_scale(request, response, route);
    return;
  }
  respond_status(response, 404, "NotFound", "the server could not find the requested resource");
}

void ApiServer::serve_list(const Request& request, ResponseWriter& response, const Route& route) {
  ListRequest list;
  list.ns = route.ns;
  list.labels = LabelSelector::parse(request.param("labelSelector"));
  list.fields = FieldSelector::parse(request.param("fieldSelector"));
  list.fields.check_supported(route.info.group_resource());
  const std::string limit = request.param("limit");
  if (!limit.empty()) {
    try {
      list.limit = std::stoll(limit);
    } catch (const std::exception&) {
      fail(ErrorKind::BadRequest, 400, fmt::format("invalid limit {:?}", limit));
    }
  }
  list.continue_token = request.param("continue");
  list.resource_version = request.param("resourceVersion");
  list.resource_version_match = request.param("resourceVersionMatch");
  list.stop = response.stop_token();
  ListPage page = store_.list(route.info.group_resource(), list);
  json meta = {{"resourceVersion", page.resource_version}};
  if (!page.continue_token.empty())
    meta["continue"] = page.continue_token;
  if (page.remaining_item_count)
    meta["remainingItemCount"] = *page.remaining_item_count;
  json items = json::array();
  for (auto& item : page.items) {
    item["apiVersion"] = route.api_version();
    items.push_back(std::move(item));
  }
  respond_objects(request, response, route,
                  {{"kind", route.info.kind + "List"},
                   {"apiVersion", route.api_version()},
                   {"metadata", meta},
                   {"items", std::move(items)}});
}

json ApiServer::printer_columns(const Route& route) const {
  std::lock_guard lock(mu_);
  auto it = printer_columns_.find(route.info.group_resource() + "/" + route.version);
  return it == printer_columns_.end() ? json() : it->second;
}

void ApiServer::respond_objects(const Request& request, ResponseWriter& response,
                                const Route& route, json body) {
  if (!wants_table(request.header("accept"))) {
    respond_json(response, 200, body);
    return;
  }
  const bool list = body.contains("items");
  std::vector<json> objects;
  if (list) {
    for (auto& item : body["items"])
      objects.push_back(std::move(item));
  } else {
    objects.push_back(std::move(body));
  }
  const std::string include = request.param("includeObject");
  json table = to_table(route.info, objects, printer_columns(route),
                        include.empty() ? "Metadata" : include, store_.now());
  if (list)
    table["metadata"] = body["metadata"];
  respond_json(response, 200, table);
}

void ApiServer::serve_watch(const Request& request, ResponseWriter& response, const Route& route) {
  const LabelSelector labels = LabelSelector::parse(request.param("labelSelector"));
  const FieldSelector fields = FieldSelector::parse(request.param("fieldSelector"));
  fields.check_supported(route.info.group_resource());
  const std::string rv = request.param("resourceVersion");
  const bool bookmarks = request.param("allowWatchBookmarks") == "true";
  int timeout_seconds = 1800;
  if (const std::string t = request.param("timeoutSeconds"); !t.empty()) {
    try {
      timeout_seconds = std::stoi(t);
    } catch (const std::exception&) {
      fail(ErrorKind::BadRequest, 400, fmt::format("invalid timeoutSeconds {:?}", t));
    }
  }
  const Faults f = faults();
  const bool as_table = wants_table(request.header("accept"));
  const std::string include = request.param("includeObject");
  const json columns = as_table ? printer_columns(route) : json();
  auto error_event = [](int code, const std::string& reason, const std::string& message) {
    return json{{"type", "ERROR"}, {"object", failure_status(code, reason, message)}}.dump() + "\n";
  };
  std::shared_ptr<WatchStream> stream;
  try {
    if (f.gone_on_watch_resume && !rv.empty() && rv != "0") {
      throw Error(ErrorKind::Gone, fmt::format("too old resource version: {} (injected fault)", rv),
                  410);
    }
    stream = store_.watch(route.info.group_resource(), route.ns, labels, fields, rv, bookmarks);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::Gone)
      throw;
    // As the watch cache does: a 200 whose only event is an ERROR carrying 410 Expired.
    response.begin_stream(200, kJson);
    response.write_chunk(error_event(410, "Expired", e.message()));
    response.end_stream();
    return;
  }
  response.begin_stream(200, kJson);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_seconds);
  if (f.drop_watches_after.count() > 0) {
    deadline = std::min(deadline, std::chrono::steady_clock::now() + f.drop_watches_after);
  }
  const std::stop_token stop = response.stop_token();
  while (std::chrono::steady_clock::now() < deadline && !stop.stop_requested() &&
         response.client_connected()) {
    auto event = stream->next(std::chrono::milliseconds(250));
    if (!event) {
      if (stream->closed())
        break;
      continue;
    }
    const bool row = as_table && event->type != kube::WatchEventType::Error &&
                     event->type != kube::WatchEventType::Bookmark;
    if (row) {
      event->object = to_table(route.info, {event->object}, columns,
                               include.empty() ? "Metadata" : include, store_.now());
    } else if (event->type != kube::WatchEventType::Error) {
      event->object["apiVersion"] = route.api_version();
    }
    const std::string line =
        json{{"type", kube::to_string(event->type)}, {"object", std::move(event->object)}}.dump() +
        "\n";
    if (!response.write_chunk(line))
      break;
  }
  stream->close();
  response.end_stream();
}

void ApiServer::serve_create(const Request& request, ResponseWriter& response, const Route& route) {
  json obj = parse_body(request);
  if (!obj.is_object())
    fail(ErrorKind::BadRequest, 400, "the request body is not an object");
  const std::string api_version = obj.value("apiVersion", route.api_version());
  if (api_version != route.api_version()) {
    fail(
        ErrorKind::BadRequest, 400,
        fmt::format("the API version in the data ({}) does not match the expected API version ({})",
                    api_version, route.api_version()));
  }
  const std::string kind = obj.value("kind", route.info.kind);
  if (kind != route.info.kind) {
    fail(ErrorKind::BadRequest, 400,
         fmt::format("the kind in the data ({}) does not match the expected kind ({})", kind,
                     route.info.kind));
  }
  obj["apiVersion"] = route.info.api_version();
  obj["kind"] = route.info.kind;
  json& meta = obj["metadata"];
  if (!meta.is_object())
    meta = json::object();
  if (route.info.namespaced) {
    const std::string ns = meta.value("namespace", route.ns);
    if (ns != route.ns) {
      fail(ErrorKind::BadRequest, 400,
           "the namespace of the provided object does not match the namespace sent on the request");
    }
    meta["namespace"] = route.ns;
  } else {
    meta.erase("namespace");
  }
  admit(route.info, obj);
  const bool dry = dry_run(request);
  json created = store_.create(route.info.group_resource(), std::move(obj), dry);
  if (!dry) {
    const std::string gr = route.info.group_resource();
    if (gr == "customresourcedefinitions.apiextensions.k8s.io") {
      crd_created(created);
      created = store_.get(gr, "", created["metadata"]["name"]);
    } else if (gr == "namespaces") {
      try {
        store_.create(
            "serviceaccounts",
            {{"apiVersion", "v1"},
             {"kind", "ServiceAccount"},
             {"metadata", {{"name", "default"}, {"namespace", created["metadata"]["name"]}}}});
      } catch (const Error& e) {
        if (e.kind() != ErrorKind::AlreadyExists)
          throw;
      }
    }
  }
  created["apiVersion"] = route.api_version();
  respond_json(response, 201, created);
}

void ApiServer::serve_update(const Request& request, ResponseWriter& response, const Route& route) {
  if (faults().conflict_on_update) {
    fail(ErrorKind::Conflict, 409,
         fmt::format("Operation cannot be fulfilled on {} {:?}: the object has been modified; "
                     "please apply your changes to the latest version and try again "
                     "(injected fault)",
                     route.info.group_resource(), route.name));
  }
  json obj = parse_body(request);
  json& meta = obj["metadata"];
  if (!meta.is_object())
    meta = json::object();
  const std::string name = meta.value("name", "");
  if (name != route.name) {
    fail(ErrorKind::BadRequest, 400,
         fmt::format("the name of the object ({}) does not match the name on the URL ({})", name,
                     route.name));
  }
  if (route.info.namespaced) {
    if (meta.value("namespace", route.ns) != route.ns) {
      fail(ErrorKind::BadRequest, 400,
           "the namespace of the provided object does not match the namespace sent on the request");
    }
    meta["namespace"] = route.ns;
  }
  obj["apiVersion"] = route.info.api_version();
  obj["kind"] = route.info.kind;
  const WritePart part = route.subresource == "status" ? WritePart::Status : WritePart::Main;
  const bool dry = dry_run(request);
  json updated = store_.update(route.info.group_resource(), std::move(obj), part, dry);
  if (!dry && route.info.group_resource() == "customresourcedefinitions.apiextensions.k8s.io")
    crd_created(updated);  // serves the new versions and subresources, or stops if now deleted
  updated["apiVersion"] = route.api_version();
  respond_json(response, 200, updated);
}

void ApiServer::serve_patch(const Request& request, ResponseWriter& response, const Route& route) {
  if (faults().conflict_on_update) {
    fail(ErrorKind::Conflict, 409,
         fmt::format("Operation cannot be fulfilled on {} {:?}: the object has been modified "
                     "(injected fault)",
                     route.info.group_resource(), route.name));
  }
  const std::string gr = route.info.group_resource();
  const std::string content_type = request.header("content-type");
  const std::optional<PatchType> type = patch_type_for(content_type);
  if (!type || (*type == PatchType::StrategicMerge && !strategic_merge_supported(route.info))) {
    throw unsupported_patch_type(route.info);
  }
  PatchRequest patch_request;
  patch_request.type = *type;
  patch_request.body = parse_body(request);
  patch_request.part = route.subresource == "status" ? WritePart::Status : WritePart::Main;
  patch_request.field_manager = request.param("fieldManager");
  patch_request.force = request.param("force") == "true";
  patch_request.dry_run = dry_run(request);
  if (*type == PatchType::Apply && patch_request.field_manager.empty()) {
    fail(ErrorKind::BadRequest, 400, "PATCH, application/apply-patch+yaml requires fieldManager");
  }
  PatchResult result = patch(store_, gr, route.ns, route.name, patch_request);
  if (!patch_request.dry_run && gr == "customresourcedefinitions.apiextensions.k8s.io")
    crd_created(result.object);
  result.object["apiVersion"] = route.api_version();
  respond_json(response, result.created ? 201 : 200, result.object);
}

namespace {

DeleteRequest delete_request(const Request& request) {
  DeleteRequest del;
  if (!request.body.empty()) {
    json opts = json::parse(request.body, nullptr, false);
    if (!opts.is_object())
      fail(ErrorKind::BadRequest, 400, "DeleteOptions must be an object");
    del.propagation_policy = opts.value("propagationPolicy", "");
    if (opts.contains("preconditions")) {
      const json& p = opts["preconditions"];
      if (p.contains("uid"))
        del.precondition_uid = p["uid"].get<std::string>();
      if (p.contains("resourceVersion")) {
        del.precondition_resource_version = p["resourceVersion"].get<std::string>();
      }
    }
    if (opts.contains("dryRun"))
      del.dry_run = !opts["dryRun"].empty();
  }
  if (const std::string p = request.param("propagationPolicy"); !p.empty()) {
    del.propagation_policy = p;
  }
  if (!del.propagation_policy.empty() && del.propagation_policy != "Background" &&
      del.propagation_policy != "Foreground" && del.propagation_policy != "Orphan") {
    fail(ErrorKind::Invalid, 422,
         fmt::format("propagationPolicy: Unsupported value: {:?}: supported values: "
                     "\"Foreground\", \"Background\", \"Orphan\"",
                     del.propagation_policy));
  }
  del.dry_run = del.dry_run || dry_run(request);
  return del;
}

}  // namespace

void ApiServer::serve_delete(const Request& request, ResponseWriter& response, const Route& route) {
  const std::string gr = route.info.group_resource();
  const DeleteRequest del = delete_request(request);
  json deleted = store_.remove(gr, route.ns, route.name, del);
  // A dry run changes nothing; a definition that finalizers hold is still served.
  if (!del.dry_run && gr == "customresourcedefinitions.apiextensions.k8s.io")
    crd_created(deleted);
  deleted["apiVersion"] = route.api_version();
  respond_json(response, 200, deleted);
}

void ApiServer::serve_delete_collection(const Request& request, ResponseWriter& response,
                                        const Route& route) {
  ListRequest list;
  list.ns = route.ns;
  list.labels = LabelSelector::parse(request.param("labelSelector"));
  list.fields = FieldSelector::parse(request.param("fieldSelector"));
  const DeleteRequest del = delete_request(request);
  const std::string gr = route.info.group_resource();
  json items = json::array();
  for (const auto& item : store_.list(gr, list).items) {
    try {
      items.push_back(store_.remove(gr, item["metadata"].value("namespace", ""),
                                    item["metadata"]["name"], del));
      if (!del.dry_run && gr == "customresourcedefinitions.apiextensions.k8s.io")
        crd_created(items.back());
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::NotFound)
        throw;  // deleted meanwhile
    }
  }
  respond_json(response, 200,
               {{"kind", route.info.kind + "List"},
                {"apiVersion", route.api_version()},
                {"metadata", {{"resourceVersion", store_.current_resource_version()}}},
                {"items", items}});
}

namespace {

/// A scale path (".spec.pytorchReplicaSpecs.Worker.replicas") as a JSON pointer.
json::json_pointer scale_pointer(const std::string& path) {
  json::json_pointer pointer;
  std::string_view rest = path;
  if (rest.starts_with("."))
    rest.remove_prefix(1);
  while (!rest.empty()) {
    const std::size_t dot = rest.find('.');
    pointer /= std::string(rest.substr(0, dot));
    rest = dot == std::string_view::npos ? std::string_view() : rest.substr(dot + 1);
  }
  return pointer;
}

/// The integer at `path` of `object`; nullopt when absent, 500 when it is not an integer (the
/// apiextensions server's NestedInt64 error).
std::optional<std::int64_t> scale_int_at(const json& object, const std::string& path) {
  const json::json_pointer pointer = scale_pointer(path);
  if (path.empty() || !object.contains(pointer))
    return std::nullopt;
  const json& value = object.at(pointer);
  if (!value.is_number_integer())
    throw ApiError(ErrorKind::ServerError, 500, "InternalError",
                   fmt::format("Internal error occurred: {} accessor error: {} is of the type {}, "
                               "expected int64",
                               path, value.dump(), value.type_name()));
  return value.get<std::int64_t>();
}

/// autoscaling/v1 Scale of a custom resource (apiextensions' scaleFromCustomResource).
json scale_of(const json& object, const json& paths) {
  const json& meta = object.at("metadata");
  json scale_meta = json::object();
  for (const char* field : {"name", "namespace", "uid", "resourceVersion", "creationTimestamp"}) {
    if (meta.contains(field))
      scale_meta[field] = meta[field];
  }
  json status = {
      {"replicas", scale_int_at(object, paths.value("statusReplicasPath", "")).value_or(0)}};
  const std::string selector_path = paths.value("labelSelectorPath", "");
  if (!selector_path.empty() && object.contains(scale_pointer(selector_path)) &&
      object.at(scale_pointer(selector_path)).is_string())
    status["selector"] = object.at(scale_pointer(selector_path));
  return {{"kind", "Scale"},
          {"apiVersion", "autoscaling/v1"},
          {"metadata", std::move(scale_meta)},
          {"spec",
           {{"replicas", scale_int_at(object, paths.value("specReplicasPath", "")).value_or(0)}}},
          {"status", std::move(status)}};
}

}  // namespace

void ApiServer::serve_scale(const Request& request, ResponseWriter& response, const Route& route) {
  json paths;
  {
    std::lock_guard lock(mu_);
    const auto it = scale_paths_.find(route.info.group_resource() + "/" + route.info.version);
    if (it != scale_paths_.end())
      paths = it->second;
  }
  if (paths.is_null()) {
    respond_status(response, 404, "NotFound", "the server could not find the requested resource");
    return;
  }
  const std::string gr = route.info.group_resource();
  const std::string spec_path = paths.value("specReplicasPath", "");
  json object = store_.get(gr, route.ns, route.name);
  const bool replicas_set = scale_int_at(object, spec_path).has_value();
  if (request.method == "GET") {
    if (!replicas_set)
      throw ApiError(ErrorKind::ServerError, 500, "InternalError",
                     fmt::format("Internal error occurred: the spec replicas field {:?} does not "
                                 "exist",
                                 spec_path));
    respond_json(response, 200, scale_of(object, paths));
    return;
  }
  json scale;
  if (request.method == "PUT") {
    scale = parse_body(request);
  } else {
    const std::optional<PatchType> type = patch_type_for(request.header("content-type"));
    json current = scale_of(object, paths);
    if (!replicas_set)
      current["spec"]["replicas"] = nullptr;
    switch (type.value_or(PatchType::Apply)) {
      case PatchType::Json:
        scale = apply_json_patch(std::move(current), parse_body(request));
        break;
      case PatchType::Merge:
      case PatchType::StrategicMerge:  // Scale has no lists: strategic merge is a merge
        scale = apply_merge_patch(std::move(current), parse_body(request));
        break;
      case PatchType::Apply:
        throw unsupported_patch_type(route.info);
    }
  }
  const json& replicas = member(object_member(scale, "spec"), "replicas");
  if (replicas.is_null())
    throw bad_request(fmt::format("the spec replicas field {:?} cannot be empty", spec_path));
  if (!replicas.is_number_integer())
    throw bad_request("Scale.spec.replicas: expected an integer");
  if (replicas.get<std::int64_t>() < 0) {
    const std::string qualified = route.info.kind + "." + route.info.group;
    throw ApiError(
        ErrorKind::Invalid, 422, "Invalid",
        fmt::format("{} {:?} is invalid: {}: Invalid value: {}: should be a "
                    "non-negative integer",
                    qualified, route.name, spec_path, replicas.get<std::int64_t>()),
        {{"name", route.name},
         {"group", route.info.group},
         {"kind", route.info.kind},
         {"causes",
          {{{"reason", "FieldValueInvalid"},
            {"message", fmt::format("Invalid value: {}: should be a non-negative integer",
                                    replicas.get<std::int64_t>())},
            {"field", spec_path}}}}});
  }
  object[scale_pointer(spec_path)] = replicas;
  // A resourceVersion in the Scale is the client's precondition; without one the write is
  // against what was just read.
  const std::string precondition =
      object_member(scale, "metadata").value("resourceVersion", std::string());
  if (!precondition.empty())
    object["metadata"]["resourceVersion"] = precondition;
  const json updated = store_.update(gr, std::move(object), WritePart::Main, dry_run(request));
  respond_json(response, 200, scale_of(updated, paths));
}

void ApiServer::serve_binding(const Request& request, ResponseWriter& response,
                              const Route& route) {
  const json binding = parse_body(request);
  const std::string node = binding.value("target", json::object()).value("name", "");
  if (node.empty())
    fail(ErrorKind::Invalid, 422, "target.name: Required value");
  store_.modify("pods", route.ns, route.name, WritePart::Main, [&](json& pod) {
    const std::string current = pod["spec"].value("nodeName", "");
    if (!current.empty()) {
      fail(ErrorKind::Conflict, 409,
           fmt::format("Operation cannot be fulfilled on pods/binding {:?}: pod {} is already "
                       "assigned to node {:?}",
                       route.name, route.name, current));
    }
    pod["spec"]["nodeName"] = node;
  });
  json ok = success_status();
  ok["code"] = 201;
  respond_json(response, 201, ok);
}

// --- pods/log and pods/exec -------------------------------------------------------------------

namespace {

/// The container a log or exec request addresses: the named one, or the pod's only one.
std::string pick_container(const json& pod, const std::string& requested) {
  std::vector<std::string> names;
  for (const auto& c : pod["spec"].value("containers", json::array())) {
    names.push_back(c.value("name", ""));
  }
  const std::string pod_name = pod["metadata"]["name"];
  if (!requested.empty()) {
    bool known = std::find(names.begin(), names.end(), requested) != names.end();
    for (const auto& c : pod["spec"].value("initContainers", json::array())) {
      known = known || c.value("name", "") == requested;
    }
    if (!known) {
      fail(ErrorKind::BadRequest, 400,
           fmt::format("container {} is not valid for pod {}", requested, pod_name));
    }
    return requested;
  }
  if (names.size() == 1)
    return names[0];
  std::string list;
  for (const auto& n : names)
    list += (list.empty() ? "" : " ") + n;
  fail(ErrorKind::BadRequest, 400,
       fmt::format("a container name must be specified for pod {}, choose one of: [{}]", pod_name,
                   list));
}

std::optional<std::int64_t> int_param(const Request& request, const char* name) {
  const std::string v = request.param(name);
  if (v.empty())
    return std::nullopt;
  try {
    return std::stoll(v);
  } catch (const std::exception&) {
    fail(ErrorKind::BadRequest, 400, fmt::format("invalid {} {:?}", name, v));
  }
}

}  // namespace

void ApiServer::serve_logs(const Request& request, ResponseWriter& response, const Route& route) {
  const json pod = store_.get("pods", route.ns, route.name);
  const std::string container = pick_container(pod, request.param("container"));
  if (cluster_ == nullptr) {
    respond_status(response, 503, "ServiceUnavailable", "no kubelet serves this sandbox");
    return;
  }
  LogOptions options;
  options.previous = request.param("previous") == "true";
  options.timestamps = request.param("timestamps") == "true";
  options.tail_lines = int_param(request, "tailLines");
  if (auto since = int_param(request, "sinceSeconds")) {
    options.since_time = store_.now() - std::chrono::seconds(*since);
  }
  auto text = [](const LogChunk& chunk) {
    std::string out;
    for (const auto& line : chunk.lines)
      out += line + "\n";
    return out;
  };
  LogChunk chunk = cluster_->read_logs(route.ns, route.name, container, options);
  if (request.param("follow") != "true" || options.previous) {
    response.respond(200, "text/plain", text(chunk));
    return;
  }
  response.begin_stream(200, "text/plain");
  options.tail_lines.reset();  // the tail applies to what was there when the follow began
  options.since_time.reset();
  const std::stop_token stop = response.stop_token();
  while (true) {
    const std::string data = text(chunk);
    if (!data.empty() && !response.write_chunk(data))
      return;
    if (!chunk.running || stop.stop_requested() || !response.client_connected())
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    chunk = cluster_->read_logs(route.ns, route.name, container, options, chunk.next);
  }
  response.end_stream();
}

void ApiServer::serve_exec(const Request& request, ResponseWriter& response, const Route& route) {
  const json pod = store_.get("pods", route.ns, route.name);
  const std::string container = pick_container(pod, request.param("container"));
  std::vector<std::string> argv;
  for (auto [it, end] = request.params.equal_range("command"); it != end; ++it) {
    argv.push_back(it->second);
  }
  if (argv.empty())
    fail(ErrorKind::BadRequest, 400, "you must specify at least 1 command");
  if (to_lower(request.header("upgrade")) != "websocket") {
    fail(ErrorKind::BadRequest, 400,
         "Upgrade request required: this sandbox speaks pods/exec over WebSocket "
         "(v5.channel.k8s.io, v4.channel.k8s.io), not SPDY");
  }
  std::string protocol;
  for (std::string_view wanted : {kube::kExecProtocolV5, kube::kExecProtocolV4}) {
    for (const auto& offered : request.header_values("sec-websocket-protocol")) {
      std::istringstream in(offered);
      for (std::string p; std::getline(in, p, ',');) {
        if (trim(p) == wanted && protocol.empty())
          protocol = std::string(wanted);
      }
    }
  }
  if (protocol.empty()) {
    fail(ErrorKind::BadRequest, 400,
         "no supported subprotocol: offer v5.channel.k8s.io or v4.channel.k8s.io");
  }
  if (pod.value("status", json::object()).value("phase", "") != "Running") {
    fail(ErrorKind::BadRequest, 400,
         fmt::format("unable to upgrade connection: pod {} is not running", route.name));
  }
  if (cluster_ == nullptr) {
    respond_status(response, 503, "ServiceUnavailable", "no kubelet serves this sandbox");
    return;
  }
  auto stream =
      response.upgrade({{"Upgrade", "websocket"},
                        {"Connection", "Upgrade"},
                        {"Sec-WebSocket-Accept",
                         kube::ws::websocket_accept_key(request.header("sec-websocket-key"))},
                        {"Sec-WebSocket-Protocol", protocol}});
  const ExecResult result = cluster_->exec(route.ns, route.name, container, argv);
  json status = success_status();
  if (result.exit_code != 0) {
    std::string command;
    for (const auto& a : argv)
      command += (command.empty() ? "" : " ") + a;
    status = failure_status(
        500, "NonZeroExitCode",
        fmt::format("command terminated with non-zero exit code: error "
                    "executing command [{}], exit code {}",
                    command, result.exit_code),
        {{"causes", {{{"reason", "ExitCode"}, {"message", std::to_string(result.exit_code)}}}}});
    status.erase("code");
  }
  auto send = [&](kube::ExecChannel channel, std::string_view data) {
    stream->write_all(kube::ws::encode_frame(
        {true, kube::ws::Opcode::Binary, kube::encode_channel(channel, data)}, std::nullopt));
  };
  if (!result.stdout_text.empty())
    send(kube::ExecChannel::Stdout, result.stdout_text);
  if (!result.stderr_text.empty())
    send(kube::ExecChannel::Stderr, result.stderr_text);
  send(kube::ExecChannel::Error, status.dump());
  stream->write_all(kube::ws::encode_frame(
      {true, kube::ws::Opcode::Close, kube::ws::encode_close_payload(kube::ws::kCloseNormal, "")},
      std::nullopt));
  // Wait for the client's Close so the last frames are not cut off by a reset.
  kube::ws::FrameDecoder decoder({.expect_masked = true});
  char buf[4096];
  try {
    while (std::size_t n = stream->read_some(buf, sizeof buf)) {
      decoder.feed(std::string_view(buf, n));
      while (auto frame = decoder.next()) {
        if (frame->opcode == kube::ws::Opcode::Close)
          return;
      }
    }
  } catch (const Error&) {
    // The client went away first: nothing left to deliver.
  }
}

// --- CustomResourceDefinitions ---------------------------------------------------------------

void ApiServer::crd_created(const json& written) {
  // Serve what is stored now: a write may have changed the served versions or subresources, or
  // (its last finalizer removed) deleted the definition.
  const std::string crd_name = written["metadata"].value("name", "");
  json crd;
  try {
    crd = store_.get("customresourcedefinitions.apiextensions.k8s.io", "", crd_name);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::NotFound)
      throw;
    crd_deleted(written);
    return;
  }
  const json& spec = crd.value("spec", json::object());
  const std::string group = spec.value("group", "");
  const json& names = spec.value("names", json::object());
  const std::string plural = names.value("plural", "");
  ResourceInfo storage;
  std::vector<ResourceInfo> served;
  std::map<std::string, json> columns;
  std::map<std::string, json> scales;
  for (const auto& v : spec.value("versions", json::array())) {
    ResourceInfo info{group,
                      v.value("name", ""),
                      plural,
                      names.value("kind", ""),
                      spec.value("scope", "Namespaced") == "Namespaced",
                      v.value("subresources", json::object()).contains("status")};
    if (v.value("storage", false))
      storage = info;
    if (v.value("served", false))
      served.push_back(info);
    if (v.contains("additionalPrinterColumns"))
      columns[info.group_resource() + "/" + info.version] = v["additionalPrinterColumns"];
    const json& scale = v.value("subresources", json::object()).value("scale", json());
    if (scale.is_object())
      scales[info.group_resource() + "/" + info.version] = scale;
  }
  store_.register_resource(storage);  // keeps the objects; takes a new status subresource
  {
    std::lock_guard lock(mu_);
    for (auto it = served_.begin(); it != served_.end();) {
      const auto& [g, v, p] = it->first;
      it = (g == group && p == plural) ? served_.erase(it) : std::next(it);
    }
    for (const auto& info : served)
      served_[{info.group, info.version, info.plural}] = info;
    std::erase_if(printer_columns_, [&](const auto& entry) {
      return entry.first.starts_with(storage.group_resource() + "/");
    });
    printer_columns_.merge(columns);
    std::erase_if(scale_paths_, [&](const auto& entry) {
      return entry.first.starts_with(storage.group_resource() + "/");
    });
    scale_paths_.merge(scales);
    std::vector<std::string> shorts;
    for (const auto& s : names.value("shortNames", json::array()))
      shorts.push_back(s);
    short_names_[storage.group_resource()] = shorts;
  }
  const std::string now = rfc3339_now();
  store_.modify(
      "customresourcedefinitions.apiextensions.k8s.io", "", crd_name, WritePart::Status,
      [&](json& obj) {
        json accepted = names;
        if (!accepted.contains("singular"))
          accepted["singular"] = to_lower(accepted.value("kind", ""));
        if (!accepted.contains("listKind"))
          accepted["listKind"] = accepted.value("kind", "") + "List";
        json status = obj.value("status", json::object());
        json stored = status.value("storedVersions", json::array());
        if (std::find(stored.begin(), stored.end(), storage.version) == stored.end())
          stored.push_back(storage.version);
        // Conditions keep their lastTransitionTime once true, as the real controllers keep them.
        json conditions = status.value("conditions", json::array());
        auto set_true = [&](const char* type, const char* reason, const char* message) {
          for (const auto& c : conditions) {
            if (c.value("type", "") == type && c.value("status", "") == "True")
              return;
          }
          json others = json::array();
          for (const auto& c : conditions) {
            if (c.value("type", "") != type)
              others.push_back(c);
          }
          conditions = std::move(others);
          conditions.push_back({{"type", type},
                                {"status", "True"},
                                {"reason", reason},
                                {"message", message},
                                {"lastTransitionTime", now}});
        };
        set_true("NamesAccepted", "NoConflicts", "no conflicts found");
        set_true("Established", "InitialNamesAccepted", "the initial names have been accepted");
        obj["status"] = {
            {"acceptedNames", accepted}, {"storedVersions", stored}, {"conditions", conditions}};
      });
}

void ApiServer::crd_deleted(const json& crd) {
  const json& spec = crd.value("spec", json::object());
  const std::string group = spec.value("group", "");
  const std::string plural = spec.value("names", json::object()).value("plural", "");
  {
    std::lock_guard lock(mu_);
    for (auto it = served_.begin(); it != served_.end();) {
      const auto& [g, v, p] = it->first;
      it = (g == group && p == plural) ? served_.erase(it) : std::next(it);
    }
    short_names_.erase(plural + "." + group);
    for (auto* by_version : {&printer_columns_, &scale_paths_}) {
      std::erase_if(*by_version, [&](const auto& entry) {
        return entry.first.starts_with(plural + "." + group + "/");
      });
    }
  }
  store_.unregister_resource(plural + "." + group);
}

// --- Admission --------------------------------------------------------------------------------

namespace {

/// errors.NewInvalid for `obj` of one of the kinds admission checks.
[[noreturn]] void reject(const std::string& kind, const json& obj,
                         const std::vector<FieldError>& errs) {
  std::string group;
  if (kind == "CustomResourceDefinition")
    group = "apiextensions.k8s.io";
  else if (kind == "Job")
    group = "batch";
  throw invalid(group, kind, name_of(obj), errs);
}

/// The same for one field, the cause's reason read from how `what` starts.
[[noreturn]] void invalid(const std::string& kind, const json& obj, const std::string& field,
                          const std::string& what) {
  std::string cause = "FieldValueInvalid";
  if (what.starts_with("Required value"))
    cause = "FieldValueRequired";
  else if (what.starts_with("Unsupported value"))
    cause = "FieldValueNotSupported";
  reject(kind, obj, {{cause, field, what}});
}

/// SetDefaults_PodSpec and SetDefaults_Container with ValidatePodSpec's checks of them, for a
/// pod's spec and a pod template's alike; `path` is where `spec` is ("spec",
/// "spec.template.spec").
void default_pod_spec(json& spec, const std::string& path, std::vector<FieldError>& errs) {
  json& containers = spec["containers"];
  if (!containers.is_array() || containers.empty())
    errs.push_back(required_value(path + ".containers", ""));
  for (size_t i = 0; containers.is_array() && i < containers.size(); ++i) {
    json& c = containers[i];
    if (!c.is_object())
      c = json::object();
    const std::string name = c.value("name", "");
    const std::string field = fmt::format("{}.containers[{}]", path, i);
    if (name.empty()) {
      errs.push_back(required_value(field + ".name", ""));
    } else if (!is_dns1123_label(name)) {
      errs.push_back(invalid_value(field + ".name", validation::go_quote(name),
                                   "a lowercase RFC 1123 label must consist of lower case "
                                   "alphanumeric characters or '-'"));
    }
    const std::string image = c.value("image", "");
    if (image.empty())
      errs.push_back(required_value(field + ".image", ""));
    if (!c.contains("imagePullPolicy")) {
      const bool latest = image.find(':') == std::string::npos || image.ends_with(":latest");
      c["imagePullPolicy"] = latest ? "Always" : "IfNotPresent";
    }
    if (!c.contains("terminationMessagePath"))
      c["terminationMessagePath"] = "/dev/termination-log";
    if (!c.contains("terminationMessagePolicy"))
      c["terminationMessagePolicy"] = "File";
    if (!c.contains("resources"))
      c["resources"] = json::object();
  }
  const std::string restart = spec.value("restartPolicy", "Always");
  if (restart != "Always" && restart != "OnFailure" && restart != "Never") {
    errs.push_back(not_supported(path + ".restartPolicy", validation::go_quote(restart),
                                 {"Always", "OnFailure", "Never"}));
  }
  spec["restartPolicy"] = restart;
  if (!spec.contains("schedulerName"))
    spec["schedulerName"] = "default-scheduler";
  if (!spec.contains("dnsPolicy"))
    spec["dnsPolicy"] = "ClusterFirst";
  if (!spec.contains("terminationGracePeriodSeconds"))
    spec["terminationGracePeriodSeconds"] = 30;
  if (!spec.contains("securityContext"))
    spec["securityContext"] = json::object();
}

/// Whether `obj` has `key` set to something other than null.
bool has_field(const json& obj, const char* key) {
  return !member(obj, key).is_null();
}

/// A batch/v1 Job as v1.26's server admits it: SetDefaults_Job (pkg/apis/batch/v1/defaults.go),
/// the template's pod defaults, and ValidateJob's checks (pkg/apis/batch/validation) in its
/// order. What needs the uid (the selector and the template's controller-uid/job-name labels) is
/// the store's part of the create: see prepare_job_for_create in store.cc.
void admit_job(json& job) {
  json& spec = ensure_object(job, "spec");
  if (!has_field(spec, "completions") && !has_field(spec, "parallelism")) {
    spec["completions"] = 1;
    spec["parallelism"] = 1;
  }
  if (!has_field(spec, "parallelism"))
    spec["parallelism"] = 1;
  if (!has_field(spec, "backoffLimit"))
    spec["backoffLimit"] = 6;
  if (!has_field(spec, "completionMode"))
    spec["completionMode"] = "NonIndexed";
  if (!has_field(spec, "suspend"))
    spec["suspend"] = false;
  json& tmpl = ensure_object(spec, "template");
  json& tmpl_meta = ensure_object(tmpl, "metadata");
  if (!tmpl_meta.contains("creationTimestamp"))
    tmpl_meta["creationTimestamp"] = nullptr;  // a zero metav1.Time, as Go prints it
  json& pod_spec = ensure_object(tmpl, "spec");

  std::vector<FieldError> errs;
  for (const char* field : {"parallelism", "completions", "activeDeadlineSeconds", "backoffLimit",
                            "ttlSecondsAfterFinished"}) {
    const json& value = member(spec, field);
    if (value.is_number() && value.get<double>() < 0) {
      errs.push_back(invalid_value(fmt::format("spec.{}", field), value.dump(),
                                   "must be greater than or equal to 0"));
    }
  }
  const std::string mode = spec.value("completionMode", "");
  if (mode != "NonIndexed" && mode != "Indexed") {
    errs.push_back(not_supported("spec.completionMode", validation::go_quote(mode),
                                 {"NonIndexed", "Indexed"}));
  }
  if (mode == "Indexed" && !has_field(spec, "completions"))
    errs.push_back(required_value("spec.completions", "when completion mode is Indexed"));
  default_pod_spec(pod_spec, "spec.template.spec", errs);
  // The template's restartPolicy was defaulted to Always if missing, which a Job may not use.
  const std::string restart = pod_spec.value("restartPolicy", "");
  if (restart == "Always") {
    errs.push_back(required_value("spec.template.spec.restartPolicy",
                                  "valid values: \"OnFailure\", \"Never\""));
  } else if (restart != "OnFailure" && restart != "Never") {
    errs.push_back(not_supported("spec.template.spec.restartPolicy", validation::go_quote(restart),
                                 {"OnFailure", "Never"}));
  }
  if (member(spec, "manualSelector") == json(true) && !has_field(spec, "selector"))
    errs.push_back(required_value("spec.selector", ""));
  if (!errs.empty())
    reject("Job", job, errs);
}

}  // namespace

void admit_pod(json& pod) {
  json& spec = ensure_object(pod, "spec");
  std::vector<FieldError> errs;
  default_pod_spec(spec, "spec", errs);
  if (!errs.empty())
    reject("Pod", pod, errs);
  if (!spec.contains("serviceAccountName"))
    spec["serviceAccountName"] = "default";
  if (!spec.contains("enableServiceLinks"))
    spec["enableServiceLinks"] = true;
  if (!spec.contains("priority"))
    spec["priority"] = 0;
  json& status = pod["status"];
  if (!status.is_object() || !status.contains("phase"))
    status = {{"phase", "Pending"}};
  if (!status.contains("qosClass"))
    status["qosClass"] = "BestEffort";
}

void ApiServer::admit(const ResourceInfo& info, json& obj) const {
  const std::string gr = info.group_resource();
  if (gr == "pods") {
    admit_pod(obj);
  } else if (gr == "jobs.batch") {
    admit_job(obj);
  } else if (gr == "namespaces") {
    if (!is_dns1123_label(obj["metadata"].value("name", ""))) {
      const std::string name = obj["metadata"].value("name", "");
      invalid("Namespace", obj, "metadata.name",
              fmt::format("Invalid value: {:?}: a lowercase RFC 1123 label must consist of lower "
                          "case alphanumeric characters or '-', and must start and end with an "
                          "alphanumeric character",
                          name));
    }
    obj["spec"]["finalizers"] = json::array({"kubernetes"});
    obj["status"] = {{"phase", "Active"}};
  } else if (gr == "services") {
    json& spec = obj["spec"];
    if (!spec.is_object())
      spec = json::object();
    if (!spec.contains("type"))
      spec["type"] = "ClusterIP";
    json& ports = spec["ports"];
    if (!ports.is_array())
      ports = json::array();
    const bool headless = spec.value("clusterIP", "") == "None";
    if (ports.empty() && !headless)
      invalid("Service", obj, "spec.ports", "Required value");
    for (size_t i = 0; i < ports.size(); ++i) {
      json& p = ports[i];
      const int port = p.value("port", 0);
      if (port < 1 || port > 65535) {
        invalid("Service", obj, fmt::format("spec.ports[{}].port", i),
                fmt::format("Invalid value: {}: must be between 1 and 65535, inclusive", port));
      }
      if (!p.contains("protocol"))
        p["protocol"] = "TCP";
      if (!p.contains("targetPort"))
        p["targetPort"] = port;
    }
    if (!spec.contains("clusterIP")) {
      std::lock_guard lock(mu_);
      const std::uint32_t n = const_cast<ApiServer*>(this)->next_cluster_ip_++;
      spec["clusterIP"] = fmt::format("10.96.{}.{}", (n >> 8) & 0xFF, n & 0xFF);
    }
    spec["clusterIPs"] = json::array({spec["clusterIP"]});
    if (!spec.contains("sessionAffinity"))
      spec["sessionAffinity"] = "None";
    obj["status"] = {{"loadBalancer", json::object()}};
  } else if (gr == "customresourcedefinitions.apiextensions.k8s.io") {
    const json& spec = obj.value("spec", json::object());
    const std::string group = spec.value("group", "");
    const std::string plural = spec.value("names", json::object()).value("plural", "");
    const std::string expected = plural + "." + group;
    if (group.empty())
      invalid("CustomResourceDefinition", obj, "spec.group", "Required value");
    if (plural.empty()) {
      invalid("CustomResourceDefinition", obj, "spec.names.plural", "Required value");
    }
    if (spec.value("names", json::object()).value("kind", "").empty()) {
      invalid("CustomResourceDefinition", obj, "spec.names.kind", "Required value");
    }
    if (obj["metadata"].value("name", "") != expected) {
      invalid("CustomResourceDefinition", obj, "metadata.name",
              fmt::format("Invalid value: {:?}: must be spec.names.plural+\".\"+spec.group",
                          obj["metadata"].value("name", "")));
    }
    int storage = 0;
    bool any_served = false;
    for (const auto& v : spec.value("versions", json::array())) {
      storage += v.value("storage", false) ? 1 : 0;
      any_served = any_served || v.value("served", false);
    }
    if (storage != 1) {
      invalid("CustomResourceDefinition", obj, "spec.versions",
              "Invalid value: must have exactly one version marked as storage version");
    }
    if (!any_served) {
      invalid("CustomResourceDefinition", obj, "spec.versions",
              "Invalid value: must have at least one version marked as served");
    }
    const std::string scope = spec.value("scope", "");
    if (scope != "Namespaced" && scope != "Cluster") {
      invalid("CustomResourceDefinition", obj, "spec.scope",
              fmt::format("Unsupported value: {:?}: supported values: \"Cluster\", \"Namespaced\"",
                          scope));
    }
  }
}

}  // namespace trainctl::sandbox
