// The verbs on a served resource: list, watch, create, update, patch, delete and delete
// collection, converting between the client's version and the stored one.

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <deque>
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
#include "sandbox/selector.h"
#include "sandbox/structural_schema.h"
#include "sandbox/table.h"
#include "text.h"
#include "yaml_json.h"

namespace trainctl::sandbox {

using nlohmann::json;

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
    if (const json& grace = member(opts, "gracePeriodSeconds"); grace.is_number_integer())
      del.grace_period_seconds = grace.get<std::int64_t>();
  }
  if (const std::string p = request.param("propagationPolicy"); !p.empty()) {
    del.propagation_policy = p;
  }
  if (const std::string p = request.param("gracePeriodSeconds"); !p.empty()) {
    std::int64_t grace = 0;
    const auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), grace);
    if (ec != std::errc() || end != p.data() + p.size())
      fail(ErrorKind::BadRequest, 400,
           fmt::format("strconv.ParseInt: parsing {:?}: invalid syntax", p));
    del.grace_period_seconds = grace;
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

/// A write's fieldValidation directive: what decoding does with unknown fields.
enum class FieldValidation {
  Ignore,  // dropped silently
  Warn,    // dropped, one Warning header each (the default since v1.25)
  Strict,  // the request fails
};

FieldValidation field_validation(const Request& request, const std::string& options_kind) {
  const std::string value = request.param("fieldValidation");
  if (value.empty() || value == "Warn")
    return FieldValidation::Warn;
  if (value == "Ignore")
    return FieldValidation::Ignore;
  if (value == "Strict")
    return FieldValidation::Strict;
  throw invalid("meta.k8s.io", options_kind, "",
                {not_supported("fieldValidation", api::names::go_quote(value),
                               {"", "Ignore", "Strict", "Warn"})});
}

/// The Warning headers of unknown fields: `299 - "unknown field \"spec.foo\""`.
HeaderList unknown_field_warnings(FieldValidation mode, const std::vector<std::string>& unknown) {
  HeaderList headers;
  if (mode != FieldValidation::Warn)
    return headers;
  for (const auto& field : unknown) {
    headers.emplace_back(
        "Warning", "299 - " + api::names::go_quote("unknown field " + api::names::go_quote(field)));
  }
  return headers;
}

/// Decodes a create's or update's body as the served version's codec does: unknown fields
/// dropped, refused with 400 under Strict ("strict decoding error").
HeaderList decode_body(json& obj, const ResourceStrategy& strategy, const std::string& version,
                       FieldValidation mode) {
  const ResourceStrategy::Decoded decoded = strategy.decode(obj, version);
  // transformDecodeError: a body the Go type cannot hold is a 400 naming the kind and version.
  const auto refuse = [&](const std::string& why) {
    const std::string& kind = strategy.info().kind;
    fail(ErrorKind::BadRequest, 400,
         fmt::format("{} in version {:?} cannot be handled as a {}: {}", kind, version, kind, why));
  };
  if (decoded.error)
    refuse(*decoded.error);
  if (mode == FieldValidation::Strict && !decoded.unknown_fields.empty())
    refuse(strict_decoding_error(decoded.unknown_fields));
  return unknown_field_warnings(mode, decoded.unknown_fields);
}

