// trainctl get JOB...: each job's status, conditions, replicas (its pods), PodGroup and recent
// events.
#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <tuple>

#include "admission_state.h"
#include "api/status.h"
#include "commands.h"
#include "docs.h"
#include "error.h"
#include "events.h"
#include "job_lookup.h"
#include "job_target.h"
#include "json_access.h"
#include "printer.h"
#include "replicas.h"
#include "text.h"
#include "yaml_json.h"

namespace trainctl::cli {
namespace {

using nlohmann::json;

constexpr size_t kEventsShown = 10;

std::string or_none(std::string s) {
  return s.empty() ? "<none>" : s;
}

int restarts(const json& pod) {
  int n = 0;
  for (const auto& cs :
       pod.value("status", json::object()).value("containerStatuses", json::array()))
    n += cs.value("restartCount", 0);
  return n;
}

/// The exit code of the first terminated container (current state, else the last one).
std::string exit_code_of(const json& pod) {
  for (const auto& cs :
       pod.value("status", json::object()).value("containerStatuses", json::array())) {
    for (const char* state : {"state", "lastState"}) {
      const json& s = cs.value(state, json::object());
      if (s.contains("terminated"))
        return std::to_string(s["terminated"].value("exitCode", 0));
    }
  }
  return "<none>";
}

/// `Name:   value` lines, values aligned, as kubectl describe prints them.
void print_fields(std::ostream& out,
                  const std::vector<std::pair<std::string, std::string>>& fields) {
  size_t width = 0;
  for (const auto& [key, value] : fields)
    width = std::max(width, key.size() + 1);
  for (const auto& [key, value] : fields)
    out << fmt::format("{:<{}}  {}\n", key + ":", width, value);
}

/// A blank line, `Title:` and the table, or `Title: <none>` when it has no rows.
void print_section(std::ostream& out, std::string_view title, const Table& table) {
  out << '\n' << title << ':';
  if (table.rows.empty()) {
    out << " <none>\n";
    return;
  }
  out << '\n';
  print_table(out, table);
}

struct GetOptions {
  JobTarget target;
  std::string output;

  Connection connection;
  OutputFormat format = OutputFormat::Table;

  void Complete(const GlobalFlags& flags) {
    connection = Connection(flags);
    target.Complete(connection);
    format = parse_output_format(output);
  }

  void Validate() const {
    if (target.jobs().empty())
      throw Error(ErrorKind::Usage, "get needs a job name");
  }

  /// Every job found is shown; a missing one is reported after the others, as kubectl does.
  void Run() {
    kube::Client& client = connection.client();
    std::vector<std::string> missing;
    const std::vector<FoundJob> found = target.find_all(client, missing);
    print(client, found);
    if (!missing.empty())
      throw Error(ErrorKind::NotFound, fmt::format("{}", fmt::join(missing, "; ")), 404);
  }

  void print(kube::Client& client, const std::vector<FoundJob>& found) const {
    if (format == OutputFormat::Json || format == OutputFormat::Yaml) {
      if (found.size() == 1 && target.jobs().size() == 1) {
        print_document(std::cout, found[0].object, format);
        return;
      }
      json list = {{"apiVersion", "v1"}, {"kind", "List"}, {"items", json::array()}};
      for (const auto& f : found)
        list["items"].push_back(f.object);
      print_document(std::cout, list, format);
      return;
    }
    for (std::size_t i = 0; i < found.size(); ++i) {
      if (format == OutputFormat::Name) {
        print_name(std::cout, found[i].object, api::kind_resource_name(found[i].kind));
        continue;
      }
      if (i > 0)
        std::cout << '\n';
      describe(client, found[i]);
    }
  }

  void describe(kube::Client& client, const FoundJob& found) const {
    const std::string job = name_of(found.object);
    const auto now = std::chrono::system_clock::now();
    const json group = job_gang(client, ns(), job);
    print_summary(found, group, now);
    print_conditions(found.object, now);
    const json pods =
        client.list_all(kube::resources::pods(), ns(), {.label_selector = replica_selector(job)})
            .value("items", json::array());
    print_replicas(pods, now);
    print_podgroup(group, job);
    print_events(client, job, pods, now);
  }

  const std::string& ns() const { return target.namespace_(); }

  void print_summary(const FoundJob& found, const json& group,
                     std::chrono::system_clock::time_point now) const {
    const json& j = found.object;
    const json created = j["metadata"].value("creationTimestamp", json());
    const std::string created_text =
        created.is_string() ? fmt::format("{} ({} ago)", created.get<std::string>(),
                                          api::human_duration_or_none(api::age_of(created, now)))
                            : "<none>";
    print_fields(std::cout, {{"Name", name_of(j)},
                             {"Namespace", ns()},
                             {"Kind", std::string(api::job_kind_info(found.kind).name)},
                             {"Status", api::display_status(j, group)},
                             {"Replicas", api::replicas_column(j)},
                             {"Queue", or_none(api::job_queue(j).empty()
                                                   ? string_at(group, "/spec/queue"_json_pointer)
                                                   : api::job_queue(j))},
                             {"Created", created_text},
                             {"Duration", api::human_duration_or_none(api::job_duration(j, now))}});
  }

