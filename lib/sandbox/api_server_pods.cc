// The pods subresources that reach the kubelets: binding, log and exec.

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <chrono>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "api/status.h"
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

/// An integer query parameter as Go's strconv.ParseInt reads it: the whole text, or a 400 in its
/// words.
std::optional<std::int64_t> int_param(const Request& request, const char* name) {
  const std::string v = request.param(name);
  if (v.empty())
    return std::nullopt;
  std::int64_t value = 0;
  const char* begin = v.data() + (v[0] == '+' ? 1 : 0);
  const auto [end, error] = std::from_chars(begin, v.data() + v.size(), value);
  if (error == std::errc::result_out_of_range)
    fail(ErrorKind::BadRequest, 400,
         fmt::format("strconv.ParseInt: parsing {:?}: value out of range", v));
  if (error != std::errc() || end != v.data() + v.size())
    fail(ErrorKind::BadRequest, 400,
         fmt::format("strconv.ParseInt: parsing {:?}: invalid syntax", v));
  return value;
}

/// sinceTime as Go's time.Parse reads RFC 3339: the time, or a 400 naming where it stopped
/// matching the layout, in Go's words.
TimePoint time_param(const std::string& text) {
  constexpr std::string_view kLayout = "2006-01-02T15:04:05Z07:00";
  // The layout's elements in order: digits (with their range) or literal text.
  struct Element {
    std::string_view layout;
    int digits;  // 0: literal
    int low, high;
    const char* range_name;
  };
  static constexpr Element kElements[] = {
      {"2006", 4, 0, 9999, "year"}, {"-", 0, 0, 0, ""},        {"01", 2, 1, 12, "month"},
      {"-", 0, 0, 0, ""},           {"02", 2, 1, 31, "day"},   {"T", 0, 0, 0, ""},
      {"15", 2, 0, 23, "hour"},     {":", 0, 0, 0, ""},        {"04", 2, 0, 59, "minute"},
      {":", 0, 0, 0, ""},           {"05", 2, 0, 59, "second"}};
  const auto fail_at = [&](std::size_t at, std::string_view element) {
    fail(ErrorKind::BadRequest, 400,
         fmt::format("parsing time {:?} as {:?}: cannot parse {:?} as {:?}", text, kLayout,
                     text.substr(at), element));
  };
  std::size_t at = 0;
  int fields[3] = {};  // year, month, day
  int field = 0;
  for (const Element& e : kElements) {
    if (e.digits == 0) {
      if (text.compare(at, e.layout.size(), e.layout) != 0)
        fail_at(at, e.layout);
      at += e.layout.size();
      continue;
    }
    int value = 0;
    for (int i = 0; i < e.digits; ++i) {
      if (at + i >= text.size() || !std::isdigit(static_cast<unsigned char>(text[at + i])))
        fail_at(at, e.layout);
      value = value * 10 + (text[at + i] - '0');
    }
    if (value < e.low || value > e.high)
      fail(ErrorKind::BadRequest, 400,
           fmt::format("parsing time {:?}: {} out of range", text, e.range_name));
    if (field < 3)
      fields[field++] = value;
    at += e.digits;
  }
  const std::chrono::year_month_day date{std::chrono::year(fields[0]),
                                         std::chrono::month(static_cast<unsigned>(fields[1])),
                                         std::chrono::day(static_cast<unsigned>(fields[2]))};
  if (!date.ok())  // 31 in a month of 30 days, 29 February outside a leap year
    fail(ErrorKind::BadRequest, 400, fmt::format("parsing time {:?}: day out of range", text));
  if (at < text.size() && text[at] == '.') {  // a fraction of a second
    ++at;
    while (at < text.size() && std::isdigit(static_cast<unsigned char>(text[at])))
      ++at;
  }
  if (at < text.size() && text[at] == 'Z') {
    ++at;
  } else {
    const bool offset = at + 6 <= text.size() && (text[at] == '+' || text[at] == '-') &&
                        std::isdigit(static_cast<unsigned char>(text[at + 1])) &&
                        std::isdigit(static_cast<unsigned char>(text[at + 2])) &&
                        text[at + 3] == ':' &&
                        std::isdigit(static_cast<unsigned char>(text[at + 4])) &&
                        std::isdigit(static_cast<unsigned char>(text[at + 5]));
    if (!offset)
      fail_at(at, "Z07:00");
    at += 6;
  }
  if (at != text.size())
    fail(ErrorKind::BadRequest, 400,
         fmt::format("parsing time {:?}: extra text: {:?}", text, text.substr(at)));
  return api::parse_timestamp(text).value();  // it reads every text the walk above lets through
}

/// The PodLogOptions of a log request, decoded and validated as kube-apiserver does before it
/// looks the pod up (ValidatePodLogOptions): 400 for what does not parse, 422 for the rest.
struct PodLogRequest {
  bool follow = false;
  LogOptions options;  // since_time: sinceTime's (sinceSeconds is the caller's to turn into one)
  std::optional<std::int64_t> limit_bytes;
  std::optional<std::int64_t> since_seconds;

  PodLogRequest(const Request& request, const std::string& pod_name) {
    follow = request.param("follow") == "true";
    options.previous = request.param("previous") == "true";
    options.timestamps = request.param("timestamps") == "true";
    options.tail_lines = int_param(request, "tailLines");
    limit_bytes = int_param(request, "limitBytes");
    since_seconds = int_param(request, "sinceSeconds");
    const std::string since_time = request.param("sinceTime");
    std::optional<TimePoint> since;
    if (!since_time.empty())
      since = time_param(since_time);
    std::vector<FieldError> errs;
    if (options.tail_lines && *options.tail_lines < 0)
      errs.push_back(invalid_value("tailLines", std::to_string(*options.tail_lines),
                                   "must be greater than or equal to 0"));
    if (limit_bytes && *limit_bytes < 1)
      errs.push_back(
          invalid_value("limitBytes", std::to_string(*limit_bytes), "must be greater than 0"));
    if (since_seconds && *since_seconds < 1)
      errs.push_back(
          invalid_value("sinceSeconds", std::to_string(*since_seconds), "must be greater than 0"));
    if (since_seconds && since)
      errs.push_back(
          forbidden_value("[]", "at most one of `sinceTime` or `sinceSeconds` may be specified"));
    if (!errs.empty())
      throw invalid("", "PodLogOptions", pod_name, errs);
    options.since_time = since;
  }
};

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
  PodLogRequest log(request, route.name);
  const json pod = store_.get(route.info.group_resource(), route.ns, route.name);
  const std::string container = pick_container(pod, request.param("container"));
  if (cluster_ == nullptr) {
    respond_status(response, 503, "ServiceUnavailable", "no kubelet serves this sandbox");
    return;
  }
  LogOptions& options = log.options;
  if (log.since_seconds)
    options.since_time = store_.now() - std::chrono::seconds(*log.since_seconds);
  // limitBytes: the kubelet stops after that many bytes, in the middle of a line if it must.
  std::optional<std::int64_t> left = log.limit_bytes;
  auto text = [&left](const LogChunk& chunk) {
    std::string out;
    for (const auto& line : chunk.lines)
      out += line + "\n";
    if (left) {
      if (static_cast<std::int64_t>(out.size()) > *left)
        out.resize(static_cast<std::size_t>(*left));
      *left -= static_cast<std::int64_t>(out.size());
    }
    return out;
  };
  LogChunk chunk = cluster_->read_logs(route.ns, route.name, container, options);
  if (!log.follow || options.previous) {
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
    if (!chunk.running || (left && *left == 0) || stop.stop_requested() ||
        !response.client_connected())
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