/// Server-side apply builds a typed object of the applied configuration from the schema first:
/// a field the schema does not declare fails it with 500, whatever fieldValidation says.
void check_applied_fields(const json& config, const ResourceStrategy& strategy,
                          const std::string& version, const std::string& name) {
  json copy = config;
  const std::vector<std::string> unknown = strategy.decode(copy, version).unknown_fields;
  if (unknown.empty())
    return;
  const json& meta = config.value("metadata", json::object());
  const ResourceInfo& info = strategy.info();
  throw ApiError(ErrorKind::ServerError, 500, "",
                 fmt::format("failed to create typed patch object ({}/{}; {}/{}, Kind={}): .{}: "
                             "field not declared in schema",
                             meta.is_object() ? meta.value("namespace", "") : "", name, info.group,
                             version, info.kind, unknown.front()));
}

}  // namespace

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
  for (auto& item : page.items)
    items.push_back(route.present(std::move(item)));
  respond_objects(request, response, route,
                  {{"kind", route.info.kind + "List"},
                   {"apiVersion", route.api_version()},
                   {"metadata", meta},
                   {"items", std::move(items)}});
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
  const std::vector<PrintColumn> columns =
      as_table ? route.strategy->columns(route.version) : std::vector<PrintColumn>();
  auto error_event = [](int code, const std::string& reason, const std::string& message) {
    return watch_event_line(kube::WatchEventType::Error, failure_status(code, reason, message)) +
           "\n";
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
  // An event goes out as its line, encoded once for every watcher of the resource when the
  // client reads it as stored (JSON, the storage version), as the watch cache's cachingObject
  // does; as a Table row or in another version, for this watch alone.
  const bool shared = !as_table && route.version == route.strategy->info().version;
  const auto next_line = [&](std::chrono::milliseconds wait) -> std::shared_ptr<const std::string> {
    if (shared) {
      auto event = stream->next_serialized(wait);
      return event ? std::move(event->line) : nullptr;
    }
    auto event = stream->next(wait);
    if (!event)
      return nullptr;
    const bool row = as_table && event->type != kube::WatchEventType::Error &&
                     event->type != kube::WatchEventType::Bookmark;
    if (row) {
      event->object = to_table(columns, {route.present(std::move(event->object))},
                               include.empty() ? "Metadata" : include, store_.now());
    } else if (event->type != kube::WatchEventType::Error) {
      event->object = route.present(std::move(event->object));
    }
    return std::make_shared<const std::string>(watch_event_line(event->type, event->object));
  };
  // Faults::watch_delay: what the store hands out waits here, stamped with when it came, until
  // it is that old. The stream hands events out as they happen and makes a bookmark from the
  // store's version when it has had nothing to send for a while, so a bookmark queued behind the
  // held events never claims a version ahead of them.
  struct Held {
    std::chrono::steady_clock::time_point since;
    std::shared_ptr<const std::string> line;
  };
  std::deque<Held> held;
  // Whatever is due goes out in one write, as kube-apiserver flushes a watch only once it has
  // no more events at hand: one TLS record and one syscall for a burst rather than one per event.
  constexpr std::size_t kBatchBytes = 256 * 1024;
  std::string batch;
  bool connected = true;
  while (connected && std::chrono::steady_clock::now() < deadline && !stop.stop_requested() &&
         response.client_connected()) {
    const auto delay =
        faults().watch_delay;  // read afresh: PUT /sandbox/faults reaches open watches
    auto now = std::chrono::steady_clock::now();
    batch.clear();
    while (!held.empty() && held.front().since + delay <= now && batch.size() < kBatchBytes) {
      batch.append(*held.front().line).push_back('\n');
      held.pop_front();
    }
    if (!batch.empty() && !(connected = response.write_chunk(batch)))
      break;
    // Until the first held line is due (at once when more are due than one write took).
    auto wait = std::chrono::milliseconds(250);
    if (!held.empty()) {
      wait =
          std::clamp(std::chrono::ceil<std::chrono::milliseconds>(held.front().since + delay - now),
                     std::chrono::milliseconds(0), wait);
    }
    if (auto line = next_line(wait)) {
      now = std::chrono::steady_clock::now();
      held.push_back({now, std::move(line)});
      // And what else the stream has queued already, without waiting for more.
      std::size_t bytes = held.back().line->size();
      while (bytes < kBatchBytes) {
        auto more = next_line(std::chrono::milliseconds(0));
        if (!more)
          break;
        bytes += more->size();
        held.push_back({now, std::move(more)});
      }
    } else if (stream->closed()) {
      if (held.empty())
        break;
      std::this_thread::sleep_for(wait);  // the store ended the watch; what it sent still goes
    }
  }
  stream->close();
  response.end_stream();
}

json ApiServer::received_object(const Request& request, const Route& route) {
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
  return obj;
}

void ApiServer::serve_create(const Request& request, ResponseWriter& response, const Route& route) {
  const FieldValidation mode = field_validation(request, "CreateOptions");
  json obj = received_object(request, route);
  const HeaderList warnings = decode_body(obj, *route.strategy, route.version, mode);
  obj["apiVersion"] = route.info.api_version();
  obj["kind"] = route.info.kind;
  obj = route.strategy->from_version(std::move(obj), route.version);
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
  route.strategy->admit(obj, admission_context());
  const bool dry = dry_run(request);
  json created = store_.create(route.info.group_resource(), std::move(obj), dry);
  if (!dry)
    route.strategy->after_write(created, WriteVerb::Create, served_);
  respond_json(response, 201, route.present(std::move(created)), warnings);
}

