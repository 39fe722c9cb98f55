// trainctl list: the TFJobs, PyTorchJobs and MPIJobs of a namespace (or all), one line each.
#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <stop_token>
#include <tuple>

#include "admission_state.h"
#include "api/status.h"
#include "api/well_known.h"
#include "commands.h"
#include "docs.h"
#include "error.h"
#include "job_lookup.h"
#include "kube/cache/watcher.h"
#include "printer.h"
#include "text.h"
#include "yaml_json.h"

namespace trainctl::cli {
namespace {

using nlohmann::json;

std::string meta_field(const json& object, const char* field) {
  return object.value("metadata", json::object()).value(field, "");
}

/// The distinct nodes of each job's pods, keyed by namespace and job name, from one LIST.
using NodesByJob = std::map<std::pair<std::string, std::string>, std::set<std::string>>;

NodesByJob nodes_by_job(kube::Client& client, std::string_view ns) {
  NodesByJob nodes;
  const json pods = client.list_all(kube::resources::pods(), ns,
                                    {.label_selector = std::string(api::labels::job_name)});
  for (const auto& pod : pods.value("items", json::array())) {
    const std::string node = pod.value("spec", json::object()).value("nodeName", "");
    const json& labels = pod["metadata"].value("labels", json::object());
    if (node.empty() || !labels.contains(api::labels::job_name))
      continue;
    nodes[{meta_field(pod, "namespace"), labels[api::labels::job_name].get<std::string>()}].insert(
        node);
  }
  return nodes;
}

struct ListOptions {
  bool all_namespaces = false;
  std::string selector;
  std::string kind_flag;
  std::string queue;
  std::string status;
  std::string output;
  bool watch = false;

  Connection connection;
  std::string namespace_;  // "" with -A
  std::optional<api::JobKind> kind;
  OutputFormat format = OutputFormat::Table;

  void Complete(const GlobalFlags& flags) {
    connection = Connection(flags);
    namespace_ = all_namespaces ? "" : connection.namespace_();
    format = parse_output_format(output);
    if (!kind_flag.empty())
      kind = parse_kind_flag(kind_flag);
  }

  void Validate() const {
    static constexpr std::string_view kStatuses[] = {"Pending", "Queued",     "Created",
                                                     "Running", "Restarting", "Succeeded",
                                                     "Failed",  "Suspended"};
    if (!status.empty() &&
        std::none_of(std::begin(kStatuses), std::end(kStatuses),
                     [this](std::string_view s) { return to_lower(s) == to_lower(status); })) {
      throw Error(ErrorKind::Usage, fmt::format("unknown --status {:?}: allowed are {}", status,
                                                fmt::join(kStatuses, ", ")));
    }
  }

  bool selected(const json& job, const GangsByJob& groups) const {
    if (!queue.empty() && queue_of(job, groups) != queue)
      return false;
    return status.empty() ||
           to_lower(api::display_status(job, gang_of(groups, job))) == to_lower(status);
  }

  /// The job's queue, else the one its PodGroup was put in (Volcano's default queue).
  static std::string queue_of(const json& job, const GangsByJob& groups) {
    const std::string queue_name = api::job_queue(job);
    return queue_name.empty() ? string_at(gang_of(groups, job), "/spec/queue"_json_pointer)
                              : queue_name;
  }

  void Run() {
    kube::Client& client = connection.client();
    if (watch) {
      Watch(client);
      return;
    }
    print(client, list_jobs(client, namespace_, selector, kind));
  }

  /// Prints the jobs as -o asks, leaving out those --queue and --status do not select.
  void print(kube::Client& client, std::vector<FoundJob> jobs) const {
    const GangsByJob groups = jobs.empty() ? GangsByJob{} : gangs_by_job(client, namespace_);
    std::erase_if(jobs, [&](const FoundJob& j) { return !selected(j.object, groups); });

    if (format == OutputFormat::Json || format == OutputFormat::Yaml) {
      json list = {{"apiVersion", "v1"},
                   {"kind", "List"},
                   {"metadata", {{"resourceVersion", ""}}},
                   {"items", json::array()}};
      for (const auto& j : jobs)
        list["items"].push_back(j.object);
      print_document(std::cout, list, format);
      return;
    }
    if (jobs.empty()) {
      std::cerr << (all_namespaces ? std::string("No jobs found.")
                                   : fmt::format("No jobs found in {} namespace.", namespace_))
                << '\n';
      return;
    }
    if (format == OutputFormat::Name) {
      for (const auto& j : jobs)
        print_name(std::cout, j.object, api::kind_resource_name(j.kind));
      return;
    }
    print_table(std::cout, table(client, jobs, groups));
  }

