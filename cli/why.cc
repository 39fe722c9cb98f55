// trainctl why JOB: one diagnosis of why a job is not running. Reads the job, its pods, PodGroup,
// Queue and Warning events once, and prints the findings, most likely blocker first.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <iostream>
#include <map>

#include "admission_state.h"
#include "api/job_view.h"
#include "api/quantity.h"
#include "api/resources.h"
#include "api/status.h"
#include "commands.h"
#include "controller/gang.h"
#include "docs.h"
#include "error.h"
#include "events.h"
#include "job_lookup.h"
#include "job_target.h"
#include "job_watch.h"
#include "queue_fit.h"
#include "replicas.h"
#include "text.h"
#include "yaml_json.h"

namespace trainctl::cli {
namespace {

using nlohmann::json;

constexpr std::size_t kMaxEvents = 20;

/// Container waiting reasons that keep a replica from running until someone acts.
constexpr std::string_view kStuckReasons[] = {
    "ImagePullBackOff", "ErrImagePull",         "CrashLoopBackOff", "CreateContainerConfigError",
    "InvalidImageName", "CreateContainerError", "RunContainerError"};

/// How likely a finding is to be what keeps the job from running: the lower, the likelier.
enum Rank : int {
  kSuspended,
  kNeverFits,    // bigger than its queue's capability: it can never run
  kQueue,        // the queue is closed, full or missing
  kScheduler,    // the scheduler's own reason for an unschedulable pod
  kContainer,    // a container that cannot start
  kGang,         // the gang is not admitted (a consequence of the above, when they hold)
  kRefused,      // the API server refuses the job's pods or services (FailedCreate events)
  kMissingPods,  // replicas without a pod
  kEvent,
};

/// One thing that may keep the job from running.
struct Finding {
  Rank rank;
  std::string text;
};

/// The job's status as users see it (Queued while its gang waits) with its condition's detail:
/// `Running (TFJobRunning: message)`.
std::string status_line(const json& job, const json& podgroup) {
  const std::string status = api::display_status(job, podgroup);
  const std::string detail = api::status_detail(job);
  return detail.empty() ? status : fmt::format("{} ({})", status, detail);
}

/// What keeps `queue` from admitting a gang that needs `gang`'s spec.minResources (the observed
/// PodGroup, or the one the controller will create).
void queue_findings(const json& queue, const json& gang, std::vector<Finding>& findings) {
  const std::string name = string_at(queue, "/metadata/name"_json_pointer);
  std::string state = string_at(queue, "/status/state"_json_pointer);
  if (state.empty())
    state = string_at(queue, "/spec/state"_json_pointer);
  if (state == "Closed" || state == "Closing") {
    findings.push_back({kQueue, fmt::format("queue {:?} is {}: it admits no new jobs (reopen it, "
                                            "or submit to another queue)",
                                            name, state)});
  }
  for (const auto& shortfall : capability_shortfalls(queue, gang)) {
    findings.push_back({kNeverFits, fmt::format("the job can never run: {} (submit it to a "
                                                "bigger queue, or make it smaller)",
                                                shortfall)});
  }
  const json capability = queue.value("spec", json::object()).value("capability", json::object());
  const json allocated = queue.value("status", json::object()).value("allocated", json::object());
  const json needed = gang.value("spec", json::object()).value("minResources", json::object());
  for (const auto& [resource, cap_value] : capability.items()) {
    const std::int64_t cap = api::quantity_milli(cap_value);
    const std::int64_t used =
        allocated.contains(resource) ? api::quantity_milli(allocated[resource]) : 0;
    const std::int64_t need = needed.contains(resource) ? api::quantity_milli(needed[resource]) : 0;
    if (need > cap)
      continue;  // said above: waiting will not help
    if (need > 0 && used + need > cap) {
      findings.push_back(
          {kQueue,
           fmt::format("queue {:?} cannot admit the job: {} {} allocated + {} needed exceeds its "
                       "capability {}",
                       name, resource, api::format_quantity(resource, used),
                       api::format_quantity(resource, need), api::format_quantity(resource, cap))});
    } else if (used >= cap) {
      findings.push_back({kQueue, fmt::format("queue {:?} is full: {} {} of {} allocated", name,
                                              resource, api::format_quantity(resource, used),
                                              api::format_quantity(resource, cap))});
    }
  }
}

void podgroup_findings(const json& podgroup, std::vector<Finding>& findings) {
  if (controller::pod_group_admitted(podgroup))
    return;
  const std::string phase = string_at(podgroup, "/status/phase"_json_pointer);
  const std::string name = string_at(podgroup, "/metadata/name"_json_pointer);
  bool explained = false;
  for (const auto& c :
       podgroup.value("status", json::object()).value("conditions", json::array())) {
    if (c.value("status", "") != "True" || c.value("type", "") == "Scheduled")
      continue;
    findings.push_back(
        {kGang, fmt::format("podgroup {} is {}: {}: {}", name, phase.empty() ? "Pending" : phase,
                            c.value("type", ""), c.value("message", c.value("reason", "")))});
    explained = true;
  }
  if (!explained) {
    findings.push_back(
        {kGang, fmt::format("podgroup {} is {}: its gang of {} pods is not admitted yet", name,
                            phase.empty() ? "Pending" : phase,
                            podgroup.value("spec", json::object()).value("minMember", 0))});
  }
}

/// The coscheduling plugin's Permit timeout when the group sets none (scheduler-plugins,
/// pkg/util/podgroup.go: DefaultWaitTime, and the plugin's permitWaitingTimeSeconds default).
constexpr std::chrono::seconds kCoschedulingDefaultTimeout{60};

/// What keeps a scheduler-plugins gang (scheduling.x-k8s.io/v1alpha1) from being placed. The
/// coscheduling plugin binds none of its pods before minMember of them exist and fit at once
/// (PreFilter, Permit), and rejects the pods waiting at Permit once the group's schedule timeout
/// has passed, then tries again (pkg/coscheduling/core/core.go). The group's phase is the
/// scheduler-plugins controller's (pkg/controllers/podgroup_controller.go): Pending until
/// minMember pods exist, Scheduling until minMember run, then Running, Finished or Failed; it
/// has no conditions, so the counts come from the job's pods. Nothing once minMember are bound.
void scheduler_plugins_findings(const json& group, const std::vector<json>& pods,
                                std::chrono::system_clock::time_point now,
                                std::vector<Finding>& findings) {
  const std::string phase = string_at(group, "/status/phase"_json_pointer);
  if (phase == "Running" || phase == "Finished")
    return;
  const int min_member = group.value("spec", json::object()).value("minMember", 1);
  const auto bound = std::count_if(pods.begin(), pods.end(), [](const json& pod) {
    return !string_at(pod, "/spec/nodeName"_json_pointer).empty();
  });
  if (bound >= min_member)
    return;  // placed: its pods are starting
  const std::string head = fmt::format(
      "podgroup {} (scheduling.x-k8s.io) {}", string_at(group, "/metadata/name"_json_pointer),
      phase.empty() ? "has no phase (is the scheduler-plugins controller running?)"
                    : "is " + phase);
  if (static_cast<int>(pods.size()) < min_member) {
    findings.push_back(
        {kGang, fmt::format("{}: {} of its minMember {} pods exist; coscheduling binds none of "
                            "them before all {} do",
                            head, pods.size(), min_member, min_member)});
    return;
  }
  const auto running = std::count_if(pods.begin(), pods.end(), [](const json& pod) {
    return string_at(pod, "/status/phase"_json_pointer) == "Running";
  });
  const std::string started = string_at(group, "/status/scheduleStartTime"_json_pointer);
  const std::string since = started.empty() ? "its creation" : "scheduleStartTime";
  const auto waited = api::age_of(
      started.empty() ? group.value("metadata", json::object()).value("creationTimestamp", json())
                      : json(started),
      now);
  const json& timeout_field =
      group.value("spec", json::object()).value("scheduleTimeoutSeconds", json());
  const std::chrono::seconds timeout = timeout_field.is_number_integer()
                                           ? std::chrono::seconds(timeout_field.get<int>())
                                           : kCoschedulingDefaultTimeout;
  const bool past = waited && *waited > timeout;
  findings.push_back(
      {kGang,
       fmt::format(
           "{}: {} of its minMember {} pods bound, {} running, waiting {} since {}, {} its "
           "schedule timeout of {} ({}){}; coscheduling binds the gang only when all {} "
           "pods fit at once: free {} for it, or lower minMember "
           "(spec.runPolicy.schedulingPolicy.minAvailable)",
           head, bound, min_member, running, api::human_duration_or_none(waited), since,
           past ? "past" : "within", api::human_duration(timeout),
           timeout_field.is_number_integer() ? "spec.scheduleTimeoutSeconds"
                                             : "coscheduling's default",
           past ? ": the pods waiting at Permit were rejected and are retried" : "", min_member,
           format_resource_list(api::parse_resource_list(
               group.value("spec", json::object()).value("minResources", json::object()))))});
}

void pod_findings(const std::vector<json>& pods, std::vector<Finding>& findings) {
  for (const auto& pod : pods) {
    const std::string replica = replica_display_name(pod);
    const std::string pod_name = string_at(pod, "/metadata/name"_json_pointer);
    const json status = pod.value("status", json::object());
    for (const auto& c : status.value("conditions", json::array())) {
      if (c.value("type", "") == "PodScheduled" && c.value("status", "") == "False") {
        findings.push_back(
            {kScheduler, fmt::format("{} (pod {}) cannot be scheduled: {}", replica, pod_name,
                                     c.value("message", c.value("reason", "")))});
      }
    }
    for (const auto& cs : status.value("containerStatuses", json::array())) {
      const json waiting = cs.value("state", json::object()).value("waiting", json::object());
      const std::string reason = waiting.value("reason", "");
      if (std::find(std::begin(kStuckReasons), std::end(kStuckReasons), reason) ==
          std::end(kStuckReasons))
        continue;
      const std::string message = waiting.value("message", "");
      findings.push_back({kContainer, fmt::format("{} (pod {}): container {} is waiting: {}{}{}",
                                                  replica, pod_name, cs.value("name", ""), reason,
                                                  message.empty() ? "" : ": ", message)});
    }
  }
}

/// Replicas the spec asks for that have no pod: `worker-2` for index 2 of 4 workers. Asks
/// whether an operator runs only when nothing shows one has acted (no PodGroup, no condition);
/// says nothing of a Volcano gang that is not admitted yet, whose pods are not due (a
/// scheduler-plugins gang's pods are created at once).
void missing_pod_findings(const json& job, const std::vector<json>& pods, const json& podgroup,
                          std::vector<Finding>& findings) {
  std::vector<std::string> have;
  for (const auto& pod : pods)
    have.push_back(replica_display_name(pod));
  std::vector<std::string> missing;
  int expected = 0;
  for (const auto& totals : api::replica_totals(job)) {
    for (int i = 0; i < totals.replicas; ++i, ++expected) {
      const std::string name = fmt::format("{}-{}", to_lower(totals.type), i);
      if (std::find(have.begin(), have.end(), name) == have.end())
        missing.push_back(name);
    }
  }
  if (missing.empty() || (podgroup.is_object() && !is_scheduler_plugins_gang(podgroup) &&
                          !controller::pod_group_admitted(podgroup)))
    return;
  const bool operator_acted =
      podgroup.is_object() ||
      !job.value("status", json::object()).value("conditions", json::array()).empty();
  if (pods.empty() && !operator_acted) {
    findings.push_back({kMissingPods,
                        "no pods exist for the job: no operator has created them (is `trainctl "
                        "controller` running, and does spec.runPolicy.managedBy name another "
                        "controller?)"});
    return;
  }
  findings.push_back(
      {kMissingPods, fmt::format("{} of {} replica pods do not exist yet: {}", missing.size(),
                                 expected, fmt::join(missing, ", "))});
}

struct WhyOptions {
  JobTarget target;