void ApiServer::serve_update(const Request& request, ResponseWriter& response, const Route& route) {
  if (faults().conflict_on_update) {
    fail(ErrorKind::Conflict, 409,
         fmt::format("Operation cannot be fulfilled on {} {:?}: the object has been modified; "
                     "please apply your changes to the latest version and try again "
                     "(injected fault)",
                     route.info.group_resource(), route.name));
  }
  const FieldValidation mode = field_validation(request, "UpdateOptions");
  json obj = parse_body(request);
  const HeaderList warnings = decode_body(obj, *route.strategy, route.version, mode);
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
  obj = route.strategy->from_version(std::move(obj), route.version);
  const WritePart part = route.subresource == "status" ? WritePart::Status : WritePart::Main;
  const bool dry = dry_run(request);
  json updated = store_.update(route.info.group_resource(), std::move(obj), part, dry);
  if (!dry)
    route.strategy->after_write(updated, WriteVerb::Update, served_);
  respond_json(response, 200, route.present(std::move(updated)), warnings);
}

void ApiServer::serve_patch(const Request& request, ResponseWriter& response, const Route& route) {
  if (faults().conflict_on_update) {
    fail(ErrorKind::Conflict, 409,
         fmt::format("Operation cannot be fulfilled on {} {:?}: the object has been modified "
                     "(injected fault)",
                     route.info.group_resource(), route.name));
  }
  const FieldValidation mode = field_validation(request, "PatchOptions");
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
  if (*type == PatchType::Apply)
    check_applied_fields(patch_request.body, *route.strategy, route.version, route.name);
  std::vector<std::string> unknown;
  patch_request.decode = [&route, &unknown, mode](json& patched) {
    const json before = patched;
    const ResourceStrategy::Decoded decoded = route.strategy->decode(patched, route.version);
    if (decoded.error) {
      // applyPatchToCurrentObject: the patched object does not decode.
      throw invalid("", "", "",
                    {invalid_value("patch", api::names::go_quote(before.dump()), *decoded.error)});
    }
    unknown = decoded.unknown_fields;
    if (mode != FieldValidation::Strict || unknown.empty())
      return;
    // The patched object does not decode: a 422 naming the whole object as the bad value.
    const std::string body = "Invalid value: " + api::names::go_quote(before.dump()) + ": " +
                             strict_decoding_error(unknown);
    throw ApiError(
        ErrorKind::Invalid, 422, "Invalid", " \"\" is invalid: patch: " + body,
        {{"causes",
          json::array(
              {{{"reason", "FieldValueInvalid"}, {"message", body}, {"field", "patch"}}})}});
  };
  if (route.version != route.strategy->info().version) {
    // The patch applies to the object as the client's version shows it.
    patch_request.to_served = [&route](json stored) { return route.present(std::move(stored)); };
    patch_request.from_served = [&route](json served) {
      return route.strategy->from_version(std::move(served), route.version);
    };
  }
  PatchResult result = patch(store_, gr, route.ns, route.name, patch_request);
  if (!patch_request.dry_run)
    route.strategy->after_write(result.object, WriteVerb::Patch, served_);
  respond_json(response, result.created ? 201 : 200, route.present(std::move(result.object)),
               unknown_field_warnings(mode, unknown));
}

void ApiServer::serve_delete(const Request& request, ResponseWriter& response, const Route& route) {
  const std::string gr = route.info.group_resource();
  const DeleteRequest del = delete_request(request);
  json deleted = store_.remove(gr, route.ns, route.name, del);
  if (!del.dry_run)  // a dry run changes nothing
    route.strategy->after_write(deleted, WriteVerb::Delete, served_);
  respond_json(response, 200, route.present(std::move(deleted)));
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
      json deleted =
          store_.remove(gr, item["metadata"].value("namespace", ""), item["metadata"]["name"], del);
      if (!del.dry_run)
        route.strategy->after_write(deleted, WriteVerb::Delete, served_);
      items.push_back(std::move(deleted));
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

}  // namespace trainctl::sandbox
