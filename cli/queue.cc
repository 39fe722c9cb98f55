// trainctl queue create | list | get | update | open | close | delete: Volcano Queues
// (scheduling.volcano.sh/v1beta1, cluster-scoped), the quotas gangs are admitted against.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <iostream>

#include "admission_state.h"
#include "api/quantity.h"
#include "api/status.h"
#include "commands.h"
#include "docs.h"
#include "error.h"
#include "json_access.h"
#include "printer.h"
#include "yaml_json.h"

namespace trainctl::cli {
namespace {

using nlohmann::json;

constexpr std::string_view kQueueResource = "queue.scheduling.volcano.sh";
constexpr std::string_view kDefaultQueue = "default";

/// A queue's state: status.state, which Volcano's queue controller keeps; a queue it has not seen
/// yet is Open.
std::string queue_state(const json& queue) {
  const std::string state = string_at(queue, "/status/state"_json_pointer);
  return state.empty() ? "Open" : state;
}

int status_count(const json& queue, const char* field) {
  const json& v = queue.value("status", json::object()).value(field, json(0));
  return v.is_number_integer() ? v.get<int>() : 0;
}

/// `cpu=64,memory=512Gi,nvidia.com/gpu=16`, or <none>.
std::string format_resources(const json& list) {
  if (!list.is_object() || list.empty())
    return "<none>";
  std::vector<std::string> parts;
  for (auto it = list.begin(); it != list.end(); ++it)
    parts.push_back(
        fmt::format("{}={}", it.key(), it->is_string() ? it->get<std::string>() : it->dump()));
  return fmt::format("{}", fmt::join(parts, ","));
}

Table queue_table(const std::vector<json>& queues, bool wide) {
  Table t{{"NAME", "STATE", "WEIGHT", "CAPABILITY", "ALLOCATED", "PENDING", "RUNNING", "AGE"}, {}};
  if (wide) {
    t.headers.insert(t.headers.end() - 1, {"INQUEUE", "COMPLETED", "RECLAIMABLE"});
  }
  const auto now = std::chrono::system_clock::now();
  for (const auto& q : queues) {
    const json& spec = q.value("spec", json::object());
    std::vector<std::string> row = {
        string_at(q, "/metadata/name"_json_pointer),
        queue_state(q),
        spec.contains("weight") ? spec["weight"].dump() : "<none>",
        format_resources(spec.value("capability", json())),
        format_resources(q.value("status", json::object()).value("allocated", json())),
        std::to_string(status_count(q, "pending")),
        std::to_string(status_count(q, "running"))};
    if (wide) {
      row.push_back(std::to_string(status_count(q, "inqueue")));
      row.push_back(std::to_string(status_count(q, "completed")));
      row.push_back(spec.contains("reclaimable") ? spec["reclaimable"].dump() : "<none>");
    }
    row.push_back(api::human_duration_or_none(
        api::age_of(q["metadata"].value("creationTimestamp", json()), now)));
    t.rows.push_back(std::move(row));
  }
  return t;
}

/// Prints `queue.scheduling.volcano.sh/NAME VERB`, or the object in the -o format.
void report(const json& queue, std::string_view verb, OutputFormat format) {
  if (format == OutputFormat::Json || format == OutputFormat::Yaml) {
    print_document(std::cout, queue, format);
  } else if (format == OutputFormat::Name) {
    print_name(std::cout, queue, kQueueResource);
  } else {
    std::cout << fmt::format("{}/{} {}\n", kQueueResource,
                             string_at(queue, "/metadata/name"_json_pointer), verb);
  }
}

/// create and update print what report() prints: a table's -o wide is not one of them.
void check_report_format(std::string_view verb, OutputFormat format) {
  if (format == OutputFormat::Wide)
    throw Error(ErrorKind::Usage, fmt::format("queue {} prints -o json, yaml or name", verb));
}

/// The flags that set a queue's spec, shared by create and update.
struct QueueSpecFlags {
  std::string cpu;
  std::string memory;
  std::string gpu;
  std::string deprecated_gpu;           // --gpu, the old spelling of --gpus
  std::vector<std::string> capability;  // res=q, or res- to remove it (update)
  int weight = 1;
  bool reclaimable = true;
  CLI::Option* weight_option = nullptr;
  CLI::Option* reclaimable_option = nullptr;