  Connection connection;
  std::string job;  // its name, once completed
  std::string namespace_;

  void Complete(const GlobalFlags& flags) {
    connection = Connection(flags);
    target.Complete(connection);
    job = target.job().name;
    namespace_ = target.namespace_();
  }

  void Run() {
    kube::Client* client = &connection.client();
    const FoundJob found = target.find(*client, target.job());
    const json& j = found.object;
    const std::string name = fmt::format("{}/{}", api::kind_resource_name(found.kind), job);
    if (job_finished(j)) {
      const json completion = j.value("status", json::object()).value("completionTime", json());
      std::cout << fmt::format(
          "{} has finished: {}{}\n", name, status_line(j, nullptr),
          completion.is_string() ? " at " + completion.get<std::string>() : "");
      return;
    }
    std::vector<json> pods = client
                                 ->list_all(kube::resources::pods(), namespace_,
                                            {.label_selector = replica_selector(job)})
                                 .value("items", json::array());
    std::sort(pods.begin(), pods.end(), replica_order);
    const json podgroup = job_gang(*client, namespace_, job);
    std::vector<Finding> findings = diagnose(*client, j, pods, podgroup);
    std::stable_sort(findings.begin(), findings.end(),
                     [](const Finding& a, const Finding& b) { return a.rank < b.rank; });
    std::cout << fmt::format("{} is {}\n", name, status_line(j, podgroup));
    if (findings.empty()) {
      std::cout << (api::job_status(j) == "Running" ? "Nothing keeps it from running.\n"
                                                    : "No blocker found.\n");
      return;
    }
    std::cout << fmt::format("Most likely blocker: {}\n", findings[0].text);
    std::cout << "Findings:\n";
    for (std::size_t i = 0; i < findings.size(); ++i)
      std::cout << fmt::format("  {}. {}\n", i + 1, findings[i].text);
  }