  /// -w, as kubectl get -w: the jobs as they are, then one more row (or document, or name) each
  /// time a selected job changes, until interrupted. The table comes from the watchers' own LISTs,
  /// so no change between the table and the watch is lost.
  void Watch(kube::Client& client) {
    std::mutex mu;
    std::condition_variable_any ended;
    bool live = false;  // the table is out: print each change from now on
    std::vector<std::unique_ptr<kube::cache::Watcher>> watchers;  // the job kinds'
    // The jobs' gangs decide Queued; they are watched too (each PodGroup type the cluster
    // serves), so a change reads them from the caches, and an admitted gang prints its job's new
    // row.
    std::vector<std::unique_ptr<kube::cache::Watcher>> gangs;  // gang_resources()' order
    const auto groups_now = [&] {
      GangsByJob groups;
      for (const auto& g : gangs) {
        for (auto& group : g->informer().list()) {
          group["apiVersion"] = g->informer().resource().api_version();
          std::pair key{meta_field(group, "namespace"), meta_field(group, "name")};
          groups.emplace(std::move(key), std::move(group));  // Volcano's first, as gangs_by_job
        }
      }
      return groups;
    };
    auto changed = [&](api::JobKind k, const json& object) {
      std::lock_guard lock(mu);
      if (!live)
        return;
      const GangsByJob groups = groups_now();
      if (selected(object, groups))
        print_change(client, {k, object}, groups);
    };
    auto gang_changed = [&](const json& group) {
      for (const auto& w : watchers) {
        if (auto job = w->informer().get(kube::cache::object_key(group)))
          changed(*api::job_kind_from_name(w->informer().resource().kind), *job);
      }
    };
    const auto stop_on_any_error = [](const Error&) { return true; };
    for (const auto& info : api::job_kinds()) {
      if (kind && *kind != info.kind)
        continue;
      const kube::Resource resource = kube::resources::job(info.kind);
      if (!kind && !client.serves(resource))
        continue;  // the cluster does not serve this kind: nothing of it to watch
      watchers.push_back(std::make_unique<kube::cache::Watcher>(
          client,
          kube::cache::InformerOptions{
              .resource = resource, .namespace_ = namespace_, .label_selector = selector},
          kube::cache::EventHandlers{
              .on_add = [&changed, k = info.kind](const json& o) { changed(k, o); },
              .on_modify = [&changed, k = info.kind](const json& o) { changed(k, o); },
              .on_delete = [&changed, k = info.kind](const json& o) { changed(k, o); }},
          stop_on_any_error));
      watchers.back()->start();
    }
    for (const kube::Resource& resource : gang_resources()) {
      if (watchers.empty() || !client.serves(resource))
        continue;
      gangs.push_back(std::make_unique<kube::cache::Watcher>(
          client, kube::cache::InformerOptions{.resource = resource, .namespace_ = namespace_},
          // A gang seen after its job (the two watches race) turns the job's row into Queued.
          kube::cache::EventHandlers{
              .on_add = gang_changed,
              .on_modify = [&gang_changed](const json& o) { gang_changed(o); },
              .on_delete = gang_changed},
          stop_on_any_error));
      gangs.back()->start();
    }
    std::unique_lock lock(mu);
    std::vector<FoundJob> jobs;
    for (const auto& w : watchers) {
      const api::JobKind k = *api::job_kind_from_name(w->informer().resource().kind);
      for (auto& object : w->informer().list())
        jobs.push_back({k, std::move(object)});
    }
    sort_jobs(jobs);
    print(client, std::move(jobs));
    std::cout << std::flush;
    live = true;
    using WakeUp = std::stop_callback<std::function<void()>>;
    std::vector<std::unique_ptr<WakeUp>> wake;
    std::vector<kube::cache::Watcher*> all;  // any of them stopping ends the watch
    for (const auto* list : {&watchers, &gangs}) {
      for (const auto& w : *list)
        all.push_back(w.get());
    }
    for (const auto* w : all)
      wake.push_back(std::make_unique<WakeUp>(w->stopped(), [&ended] { ended.notify_all(); }));
    ended.wait(lock, [&] {
      return std::any_of(all.begin(), all.end(),
                         [](const auto* w) { return w->stopped().stop_requested(); });
    });
    lock.unlock();
    for (auto* w : all)
      w->rethrow();
  }