  void add_to(CLI::App& cmd, bool allow_removal) {
    cmd.add_option("--cpu", cpu,
                   "CPU the queue's jobs may hold in total (capability.cpu), e.g. 64");
    cmd.add_option("--memory", memory,
                   "Memory the queue's jobs may hold in total (capability.memory), e.g. 512Gi");
    cmd.add_option("--gpus", gpu,
                   "GPUs the queue's jobs may hold in total (capability[nvidia.com/gpu]), "
                   "spelled as submit's --gpus");
    cmd.add_option("--gpu", deprecated_gpu, "Deprecated: use --gpus")->group("");
    cmd.add_option("--capability", capability,
                   allow_removal ? "Any resource limit as RESOURCE=QUANTITY (repeatable), e.g. "
                                   "amd.com/gpu=8; RESOURCE- removes a limit"
                                 : "Any resource limit as RESOURCE=QUANTITY (repeatable), e.g. "
                                   "amd.com/gpu=8");
    weight_option = cmd.add_option(
        "--weight", weight,
        "The queue's share of the cluster relative to other queues: under contention the "
        "builtin admission, like Volcano's proportion plugin, splits what the queues ask for by "
        "weight");
    reclaimable_option =
        cmd.add_flag("--reclaimable,!--no-reclaimable", reclaimable,
                     "Whether other queues may reclaim resources this queue holds beyond its share "
                     "(default: reclaimable)");
  }

  /// Takes the deprecated --gpu as --gpus, with a warning.
  void complete() {
    if (deprecated_gpu.empty())
      return;
    std::cerr << "trainctl: warning: --gpu is deprecated, use --gpus\n";
    if (gpu.empty())
      gpu = deprecated_gpu;
  }

  /// The capability changes the flags ask for: quantities checked, `null` for a removal.
  json capability_changes(bool allow_removal) const {
    json changes = json::object();
    const auto set = [&changes](const std::string& resource, const std::string& quantity,
                                std::string_view flag) {
      try {
        if (api::parse_quantity_milli(quantity) < 0)
          throw Error(ErrorKind::Usage, "must not be negative");
      } catch (const Error& e) {
        throw Error(ErrorKind::Usage,
                    fmt::format("invalid {} {:?}: {}", flag, quantity, e.message()));
      }
      changes[resource] = quantity;
    };
    if (!cpu.empty())
      set("cpu", cpu, "--cpu");
    if (!memory.empty())
      set("memory", memory, "--memory");
    if (!gpu.empty()) {
      set("nvidia.com/gpu", gpu, "--gpus");
      if (api::parse_quantity_milli(gpu) % 1000 != 0)
        throw Error(ErrorKind::Usage, fmt::format("invalid --gpus {:?}: GPUs are whole", gpu));
    }
    for (const auto& entry : capability) {
      const auto eq = entry.find('=');
      if (eq == std::string::npos && allow_removal && entry.size() > 1 && entry.back() == '-') {
        changes[entry.substr(0, entry.size() - 1)] = nullptr;
        continue;
      }
      if (eq == std::string::npos || eq == 0)
        throw Error(ErrorKind::Usage,
                    fmt::format("invalid --capability {:?}: use RESOURCE=QUANTITY{}", entry,
                                allow_removal ? " or RESOURCE-" : ""));
      set(entry.substr(0, eq), entry.substr(eq + 1), "--capability");
    }
    return changes;
  }

  void validate() const {
    if (weight < 1)
      throw Error(ErrorKind::Usage, fmt::format("invalid --weight {}: must be at least 1", weight));
  }
};

struct QueueCreateOptions : ConnectedOutput {
  std::string name;
  QueueSpecFlags spec;
  bool dry_run = false;

