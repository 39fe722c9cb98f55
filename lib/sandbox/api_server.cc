// The API server: authentication, fault injection, routing a path to a served resource and its
// verb, errors as Status objects; the verbs themselves are in api_server_*.cc.

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
#include "sandbox/api_server_internal.h"
#include "sandbox/field_errors.h"
#include "sandbox/patch.h"
#include "sandbox/strategies/builtin.h"
#include "sandbox/table.h"
#include "text.h"
#include "yaml_json.h"

namespace trainctl::sandbox {

using nlohmann::json;

json failure_status(int code, std::string_view reason, std::string_view message, json details) {
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

void respond_json(ResponseWriter& w, int code, const json& body, const HeaderList& extra) {
  w.respond(code, kJson, body.dump(), extra);
}

void respond_status(ResponseWriter& w, int code, std::string_view reason, std::string_view message,
                    json details) {
  respond_json(w, code, failure_status(code, reason, message, std::move(details)));
}

void respond_internal_error(ResponseWriter& w, std::string_view what) {
  respond_status(w, 500, "InternalError", fmt::format("Internal error occurred: {}", what),
                 {{"causes", json::array({{{"message", what}}})}});
}

[[noreturn]] void fail(ErrorKind kind, int code, std::string message) {
  throw Error(kind, std::move(message), code);
}

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

const std::vector<ResourceInfo>& builtin_resources() {
  static const std::vector<ResourceInfo> infos = [] {
    std::vector<ResourceInfo> v;
    for (const auto& strategy : builtin_strategies())
      v.push_back(strategy->info());
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
    create_default_service_account(store, ns);
  }
  for (const SystemPriorityClass& known : system_priority_classes()) {
    try {
      store.create("priorityclasses.scheduling.k8s.io",
                   {{"apiVersion", "scheduling.k8s.io/v1"},
                    {"kind", "PriorityClass"},
                    {"metadata", {{"name", known.name}}},
                    {"value", known.value},
                    {"description", known.description},
                    {"preemptionPolicy", "PreemptLowerPriority"}});
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::AlreadyExists)
        throw;
    }
  }
}

void publish_kubernetes_service(Store& store, int port) {
  const json service = {
      {"apiVersion", "v1"},
      {"kind", "Service"},
      {"metadata",
       {{"name", "kubernetes"},
        {"namespace", "default"},
        {"labels", {{"component", "apiserver"}, {"provider", "kubernetes"}}}}},
      // Written whole, defaults included: the store does not admit (the API's create path does).
      {"spec",
       {{"clusterIP", "10.96.0.1"},
        {"clusterIPs", {"10.96.0.1"}},
        {"internalTrafficPolicy", "Cluster"},
        {"ipFamilies", {"IPv4"}},
        {"ipFamilyPolicy", "SingleStack"},
        {"ports", {{{"name", "https"}, {"port", 443}, {"protocol", "TCP"}, {"targetPort", port}}}},
        {"sessionAffinity", "None"},
        {"type", "ClusterIP"}}},
      {"status", {{"loadBalancer", json::object()}}}};
  try {
    store.create("services", service);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::AlreadyExists)
      throw;
    store.modify("services", "default", "kubernetes", WritePart::Main,
                 [&](json& existing) { existing["spec"]["ports"] = service["spec"]["ports"]; });
  }
}

namespace {

/// The fault `key` of `doc` as a whole number from 0 to `most` (0 when absent); anything else is
/// a 400 naming the field.
std::int64_t whole_number(const json& doc, std::string_view key, std::int64_t most) {
  const auto it = doc.find(key);
  if (it == doc.end())
    return 0;
  if (!it->is_number_integer() || it->get<std::int64_t>() < 0 || it->get<std::int64_t>() > most) {
    fail(ErrorKind::BadRequest, 400,
         fmt::format("{}: must be a whole number from 0 to {}, not {}", key, most, it->dump()));
  }
  return it->get<std::int64_t>();
}

}  // namespace

json Faults::to_json() const {
  return {{"latencyMilliseconds", latency.count()},
          {"errorRate", error_rate},
          {"throttleRate", throttle_rate},
          {"dropWatchesAfterSeconds", drop_watches_after.count()},
          {"goneOnWatchResume", gone_on_watch_resume},
          {"conflictOnUpdate", conflict_on_update},
          {"forbidExec", forbid_exec},
          {"watchDelayMilliseconds", watch_delay.count()}};
}

