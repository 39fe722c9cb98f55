// Discovery: /version, /openapi/v2, /api, /apis and each group version's resource list.

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
#include "sandbox/api_server.h"
#include "sandbox/api_server_internal.h"
#include "sandbox/field_errors.h"
#include "sandbox/patch.h"
#include "sandbox/table.h"
#include "text.h"
#include "yaml_json.h"

namespace trainctl::sandbox {

using nlohmann::json;

namespace {

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

}  // namespace

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
    respond_json(response, 200, served_.group_list());
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
    const json groups = served_.group_list();
    for (const auto& g : groups["groups"]) {
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
  json list = served_.resource_list(group, version);
  if (list.is_null()) {
    respond_status(response, 404, "NotFound", "the server could not find the requested resource");
  } else {
    respond_json(response, 200, list);
  }
  return true;
}

}  // namespace trainctl::sandbox