  void Complete(const GlobalFlags& flags) {
    ConnectedOutput::Complete(flags);
    spec.complete();
  }
  void Validate() const {
    spec.validate();
    check_report_format("create", format);
  }

  void Run() {
    json queue = {{"apiVersion", kube::resources::queues().api_version()},
                  {"kind", "Queue"},
                  {"metadata", {{"name", name}}},
                  {"spec",
                   {{"weight", spec.weight},
                    {"reclaimable", spec.reclaimable},
                    {"capability", spec.capability_changes(false)}}}};
    if (!dry_run)
      queue = connection.client().create(kube::resources::queues(), "", queue);
    report(queue, dry_run ? "created (dry run)" : "created", format);
  }
};

struct QueueUpdateOptions : ConnectedOutput {
  std::string name;
  QueueSpecFlags spec;

  void Complete(const GlobalFlags& flags) {
    ConnectedOutput::Complete(flags);
    spec.complete();
  }

  void Validate() const {
    spec.validate();
    check_report_format("update", format);
    if (patch().empty()) {
      throw Error(ErrorKind::Usage,
                  "update needs at least one of --cpu, --memory, --gpus, --capability, --weight, "
                  "--reclaimable/--no-reclaimable");
    }
  }

  /// A merge patch of the spec fields the flags name; removed capabilities become null.
  json patch() const {
    json spec_patch = json::object();
    const json capability = spec.capability_changes(true);
    if (!capability.empty())
      spec_patch["capability"] = capability;
    if (spec.weight_option->count() > 0)
      spec_patch["weight"] = spec.weight;
    if (spec.reclaimable_option->count() > 0)
      spec_patch["reclaimable"] = spec.reclaimable;
    return spec_patch.empty() ? json::object() : json{{"spec", spec_patch}};
  }

  void Run() {
    const json queue = connection.client().patch(kube::resources::queues(), "", name,
                                                 kube::PatchType::Merge, patch());
    report(queue, "configured", format);
  }
};

struct QueueListOptions : ConnectedOutput {
  void Run() {
    kube::Client& client = connection.client();
    json list;
    try {
      list = client.list_all(kube::resources::queues(), "");
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::NotFound)
        throw;
      client.require_served(kube::resources::queues());  // says `trainctl install` when not
      throw;
    }
    const std::vector<json> queues = list.value("items", json::array());
    if (format == OutputFormat::Json || format == OutputFormat::Yaml) {
      print_document(std::cout,
                     {{"apiVersion", "v1"},
                      {"kind", "List"},
                      {"metadata", {{"resourceVersion", ""}}},
                      {"items", queues}},
                     format);
      return;
    }
    if (queues.empty()) {
      std::cerr << "No queues found.\n";
      return;
    }
    if (format == OutputFormat::Name) {
      for (const auto& q : queues)
        print_name(std::cout, q, kQueueResource);
      return;
    }
    print_table(std::cout, queue_table(queues, format == OutputFormat::Wide));
  }
};

struct QueueGetOptions : ConnectedOutput {
  std::string name;

  void Run() {
    const json queue = connection.client().get(kube::resources::queues(), "", name);
    if (format == OutputFormat::Json || format == OutputFormat::Yaml) {
      print_document(std::cout, queue, format);
    } else if (format == OutputFormat::Name) {
      print_name(std::cout, queue, kQueueResource);
    } else {
      print_table(std::cout, queue_table({queue}, format == OutputFormat::Wide));
      print_admission(std::cout);
    }
  }

