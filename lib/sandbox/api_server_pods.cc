// The pods subresources that reach the kubelets: binding, log and exec.

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

void ApiServer::serve_binding(const Request& request, ResponseWriter& response,
                              const Route& route) {
  const json binding = parse_body(request);
  const std::string node = binding.value("target", json::object()).value("name", "");
  if (node.empty())
    fail(ErrorKind::Invalid, 422, "target.name: Required value");
  store_.modify(route.info.group_resource(), route.ns, route.name, WritePart::Main, [&](json& pod) {
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

void ApiServer::serve_logs(const Request& request, ResponseWriter& response, const Route& route) {
  const json pod = store_.get(route.info.group_resource(), route.ns, route.name);
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
  if (faults().forbid_exec) {
    // What RBAC answers a caller without `create` on pods/exec, before anything is looked up.
    fail(ErrorKind::Forbidden, 403,
         fmt::format("pods {:?} is forbidden: User {:?} cannot create resource \"pods/exec\" in "
                     "API group \"\" in the namespace {:?} (injected fault)",
                     route.name, route.user.name, route.ns));
  }
  const json pod = store_.get(route.info.group_resource(), route.ns, route.name);
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
  if (!result.failure.empty()) {
    // The kubelet's stream reports a runtime error as errors.NewInternalError.
    const std::string message = "error executing command in container: " + result.failure;
    status = failure_status(500, "InternalError", "Internal error occurred: " + message,
                            {{"causes", {{{"message", message}}}}});
  } else if (result.exit_code != 0) {
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

}  // namespace trainctl::sandbox