Faults Faults::from_json(const json& doc) {
  if (!doc.is_object())
    fail(ErrorKind::BadRequest, 400, "faults must be a JSON object");
  static const std::set<std::string> known = {
      "latencyMilliseconds", "errorRate",        "throttleRate", "dropWatchesAfterSeconds",
      "goneOnWatchResume",   "conflictOnUpdate", "forbidExec",   "watchDelayMilliseconds"};
  for (const auto& [key, value] : doc.items()) {
    if (!known.count(key))
      fail(ErrorKind::BadRequest, 400, fmt::format("unknown fault {:?}", key));
  }
  try {
    Faults f;
    f.latency = std::chrono::milliseconds(whole_number(doc, "latencyMilliseconds", 600'000));
    f.error_rate = doc.value("errorRate", 0.0);
    f.throttle_rate = doc.value("throttleRate", 0.0);
    f.drop_watches_after =
        std::chrono::seconds(whole_number(doc, "dropWatchesAfterSeconds", 86'400));
    f.gone_on_watch_resume = doc.value("goneOnWatchResume", false);
    f.conflict_on_update = doc.value("conflictOnUpdate", false);
    f.forbid_exec = doc.value("forbidExec", false);
    f.watch_delay = std::chrono::milliseconds(whole_number(doc, "watchDelayMilliseconds", 600'000));
    if (f.error_rate < 0 || f.error_rate > 1 || f.throttle_rate < 0 || f.throttle_rate > 1) {
      fail(ErrorKind::BadRequest, 400, "errorRate and throttleRate are fractions in [0, 1]");
    }
    return f;
  } catch (const json::exception& e) {
    fail(ErrorKind::BadRequest, 400, fmt::format("faults: {}", e.what()));
  }
}

ApiServer::ApiServer(Store& store, ApiServerOptions options)
    : store_(store), options_(std::move(options)), served_(store) {}

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

namespace {

/// The RBAC verb of a request, as kube-apiserver's RequestInfoFactory names it.
std::string rbac_verb(const Request& request, bool named) {
  const std::string& m = request.method;
  if (m == "GET" || m == "HEAD") {
    const std::string watch = request.param("watch");
    if (named)
      return "get";
    return watch == "true" || watch == "1" ? "watch" : "list";
  }
  if (m == "POST")
    return "create";
  if (m == "PUT")
    return "update";
  if (m == "PATCH")
    return "patch";
  if (m == "DELETE")
    return named ? "delete" : "deletecollection";
  return m;
}

}  // namespace

void ApiServer::serve(const Request& request, ResponseWriter& response, const UserInfo& user) {
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
  if (options_.audit) {
    options_.audit({.user = user.name,
                    .groups = user.groups,
                    .verb = rbac_verb(request, !r->name.empty()),
                    .api_group = r->group,
                    .resource = r->info.plural,
                    .subresource = r->subresource,
                    .ns = r->ns,
                    .name = r->name});
  }
  r->user = user;
  serve_resource(request, response, *r);
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
  std::optional<ServedResource> served = served_.find(r.group, r.version, rest[0]);
  if (!served)
    return std::nullopt;
  r.info = std::move(served->info);
  r.strategy = std::move(served->strategy);
  if (!r.info.namespaced && !r.ns.empty())
    return std::nullopt;
  if (rest.size() > 1)
    r.name = rest[1];
  if (rest.size() > 2)
    r.subresource = rest[2];
  return r;
}

void ApiServer::serve_resource(const Request& request, ResponseWriter& response, Route& route) {
  const std::string& m = request.method;
  auto not_allowed = [&] {
    respond_status(response, 405, "MethodNotAllowed",
                   "the server does not allow this method on the requested resource");
  };
  const std::string gr = route.info.group_resource();
  auto allowed = [&](const std::vector<std::string>& verbs) {
    for (const auto& verb : verbs) {
      if ((verb == "get" && m == "GET") || (verb == "create" && m == "POST") ||
          (verb == "update" && m == "PUT") || (verb == "patch" && m == "PATCH"))
        return true;
    }
    return false;
  };
  if (!route.strategy->stored()) {
    if (!route.name.empty() || !route.subresource.empty())
      return respond_status(response, 404, "NotFound",
                            "the server could not find the requested resource");
    if (m != "POST")
      return not_allowed();
    json review = received_object(request, route);
    review = route.strategy->answer(std::move(review), route.user, route.ns);
    json& meta = review["metadata"];
    if (!meta.is_object())
      meta = json::object();
    meta["creationTimestamp"] = nullptr;  // never stored
    respond_json(response, 201, review);
    return;
  }
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
      respond_objects(request, response, route,
                      route.present(store_.get(gr, route.ns, route.name)));
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
  if (route.subresource == "scale") {
    if (!allowed({"get", "patch", "update"}))
      return not_allowed();
    serve_scale(request, response, route);
    return;
  }
  using Handler = void (ApiServer::*)(const Request&, ResponseWriter&, const Route&);
  static const std::map<std::string, Handler> kHandlers = {{"log", &ApiServer::serve_logs},
                                                           {"exec", &ApiServer::serve_exec},
                                                           {"binding", &ApiServer::serve_binding}};
  for (const auto& sub : route.strategy->subresources()) {
    const auto handler = kHandlers.find(sub.name);
    if (sub.name != route.subresource || handler == kHandlers.end())
      continue;
    if (!allowed(sub.verbs))
      return not_allowed();
    (this->*handler->second)(request, response, route);
    return;
  }
  respond_status(response, 404, "NotFound", "the server could not find the requested resource");
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
  json table = to_table(route.strategy->columns(route.version), objects,
                        include.empty() ? "Metadata" : include, store_.now());
  if (list)
    table["metadata"] = body["metadata"];
  respond_json(response, 200, table);
}

AdmissionContext ApiServer::admission_context() {
  return {.allocate_cluster_ip =
              [this] {
                std::lock_guard lock(mu_);
                const std::uint32_t n = next_cluster_ip_++;
                return fmt::format("10.96.{}.{}", (n >> 8) & 0xFF, n & 0xFF);
              },
          .store = &store_};
}

}  // namespace trainctl::sandbox