  /// The queue's deserved share and its pending gangs with why each waits, as admission sees
  /// them; a note instead when the user may not read what admission reads.
  void print_admission(std::ostream& out) {
    controller::AdmissionView view;
    try {
      view = read_admission_view(connection.client());
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::Forbidden)
        throw;
      out << fmt::format("Pending gangs: not shown ({})\n", e.message());
      return;
    }
    const auto q = std::find_if(view.queues.begin(), view.queues.end(),
                                [&](const controller::QueueUsage& u) { return u.name == name; });
    if (q == view.queues.end())
      return;
    out << fmt::format("Deserved share: {}\n", format_resource_list(nonzero(q->deserved)));
    if (q->pending.empty()) {
      out << "Pending gangs: none\n";
      return;
    }
    out << "Pending gangs, in the order admission tries them:\n";
    for (std::size_t i = 0; i < q->pending.size(); ++i) {
      const controller::PendingGang& g = q->pending[i];
      out << fmt::format("  {}. {} (priority {}): {}\n", i + 1, g.key, g.priority, g.why);
    }
  }
};

/// open and close write status.state through the status subresource, as Volcano's queue
/// controller does when it executes an open or close command. A queue that PodGroups still name
/// (its status counts gangs in any phase) is Closing until none does; either way it admits no
/// new ones.
struct QueueStateOptions {
  std::string name;
  bool open = true;
  Connection connection;

  void Complete(const GlobalFlags& flags) { connection = Connection(flags); }

  void Run() {
    kube::Client& client = connection.client();
    const json queue = client.get(kube::resources::queues(), "", name);
    bool busy = false;
    for (const char* phase : {"pending", "inqueue", "running", "completed", "unknown"})
      busy = busy || status_count(queue, phase) > 0;
    const std::string state = open ? "Open" : busy ? "Closing" : "Closed";
    const json updated = client.patch(kube::resources::queues(), "", name, kube::PatchType::Merge,
                                      {{"status", {{"state", state}}}}, {.subresource = "status"});
    report(updated,
           open                 ? "opened"
           : state == "Closing" ? "closing"
                                : "closed",
           OutputFormat::Table);
  }
};

/// The jobs whose PodGroups name queue `name`, as namespace/name, sorted.
std::vector<std::string> jobs_in_queue(kube::Client& client, const std::string& name) {
  std::vector<std::string> jobs;
  const json groups = client.list_all(kube::resources::podgroups(), "");
  for (const auto& group : groups.value("items", json::array())) {
    if (string_at(group, "/spec/queue"_json_pointer) == name)
      jobs.push_back(fmt::format("{}/{}", namespace_of(group), name_of(group)));
  }
  std::sort(jobs.begin(), jobs.end());
  return jobs;
}

struct QueueDeleteOptions {
  std::string name;
  bool ignore_not_found = false;
  Connection connection;

  void Complete(const GlobalFlags& flags) { connection = Connection(flags); }

  void Validate() const {
    if (name == kDefaultQueue)
      throw Error(ErrorKind::Usage, "the default queue cannot be deleted (Volcano keeps it)");
  }

  /// Volcano deletes only Closed queues, and its queue controller closes a queue only once no
  /// PodGroup names it: no job, admitted or waiting, loses its queue.
  void Run() {
    kube::Client& client = connection.client();
    try {
      const json queue = client.get(kube::resources::queues(), "", name);
      if (const std::string state = queue_state(queue); state != "Closed") {
        throw Error(ErrorKind::Validation,
                    fmt::format("queue {:?} is {}: only Closed queues can be deleted; run "
                                "`trainctl queue close {}` first",
                                name, state, name));
      }
      if (const auto jobs = jobs_in_queue(client, name); !jobs.empty()) {
        throw Error(ErrorKind::Validation,
                    fmt::format("queue {:?} still has jobs in it, which would wait for ever "
                                "without it: {}; delete them first (or `trainctl queue open {}` "
                                "to run them)",
                                name, fmt::join(jobs, ", "), name));
      }
      client.remove(kube::resources::queues(), "", name);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::NotFound || !ignore_not_found)
        throw;
      return;
    }
    std::cout << fmt::format("{} {:?} deleted\n", kQueueResource, name);
  }
};