  /// The Volcano gang's findings (`podgroup` null: the one the controller will make) and its
  /// queue's.
  static void volcano_findings(kube::Client& client, const json& j, const json& podgroup,
                               std::vector<Finding>& findings) {
    std::string queue_name = api::job_queue(j);
    if (podgroup.is_object()) {
      podgroup_findings(podgroup, findings);
      if (const std::string q = string_at(podgroup, "/spec/queue"_json_pointer); !q.empty())
        queue_name = q;
    }
    // An admitted gang holds its share of the queue: the queue's state and allocation (its own
    // included) no longer keep it from running.
    const bool admitted = podgroup.is_object() && controller::pod_group_admitted(podgroup);
    if (!queue_name.empty() && !admitted) {
      const json queue = get_or_null(client, kube::resources::queues(), "", queue_name);
      if (queue.is_null())
        findings.push_back({kQueue, fmt::format("queue {:?} does not exist", queue_name)});
      else
        queue_findings(queue, podgroup.is_object() ? podgroup : controller::pod_group(j), findings);
    }
  }

  std::vector<Finding> diagnose(kube::Client& client, const json& j, const std::vector<json>& pods,
                                const json& podgroup) const {
    std::vector<Finding> findings;
    if (api::job_status(j) == "Suspended" || api::JobView(j).run_policy().suspend) {
      findings.push_back(
          {kSuspended, fmt::format("the job is suspended (spec.runPolicy.suspend): `{}` lets it "
                                   "run",
                                   target.suggest("resume " + job))});
    }
    if (is_scheduler_plugins_gang(podgroup)) {
      // No Queue admits it: the coscheduling plugin places it when the nodes have room.
      scheduler_plugins_findings(podgroup, pods, std::chrono::system_clock::now(), findings);
    } else {
      volcano_findings(client, j, podgroup, findings);
    }
    pod_findings(pods, findings);
    missing_pod_findings(j, pods, podgroup, findings);
    std::vector<std::string> names{job};
    for (const auto& pod : pods)
      names.push_back(string_at(pod, "/metadata/name"_json_pointer));
    for (const auto& e : recent_events(client, namespace_, names, kMaxEvents)) {
      if (e.value("type", "") != "Warning")
        continue;
      findings.push_back(
          {e.value("reason", "") == "FailedCreate" ? kRefused : kEvent,
           fmt::format("event {} on {}/{}: {}", e.value("reason", ""),
                       to_lower(string_at(e, "/involvedObject/kind"_json_pointer)),
                       string_at(e, "/involvedObject/name"_json_pointer), e.value("message", ""))});
    }
    return findings;
  }
};

}  // namespace

void add_why_command(CLI::App& app, const GlobalFlags& flags) {
  auto opts = std::make_shared<WhyOptions>();
  auto* cmd = app.add_subcommand(
      "why",
      "Explain why a job is not running: its conditions, PodGroup and queue admission, "
      "unschedulable or stuck pods, missing pods and Warning events, likeliest blocker first");
  opts->target.add_to(*cmd, JobTarget::Args::One);
  add_examples(*cmd, R"(# Why is mnist not running? The likeliest blocker comes first
trainctl why mnist
# When two kinds share the name
trainctl why bert --kind pytorchjob -n team-a
trainctl why pytorchjob/bert)");
  run_verb(*cmd, opts, flags);
}

}  // namespace trainctl::cli