  static void print_conditions(const json& j, std::chrono::system_clock::time_point now) {
    Table table{{"TYPE", "STATUS", "REASON", "MESSAGE", "LAST-TRANSITION"}, {}};
    for (const auto& c : j.value("status", json::object()).value("conditions", json::array())) {
      table.rows.push_back(
          {c.value("type", ""), c.value("status", ""), or_none(c.value("reason", "")),
           or_none(c.value("message", "")),
           api::human_duration_or_none(api::age_of(c.value("lastTransitionTime", json()), now))});
    }
    print_section(std::cout, "Conditions", table);
  }

  static void print_replicas(json pods, std::chrono::system_clock::time_point now) {
    std::vector<json> sorted(pods.begin(), pods.end());
    std::sort(sorted.begin(), sorted.end(), replica_order);
    Table table{{"REPLICA", "POD", "PHASE", "NODE", "RESTARTS", "EXIT-CODE", "AGE"}, {}};
    for (const auto& pod : sorted) {
      const json& meta = pod["metadata"];
      table.rows.push_back(
          {replica_display_name(pod), meta.value("name", ""),
           or_none(string_at(pod, "/status/phase"_json_pointer)),
           or_none(string_at(pod, "/spec/nodeName"_json_pointer)), std::to_string(restarts(pod)),
           exit_code_of(pod),
           api::human_duration_or_none(api::age_of(meta.value("creationTimestamp", json()), now))});
    }
    print_section(std::cout, "Pods", table);
  }

  /// Volcano's PodGroup with its queue; scheduler-plugins' with its pod counts and schedule
  /// timeout (the type has no queue).
  static void print_podgroup(const json& group, const std::string& job) {
    if (group.is_null())
      return;
    const auto field = [&group](const char* path, const char* absent = "<none>") {
      const std::string value = string_at(group, json::json_pointer(path));
      return value.empty() ? std::string(absent) : value;
    };
    Table table{{"NAME", "PHASE", "MIN-MEMBER"},
                {{job, field("/status/phase"), field("/spec/minMember")}}};
    if (is_scheduler_plugins_gang(group)) {
      table.headers.insert(table.headers.end(),
                           {"RUNNING", "SUCCEEDED", "FAILED", "SCHEDULE-TIMEOUT"});
      const std::string timeout = string_at(group, "/spec/scheduleTimeoutSeconds"_json_pointer);
      // The counts are omitted while 0 (omitempty).
      table.rows[0].insert(
          table.rows[0].end(),
          {field("/status/running", "0"), field("/status/succeeded", "0"),
           field("/status/failed", "0"), timeout.empty() ? "<none>" : timeout + "s"});
    } else {
      table.headers.push_back("QUEUE");
      table.rows[0].push_back(field("/spec/queue"));
    }
    print_section(std::cout, "PodGroup", table);
  }

  /// The job's events and its pods' (one field-selected LIST each, bounded by the replicas).
  void print_events(kube::Client& client, const std::string& job, const json& pods,
                    std::chrono::system_clock::time_point now) const {
    std::vector<std::string> names{job};
    for (const auto& pod : pods)
      names.push_back(pod["metadata"].value("name", ""));
    const std::vector<json> events = recent_events(client, ns(), names, kEventsShown);
    Table table{{"TYPE", "REASON", "OBJECT", "AGE", "MESSAGE"}, {}};
    for (const auto& e : events) {
      table.rows.push_back(
          {e.value("type", ""), e.value("reason", ""),
           fmt::format("{}/{}", to_lower(string_at(e, "/involvedObject/kind"_json_pointer)),
                       string_at(e, "/involvedObject/name"_json_pointer)),
           api::human_duration_or_none(api::age_of(event_time(e), now)), e.value("message", "")});
    }
    print_section(std::cout, "Events", table);
  }
};

}  // namespace

void add_get_command(CLI::App& app, const GlobalFlags& flags) {
  auto opts = std::make_shared<GetOptions>();
  auto* cmd = app.add_subcommand("get", "Show jobs: status, conditions, replicas and events");
  opts->target.add_to(*cmd, JobTarget::Args::OneOrMore);
  cmd->add_option("-o,--output", opts->output,
                  "Output format: json, yaml, name, or wide (the same as the default: the "
                  "description already shows every column)")
      ->check(one_of({"json", "yaml", "name", "wide"}));
  add_examples(*cmd, R"(# One job: status, conditions, pods, PodGroup and events
trainctl get mnist
# As kubectl names it, or as -o name printed it; several at once
trainctl get pytorchjob/bert tfjob.kubeflow.org/mnist
trainctl get mnist -o yaml)");
  run_verb(*cmd, opts, flags);
}

}  // namespace trainctl::cli