  /// One change under -w: a table row without the headers, or the object as -o asks.
  void print_change(kube::Client& client, const FoundJob& job, const GangsByJob& groups) const {
    if (format == OutputFormat::Json || format == OutputFormat::Yaml)
      print_document(std::cout, job.object, format);
    else if (format == OutputFormat::Name)
      print_name(std::cout, job.object, api::kind_resource_name(job.kind));
    else
      print_rows(std::cout, table(client, {job}, groups));
    std::cout << std::flush;
  }

  Table table(kube::Client& client, const std::vector<FoundJob>& jobs,
              const GangsByJob& groups) const {
    const bool wide = format == OutputFormat::Wide;
    const NodesByJob nodes = wide ? nodes_by_job(client, namespace_) : NodesByJob{};
    Table t;
    if (all_namespaces)
      t.headers.push_back("NAMESPACE");
    for (const char* h : {"NAME", "KIND", "STATUS", "REPLICAS", "QUEUE", "AGE", "DURATION"})
      t.headers.push_back(h);
    if (wide) {
      t.headers.push_back("GPUS");
      t.headers.push_back("NODES");
    }
    const auto now = std::chrono::system_clock::now();
    for (const auto& j : jobs) {
      const json& o = j.object;
      std::vector<std::string> row;
      if (all_namespaces)
        row.push_back(meta_field(o, "namespace"));
      const std::string queue_name = queue_of(o, groups);
      row.insert(row.end(), {meta_field(o, "name"), std::string(api::job_kind_info(j.kind).name),
                             api::display_status(o, gang_of(groups, o)), api::replicas_column(o),
                             queue_name.empty() ? "<none>" : queue_name,
                             api::human_duration_or_none(api::age_of(
                                 o["metadata"].value("creationTimestamp", json()), now)),
                             api::human_duration_or_none(api::job_duration(o, now))});
      if (wide) {
        row.push_back(std::to_string(api::job_gpus(o)));
        const auto it = nodes.find({meta_field(o, "namespace"), meta_field(o, "name")});
        row.push_back(it == nodes.end() ? "<none>" : fmt::format("{}", fmt::join(it->second, ",")));
      }
      t.rows.push_back(std::move(row));
    }
    return t;
  }
};

}  // namespace

void add_list_command(CLI::App& app, const GlobalFlags& flags) {
  auto opts = std::make_shared<ListOptions>();
  auto* cmd = app.add_subcommand("list", "List training jobs (TFJob, PyTorchJob, MPIJob)");
  cmd->alias("ls");
  cmd->add_flag("-A,--all-namespaces", opts->all_namespaces, "List jobs in every namespace");
  cmd->add_option("-l,--selector", opts->selector, "Label selector, e.g. team=a,app!=x");
  cmd->add_option("--kind", opts->kind_flag, "Only this kind: tfjob, pytorchjob, mpijob")
      ->check(one_of({"tfjob", "pytorchjob", "mpijob"}));
  cmd->add_option("--queue", opts->queue, "Only jobs in this queue")
      ->check(completes(ValueSource::Queues));
  cmd->add_option("--status", opts->status,
                  "Only jobs with this status: Pending, Queued (its gang waits for admission), "
                  "Created, Running, Restarting, Succeeded, Failed, Suspended")
      ->check(one_of({"Pending", "Queued", "Created", "Running", "Restarting", "Succeeded",
                      "Failed", "Suspended"}));
  cmd->add_option("-o,--output", opts->output, "Output format: wide, json, yaml or name")
      ->check(one_of({"wide", "json", "yaml", "name"}));
  cmd->add_flag("-w,--watch", opts->watch,
                "After listing, print the job again each time one changes (as kubectl get -w), "
                "until interrupted");
  add_examples(*cmd, R"(# The jobs of the current namespace, then of all, with GPUs and nodes
trainctl list
trainctl list -A -o wide
# Only failed PyTorchJobs of team a
trainctl list --kind pytorchjob --status Failed -l team=a
# Watch the jobs change, as kubectl get -w (Ctrl-C ends it)
trainctl list -w)");
  run_verb(*cmd, opts, flags);
}

}  // namespace trainctl::cli