void add_name(CLI::App& cmd, std::string& name) {
  cmd.add_option("name", name, "The queue's name")
      ->required()
      ->check(completes(ValueSource::Queues));
}

void add_output(CLI::App& cmd, std::string& output, std::vector<std::string> formats) {
  std::string text = "Output format: ";
  for (std::size_t i = 0; i < formats.size(); ++i)
    text += (i == 0 ? "" : i + 1 == formats.size() ? " or " : ", ") + formats[i];
  cmd.add_option("-o,--output", output, text)->check(one_of(formats));
}

}  // namespace

void add_queue_command(CLI::App& app, const GlobalFlags& flags) {
  auto* queue = app.add_subcommand(
      "queue",
      "Manage Volcano queues (scheduling.volcano.sh/v1beta1): the quotas whole gangs are "
      "admitted against");
  queue->require_subcommand(1);

  auto create = std::make_shared<QueueCreateOptions>();
  auto* cmd = queue->add_subcommand(
      "create", "Create a queue with a capability (the resources its jobs may hold)");
  add_examples(*cmd, R"(# A queue for team a: 16 GPUs, 64 CPUs, 512Gi of memory
trainctl queue create team-a --gpus 16 --cpu 64 --memory 512Gi
trainctl queue create team-b --capability amd.com/gpu=8 --dry-run -o yaml)");
  cmd->add_option("name", create->name, "The queue's name")->required();
  create->spec.add_to(*cmd, false);
  cmd->add_flag("--dry-run", create->dry_run, "Print what would be created; send nothing");
  add_output(*cmd, create->output, {"json", "yaml", "name"});
  run_verb(*cmd, create, flags);

  auto list = std::make_shared<QueueListOptions>();
  cmd = queue->add_subcommand(
      "list",
      "List queues: state, weight, capability, what admitted jobs hold, and how many "
      "jobs are pending and running");
  add_examples(*cmd, R"(trainctl queue list
trainctl queue list -o wide)");
  cmd->alias("ls");
  add_output(*cmd, list->output, {"wide", "json", "yaml", "name"});
  run_verb(*cmd, list, flags);

  auto get = std::make_shared<QueueGetOptions>();
  cmd = queue->add_subcommand("get", "Show one queue");
  add_examples(*cmd, R"(trainctl queue get team-a
trainctl queue get team-a -o yaml)");
  add_name(*cmd, get->name);
  add_output(*cmd, get->output, {"wide", "json", "yaml", "name"});
  run_verb(*cmd, get, flags);

  auto update = std::make_shared<QueueUpdateOptions>();
  cmd = queue->add_subcommand("update", "Change a queue's capability, weight or reclaimable flag");
  add_examples(*cmd, R"(# More GPUs, and no CPU limit any more
trainctl queue update team-a --gpus 32 --capability cpu-)");
  add_name(*cmd, update->name);
  update->spec.add_to(*cmd, true);
  add_output(*cmd, update->output, {"json", "yaml", "name"});
  run_verb(*cmd, update, flags);

  for (const bool open : {true, false}) {
    auto state = std::make_shared<QueueStateOptions>();
    state->open = open;
    cmd = queue->add_subcommand(
        open ? "open" : "close",
        open ? "Open a queue: it admits jobs again"
             : "Close a queue: it admits no new jobs; admitted ones run to the end");
    add_examples(*cmd, open ? "trainctl queue open team-a" : "trainctl queue close team-a");
    add_name(*cmd, state->name);
    run_verb(*cmd, state, flags);
  }

  auto remove = std::make_shared<QueueDeleteOptions>();
  cmd = queue->add_subcommand("delete", "Delete a Closed queue no job is in any more");
  add_examples(*cmd, R"(trainctl queue close team-a
trainctl queue delete team-a)");
  add_name(*cmd, remove->name);
  cmd->add_flag("--ignore-not-found", remove->ignore_not_found,
                "Succeed when the queue does not exist");
  run_verb(*cmd, remove, flags);
}

}  // namespace trainctl::cli
