#include "controller/executor.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <set>

#include "api/status.h"
#include "error.h"
#include "json_access.h"

namespace trainctl::controller {
using nlohmann::json;

void declare_executor_metrics(MetricsRegistry& metrics) {
  metrics.declare_counter("trainctl_api_writes_total",
                          "Writes the controller sent, by verb and resource.",
                          {"verb", "resource"});
  metrics.declare_counter("trainctl_events_total", "Kubernetes Events recorded, by reason.",
                          {"type", "reason"});
  metrics.declare_counter("trainctl_events_dropped_total",
                          "Kubernetes Events dropped because too many waited to be sent.",
                          {"type", "reason"});
}

namespace {

/// The threads that send slow-start batches beside the reconciler's workers. On the 2-core
/// sandbox benchmark 16 and 32 wrote at the same rate (within its noise); a thread per write
/// cost a third of the controller's CPU.
constexpr std::size_t kWriterThreads = 16;

/// What the server said, without trainctl's "(HTTP n)": its Status message, else the error's.
std::string server_words(const Error& e) {
  std::string message = string_member(e.status(), "message");
  return message.empty() ? e.message() : message;
}

/// Whether a write failed because the object it meant is gone: NotFound, or a Conflict on the
/// uid the write carried (the name now belongs to a newer object, or to none: the real server
/// compares a PUT's metadata.uid with an empty object then). An optimistic-lock Conflict (same
/// object, another resourceVersion) is no such thing: the caller retries it.
bool object_is_gone(const Error& e) {
  if (e.kind() == ErrorKind::NotFound)
    return true;
  if (e.kind() != ErrorKind::Conflict)
    return false;
  const std::string message = server_words(e);
  // storage.Preconditions.Check (update, and delete in some registries), then
  // rest.BeforeDelete (delete).
  return message.find("Precondition failed: UID in precondition:") != std::string::npos ||
         message.find("the UID in the precondition (") != std::string::npos;
}

/// Whether a create was refused because its namespace is being deleted (kube-apiserver's
/// NamespaceLifecycle admission: 403 with cause NamespaceTerminating). Nothing can be created there
/// any more, and the job goes with its namespace: kube's job controller ignores the error too.
bool namespace_terminating(const Error& e) {
  return e.kind() == ErrorKind::Forbidden && e.has_status_cause("NamespaceTerminating");
}

}  // namespace

Executor::Executor(kube::Client& client, MetricsRegistry& metrics, Logger& log,
                   std::string component)
    : client_(client),
      metrics_(metrics),
      log_(log),
      events_(client.config(), metrics, log, std::move(component)),
      writers_(kWriterThreads) {}

json Executor::perform(const Action& action) {
  metrics_.increment("trainctl_api_writes_total",
                     {std::string(Action::verb(action.type)), action.resource.plural});
  switch (action.type) {
    case Action::Type::Create:
      try {
        // Only whether it went through is read (a non-null result): decoding the object the
        // server sends back was 7 % of the controller's CPU while it created pods.
        return client_.create(action.resource, action.namespace_, action.object,
                              {.decode_answer = false});
      } catch (const Error& e) {
        if (e.kind() != ErrorKind::AlreadyExists && !namespace_terminating(e)) {
          record_failed_create(action, e);
          throw;
        }
      }
      return nullptr;
    case Action::Type::Delete: {
      kube::DeleteOptions options{.propagation_policy = "Background"};
      if (!action.uid.empty())
        options.precondition_uid = action.uid;
      try {
        return client_.remove(action.resource, action.namespace_, action.name, options);
      } catch (const Error& e) {
        // Gone already, or replaced by a newer object with the same name (uid precondition).
        if (!object_is_gone(e))
          throw;
      }
      return nullptr;
    }
    case Action::Type::Update:
    case Action::Type::UpdateStatus:
    case Action::Type::Patch:
      try {
        return write(action);
      } catch (const Error& e) {
        // Planned from a cache that still held the object: nothing is left to write to.
        if (!object_is_gone(e))
          throw;
        log_.debug(2, "the object of a write is gone",
                   {{"resource", action.resource.plural},
                    {"object", action.namespace_.empty() ? action.name
                                                         : action.namespace_ + "/" + action.name},
                    {"error", e.what()}});
      }
      return nullptr;
  }
  return nullptr;
}

void Executor::record_failed_create(const Action& action, const Error& e) {
  const json* owner = controller_owner(action.object);
  if (owner == nullptr)
    return;
  events_.record({.type = "Warning",
                  .reason = "FailedCreate",
                  .message = fmt::format("Error creating: {}", server_words(e)),
                  .involved_object = {.api_version = string_member(*owner, "apiVersion"),
                                      .kind = string_member(*owner, "kind"),
                                      .namespace_ = action.namespace_,
                                      .name = string_member(*owner, "name"),
                                      .uid = string_member(*owner, "uid")}});
}

json Executor::write(const Action& action) {
  switch (action.type) {
    case Action::Type::Update:
      return client_.update(action.resource, action.namespace_, action.object);
    case Action::Type::UpdateStatus:
      return client_.update_status(action.resource, action.namespace_, action.object);
    case Action::Type::Patch:
      return client_.patch_text(action.resource, action.namespace_, action.name,
                                kube::PatchType::Merge, action.patch);
    default:
      return nullptr;
  }
}

void Executor::perform_batched(const std::vector<Action>& actions, std::size_t first,
                               std::size_t last, std::vector<json>& results) {
  for (std::size_t batch = 1; first < last; batch *= 2) {
    const std::size_t end = std::min(last, first + batch);
    writers_.for_each(end - first,
                      [&](std::size_t i) { results[first + i] = perform(actions[first + i]); });
    first = end;
  }
}

std::vector<json> Executor::apply(const Plan& plan) {
  const std::vector<Action>& actions = plan.actions;
  std::vector<json> results(actions.size());
  try {
    apply_actions(actions, results);
  } catch (const Error& e) {
    throw ApplyError(e, std::move(results));
  }
  for (const auto& event : plan.events)
    events_.record(event);
  return results;
}

void Executor::apply_actions(const std::vector<Action>& actions, std::vector<json>& results) {
  const auto independent = [&](std::size_t i) {
    return actions[i].type == Action::Type::Create || actions[i].type == Action::Type::Delete;
  };
  for (std::size_t i = 0; i < actions.size();) {
    if (!independent(i)) {
      results[i] = perform(actions[i]);
      ++i;
      continue;
    }
    // A run ends before an action on an object it already touches (a delete, then a create of
    // the same name): those two stay in order.
    std::set<std::string> objects;
    std::size_t end = i;
    while (end < actions.size() && independent(end) && objects.insert(actions[end].target()).second)
      ++end;
    perform_batched(actions, i, end, results);
    i = end;
  }
}

}  // namespace trainctl::controller
