#include "kube/client.h"

#include <fmt/format.h>

#include <algorithm>
#include <exception>
#include <iostream>
#include <random>

#include "error.h"
#include "json_access.h"
#include "json_parse.h"
#include "kube/exec_protocol.h"
#include "kube/websocket.h"

namespace trainctl::kube {

using nlohmann::json;

bool is_too_large_resource_version(const Error& error) {
  return error.kind() == ErrorKind::Timeout && error.has_status_cause("ResourceVersionTooLarge");
}

std::string_view content_type(PatchType type) {
  switch (type) {
    case PatchType::Merge:
      return "application/merge-patch+json";
    case PatchType::Json:
      return "application/json-patch+json";
    case PatchType::Strategic:
      return "application/strategic-merge-patch+json";
    case PatchType::Apply:
      return "application/apply-patch+yaml";
  }
  return "application/json";
}

namespace {

std::optional<std::chrono::seconds> parse_retry_after(const HttpResponse& response) {
  const std::string value = response.header("retry-after");
  if (value.empty())
    return std::nullopt;
  try {
    return std::chrono::seconds(std::stoll(value));
  } catch (const std::exception&) {
    return std::nullopt;  // an HTTP-date: fall back to our own backoff
  }
}

Error error_for(const HttpResponse& response) {
  return Error::from_response(response.status, response.body, parse_retry_after(response));
}

bool is_success(int status) {
  return status >= 200 && status < 300;
}

/// The namespace to address: the caller's, else the object's own.
std::string target_namespace(std::string_view ns, const json& object) {
  if (!ns.empty())
    return std::string(ns);
  const auto& meta = object.value("metadata", json::object());
  return meta.value("namespace", "");
}

std::string required_name_of(const json& object) {
  const auto& meta = object.value("metadata", json::object());
  std::string name = meta.value("name", "");
  if (name.empty())
    throw Error(ErrorKind::Usage, "the object has no metadata.name");
  return name;
}

/// A request whose body is `body`, JSON text of Content-Type `type`.
HttpRequest text_request(std::string method, std::string path, std::string body,
                         std::string_view type) {
  HttpRequest request;
  request.method = std::move(method);
  request.path = std::move(path);
  request.body = std::move(body);
  request.headers.emplace_back("Content-Type", std::string(type));
  return request;
}

HttpRequest json_request(std::string method, std::string path, const json* body,
                         std::string_view type = "application/json") {
  if (body != nullptr)
    return text_request(std::move(method), std::move(path), body->dump(), type);
  HttpRequest request;
  request.method = std::move(method);
  request.path = std::move(path);
  return request;
}

int random_watch_timeout() {
  thread_local std::mt19937 rng{std::random_device{}()};
  return std::uniform_int_distribution<int>(300, 599)(rng);
}

}  // namespace

Client::Client(RestConfig config, Clock& clock)
    : config_(std::move(config)),
      clock_(clock),
      credentials_(make_credential_source(config_.auth, config_.server, config_.tls, clock)),
      limiter_(config_.qps, config_.burst, clock),
      transport_(config_) {}

Client::~Client() = default;

HttpResponse Client::round_trip(HttpRequest request, bool idempotent) {
  bool refreshed_credentials = false;
  for (int attempt = 0;; ++attempt) {
    limiter_.acquire();
    const RequestCredentials creds = credentials_->current();
    ++requests_sent_;
    HttpResponse response;
    try {
      response = transport_.send(request, creds);
    } catch (const Error& e) {
      const bool transient = e.kind() == ErrorKind::Connection || e.kind() == ErrorKind::Timeout;
      if (!transient || !idempotent || attempt >= retry_.max_retries)
        throw;
      clock_.sleep_for(backoff_delay(attempt, retry_.base, retry_.cap));
      continue;
    }
    if (response.status == 401 && !refreshed_credentials &&
        credentials_->refresh_after_unauthorized(creds)) {
      refreshed_credentials = true;
      --attempt;  // a credential refresh is not a retry of a failing server
      continue;
    }
    const bool throttled = response.status == 429;
    const bool server_error =
        response.status >= 500 && idempotent &&
        !(response.status == 504 &&
          is_too_large_resource_version(Error::from_response(response.status, response.body)));
    if ((throttled || server_error) && attempt < retry_.max_retries) {
      auto delay = backoff_delay(attempt, retry_.base, retry_.cap);
      if (auto after = parse_retry_after(response)) {
        delay = std::chrono::duration_cast<std::chrono::milliseconds>(
            std::min(*after, retry_.max_retry_after));
      }
      clock_.sleep_for(delay);
      continue;
    }
    if (config_.on_warning) {
      for (const std::string& text : warning_texts(response.header("warning")))
        config_.on_warning(text);
    }
    return response;
  }
}

json Client::json_call(HttpRequest request, bool idempotent, bool decode) {
  const std::string method = request.method;
  const std::string path = request.path;
  HttpResponse response = round_trip(std::move(request), idempotent);
  if (!is_success(response.status))
    throw error_for(response);
  if (!decode)
    return json::object();
  json doc = parse_json(response.body, /*allow_exceptions=*/false);
  if (doc.is_discarded()) {
    throw Error(ErrorKind::Protocol,
                fmt::format("{} {}: the server's response is not valid JSON", method, path));
  }
  return doc;
}

json Client::get(const Resource& r, std::string_view ns, std::string_view name,
                 std::string_view subresource) {
  return json_call(json_request("GET", resource_path(r, ns, name, subresource), nullptr), true);
}

json Client::list(const Resource& r, std::string_view ns, const ListOptions& options) {
  Query q;
  q.add_if(!options.label_selector.empty(), "labelSelector", options.label_selector)
      .add_if(!options.field_selector.empty(), "fieldSelector", options.field_selector)
      .add_if(options.limit > 0, "limit", std::to_string(options.limit))
      .add_if(!options.continue_token.empty(), "continue", options.continue_token)
      .add_if(!options.resource_version.empty(), "resourceVersion", options.resource_version);
  return json_call(json_request("GET", resource_path(r, ns) + q.encode(), nullptr), true);
}

json Client::list_all(const Resource& r, std::string_view ns, ListOptions options) {
  json result;
  json items = json::array();
  do {
    json page = list(r, ns, options);
    for (auto& item : page["items"])
      items.push_back(std::move(item));
    options.continue_token = page["metadata"].value("continue", "");
    // Later pages must not pin a resourceVersion: the continue token carries it.
    options.resource_version.clear();
    result = std::move(page);
  } while (!options.continue_token.empty());
  result["items"] = std::move(items);
  result["metadata"].erase("continue");
  return result;
}

json Client::create(const Resource& r, std::string_view ns, const json& object,
                    const WriteOptions& options) {
  Query q;
  q.add_if(options.dry_run, "dryRun", "All")
      .add_if(!options.field_manager.empty(), "fieldManager", options.field_manager);
  return json_call(
      json_request("POST", resource_path(r, target_namespace(ns, object)) + q.encode(), &object),
      false, options.decode_answer);
}

json Client::update(const Resource& r, std::string_view ns, const json& object,
                    const WriteOptions& options) {
  Query q;
  q.add_if(options.dry_run, "dryRun", "All")
      .add_if(!options.field_manager.empty(), "fieldManager", options.field_manager);
  const std::string path = resource_path(r, target_namespace(ns, object), required_name_of(object));
  return json_call(json_request("PUT", path + q.encode(), &object), false, options.decode_answer);
}

json Client::update_status(const Resource& r, std::string_view ns, const json& object,
                           const WriteOptions& options) {
  Query q;
  q.add_if(options.dry_run, "dryRun", "All")
      .add_if(!options.field_manager.empty(), "fieldManager", options.field_manager);
  const std::string path =
      resource_path(r, target_namespace(ns, object), required_name_of(object), "status");
  return json_call(json_request("PUT", path + q.encode(), &object), false, options.decode_answer);
}

json Client::patch(const Resource& r, std::string_view ns, std::string_view name, PatchType type,
                   const json& patch, const PatchOptions& options) {
  return patch_text(r, ns, name, type, patch.dump(), options);
}

json Client::patch_text(const Resource& r, std::string_view ns, std::string_view name,
                        PatchType type, std::string patch, const PatchOptions& options) {
  if (type == PatchType::Apply && options.field_manager.empty()) {
    throw Error(ErrorKind::Usage, "server-side apply needs a field manager");
  }
  Query q;
  q.add_if(options.dry_run, "dryRun", "All")
      .add_if(!options.field_manager.empty(), "fieldManager", options.field_manager)
      .add_if(options.force && type == PatchType::Apply, "force", "true");
  const std::string path = resource_path(r, ns, name, options.subresource) + q.encode();
  return json_call(text_request("PATCH", path, std::move(patch), content_type(type)), false);
}

json Client::remove(const Resource& r, std::string_view ns, std::string_view name,
                    const DeleteOptions& options) {
  json body = {{"kind", "DeleteOptions"}, {"apiVersion", "v1"}};
  if (!options.propagation_policy.empty())
    body["propagationPolicy"] = options.propagation_policy;
  if (options.precondition_uid)
    body["preconditions"]["uid"] = *options.precondition_uid;
  if (options.precondition_resource_version) {
    body["preconditions"]["resourceVersion"] = *options.precondition_resource_version;
  }
  if (options.grace_period_seconds)
    body["gracePeriodSeconds"] = *options.grace_period_seconds;
  if (options.dry_run)
    body["dryRun"] = json::array({"All"});
  Query q;
  q.add_if(options.dry_run, "dryRun", "All");
  const bool has_options = body.size() > 2;
  return json_call(json_request("DELETE", resource_path(r, ns, name) + q.encode(),
                                has_options ? &body : nullptr),
                   false);
}

HttpResponse Client::stream_call(HttpRequest request, const BodySink& sink, std::stop_token stop) {
  for (bool refreshed = false;;) {
    limiter_.acquire();
    const RequestCredentials creds = credentials_->current();
    ++requests_sent_;
    HttpResponse head = transport_.stream(request, creds, sink, stop);
    if (head.status == 401 && !refreshed && credentials_->refresh_after_unauthorized(creds)) {
      refreshed = true;
      continue;
    }
    if (!is_success(head.status))
      throw error_for(head);
    return head;
  }
}

WatchResult Client::watch(const Resource& r, std::string_view ns, const WatchOptions& options,
                          const WatchHandler& handler, std::stop_token stop) {
  const int timeout =
      options.timeout_seconds > 0 ? options.timeout_seconds : random_watch_timeout();
  Query q;
  q.add("watch", "true")
      .add_if(!options.resource_version.empty(), "resourceVersion", options.resource_version)
      .add_if(options.allow_bookmarks, "allowWatchBookmarks", "true")
      .add("timeoutSeconds", std::to_string(timeout))
      .add_if(!options.label_selector.empty(), "labelSelector", options.label_selector)
      .add_if(!options.field_selector.empty(), "fieldSelector", options.field_selector);
  HttpRequest request = json_request("GET", resource_path(r, ns) + q.encode(), nullptr);
  // The server ends the stream after timeoutSeconds; allow it a margin before giving up.
  request.timeout = std::chrono::seconds(timeout + 30);

  WatchResult result{options.resource_version, 0};
  WatchDecoder decoder;
  std::exception_ptr failure;
  BodySink sink = [&](std::string_view chunk) {
    try {
      decoder.feed(chunk);
      while (auto event = decoder.next()) {
        if (event->type == WatchEventType::Error) {
          const int code = event->object.value("code", 500);
          throw Error::from_response(code, event->object.dump());
        }
        if (const json& rv = member(object_member(event->object, "metadata"), "resourceVersion");
            rv.is_string()) {
          result.resource_version = rv.get<std::string>();
        }
        ++result.events;
        if (!handler(*event))
          return false;
      }
      return true;
    } catch (...) {
      failure = std::current_exception();  // never unwind through libcurl's C frames
      return false;
    }
  };
  stream_call(std::move(request), sink, std::move(stop));
  if (failure)
    std::rethrow_exception(failure);
  return result;
}

void Client::stream_logs(std::string_view ns, std::string_view pod, const LogOptions& options,
                         const BodySink& sink, std::stop_token stop) {
  Query q;
  q.add_if(!options.container.empty(), "container", options.container)
      .add_if(options.follow, "follow", "true")
      .add_if(options.tail_lines.has_value(), "tailLines",
              std::to_string(options.tail_lines.value_or(0)))
      .add_if(options.since_seconds.has_value(), "sinceSeconds",
              std::to_string(options.since_seconds.value_or(0)))
      .add_if(options.timestamps, "timestamps", "true")
      .add_if(options.previous, "previous", "true");
  HttpRequest request =
      json_request("GET", resource_path(resources::pods(), ns, pod, "log") + q.encode(), nullptr);
  request.headers.emplace_back("Accept", "*/*");
  if (options.follow)
    request.timeout = std::chrono::hours(24 * 365);
  std::exception_ptr failure;
  BodySink guarded = [&](std::string_view chunk) {
    try {
      return sink(chunk);
    } catch (...) {
      failure = std::current_exception();
      return false;
    }
  };
  stream_call(std::move(request), guarded, std::move(stop));
  if (failure)
    std::rethrow_exception(failure);
}

ExecOutcome Client::exec(std::string_view ns, std::string_view pod, const ExecOptions& options) {
  if (options.command.empty())
    throw Error(ErrorKind::Usage, "exec needs a command");
  const std::string path = transport_.path_prefix() +
                           resource_path(resources::pods(), ns, pod, "exec") + "?" +
                           exec_query(options.command, options.container,
                                      !options.stdin_data.empty(), true, true, false);
  for (bool refreshed = false;;) {
    limiter_.acquire();
    const RequestCredentials creds = credentials_->current();
    ++requests_sent_;
    std::string host;
    auto stream = transport_.connect_raw(creds, host, config_.timeout);
    std::vector<std::pair<std::string, std::string>> headers;
    if (!creds.authorization.empty())
      headers.emplace_back("Authorization", creds.authorization);
    if (!config_.auth.impersonate_user.empty()) {
      headers.emplace_back("Impersonate-User", config_.auth.impersonate_user);
      for (const auto& g : config_.auth.impersonate_groups) {
        headers.emplace_back("Impersonate-Group", g);
      }
    }
    ws::WebSocketClient socket(*stream);
    // -v 6 logs the upgrade as any request: `GET URL 101 Switching Protocols in N milliseconds`.
    const auto started = std::chrono::steady_clock::now();
    const auto log_handshake = [&](const HttpResponse* response, std::string_view error) {
      std::cerr << format_request_log(config_.verbosity, HttpRequest{.method = "GET", .path = path},
                                      transport_.server() + path, headers, response, error,
                                      std::chrono::duration_cast<std::chrono::milliseconds>(
                                          std::chrono::steady_clock::now() - started))
                << std::flush;
    };
    try {
      // v5 can tell the server stdin is finished; v4 is what older servers speak.
      socket.handshake(host, path, headers,
                       {std::string(kExecProtocolV5), std::string(kExecProtocolV4)});
      const HttpResponse switched{.status = 101};
      log_handshake(&switched, "");
    } catch (const Error& e) {
      log_handshake(nullptr, e.message());
      if (e.kind() == ErrorKind::Unauthorized && !refreshed &&
          credentials_->refresh_after_unauthorized(creds)) {
        refreshed = true;
        continue;
      }
      throw;
    }
    ExecOutcome outcome;
    ExecResult result = run_exec_session(
        socket, options.stdin_data, [&](std::string_view d) { outcome.stdout_data.append(d); },
        [&](std::string_view d) { outcome.stderr_data.append(d); });
    outcome.exit_code = result.exit_code;
    return outcome;
  }
}

json Client::discover(std::string_view group, std::string_view version) {
  const std::string path =
      group.empty() ? fmt::format("/api/{}", version) : fmt::format("/apis/{}/{}", group, version);
  return json_call(json_request("GET", path, nullptr), true);
}

void Client::require_served(const Resource& r) {
  const std::string missing = fmt::format(
      "{} {} is not served by this cluster: run `trainctl install`", r.api_version(), r.plural);
  json list;
  try {
    list = discover(r.group, r.version);
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::NotFound)
      throw Error(ErrorKind::NotFound, missing, 404);
    throw;
  }
  for (const auto& res : list.value("resources", json::array())) {
    if (res.value("name", "") == r.plural)
      return;
  }
  throw Error(ErrorKind::NotFound, missing, 404);
}

bool Client::serves(const Resource& r) {
  try {
    require_served(r);
    return true;
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::NotFound)
      throw;
    return false;
  }
}

json Client::server_version() {
  return json_call(json_request("GET", "/version", nullptr), true);
}

}  // namespace trainctl::kube
