// trainctl top nodes | queues: the cluster as the builtin gang admission sees it, like Arena's
// `arena top node`: per node what is allocatable, requested and reserved for admitted gangs, per
// queue its deserved share, what it holds and the gangs that wait, with why.
#include <fmt/format.h>

#include <iostream>

#include "admission_state.h"
#include "api/quantity.h"
#include "commands.h"
#include "controller/placement.h"
#include "docs.h"
#include "error.h"
#include "printer.h"

namespace trainctl::cli {
namespace {

using controller::AdmissionView;
using nlohmann::json;

/// The resources a top table has a column for; -o wide and -o json show every resource.
constexpr std::string_view kColumns[] = {"nvidia.com/gpu", "cpu", "memory"};

std::string quantity(const api::ResourceList& list, std::string_view resource) {
  return api::format_quantity(resource, api::amount(list, std::string(resource)));
}

/// What is free: allocatable less requested and reserved, each resource never below 0.
api::ResourceList free_of(const controller::NodeUsage& node) {
  api::ResourceList free;
  for (const auto& [name, value] : node.allocatable)
    free[name] = std::max<std::int64_t>(
        0, value - api::amount(node.requested, name) - api::amount(node.reserved, name));
  return free;
}

json node_json(const controller::NodeUsage& node) {
  return {{"name", node.name},
          {"schedulable", node.schedulable},
          {"allocatable", api::resource_list_json(node.allocatable)},
          {"requested", api::resource_list_json(node.requested)},
          {"reserved", api::resource_list_json(node.reserved)},
          {"free", api::resource_list_json(free_of(node))},
          {"jobs", node.jobs}};
}

json queue_json(const controller::QueueUsage& queue) {
  json pending = json::array();
  for (const auto& g : queue.pending)
    pending.push_back(
        {{"podGroup", g.key}, {"priority", g.priority}, {"reason", g.reason}, {"message", g.why}});
  return {{"name", queue.name},
          {"state", queue.state},
          {"weight", queue.weight},
          {"reclaimable", queue.reclaimable},
          {"capability", api::resource_list_json(queue.capability)},
          {"deserved", api::resource_list_json(queue.deserved)},
          {"allocated", api::resource_list_json(queue.allocated)},
          {"podGroups", queue.gangs},
          {"pending", std::move(pending)}};
}

/// `a/b` of a resource for one node: requested+reserved of allocatable.
std::string usage_cell(const controller::NodeUsage& node, std::string_view resource) {
  api::ResourceList used = node.requested;
  api::add(used, node.reserved);
  return fmt::format("{}/{}", quantity(used, resource), quantity(node.allocatable, resource));
}

Table nodes_table(const AdmissionView& view, bool wide) {
  Table t{{"NAME", "STATUS", "GPU(USED/ALLOC)", "CPU(USED/ALLOC)", "MEMORY(USED/ALLOC)",
           "GPU RESERVED", "JOBS"},
          {}};
  if (wide)
    t.headers.insert(t.headers.end() - 1, {"PODS", "REQUESTED", "RESERVED", "FREE"});
  for (const auto& node : view.nodes) {
    std::vector<std::string> row = {node.name, node.schedulable ? "Ready" : "NotSchedulable"};
    for (const std::string_view resource : kColumns)
      row.push_back(usage_cell(node, resource));
    row.push_back(quantity(node.reserved, kColumns[0]));
    if (wide) {
      row.push_back(usage_cell(node, controller::kPodsResource));
      row.push_back(format_resource_list(node.requested));
      row.push_back(format_resource_list(node.reserved));
      row.push_back(format_resource_list(free_of(node)));
    }
    row.push_back(node.jobs.empty() ? "<none>" : fmt::format("{}", fmt::join(node.jobs, ",")));
    t.rows.push_back(std::move(row));
  }
  return t;
}

/// Arena's closing line: how much of the schedulable nodes' GPUs are taken.
std::string gpu_summary(const AdmissionView& view) {
  api::ResourceList used, total;
  for (const auto& node : view.nodes) {
    if (!node.schedulable)
      continue;
    api::add(total, node.allocatable);
    api::add(used, node.requested);
    api::add(used, node.reserved);
  }
  const std::string gpu(kColumns[0]);
  const std::int64_t all = api::amount(total, gpu);
  const std::int64_t taken = api::amount(used, gpu);
  return fmt::format("Used/Allocatable GPUs on schedulable nodes: {}/{} ({}%)\n",
                     api::format_quantity(gpu, taken), api::format_quantity(gpu, all),
                     all == 0 ? 0 : taken * 100 / all);
}

Table queues_table(const AdmissionView& view, bool wide) {
  Table t{
      {"NAME", "STATE", "WEIGHT", "CAPABILITY", "DESERVED", "ALLOCATED", "PENDING", "HEAD OF LINE"},
      {}};
  if (wide)
    t.headers.insert(t.headers.end() - 2, {"RUNNING", "INQUEUE", "RECLAIMABLE"});
  for (const auto& q : view.queues) {
    const auto gangs = [&](const char* phase) {
      const auto it = q.gangs.find(phase);
      return std::to_string(it == q.gangs.end() ? 0 : it->second);
    };
    std::vector<std::string> row = {q.name,
                                    q.state,
                                    std::to_string(q.weight),
                                    format_resource_list(q.capability),
                                    format_resource_list(nonzero(q.deserved)),
                                    format_resource_list(q.allocated)};
    if (wide) {
      row.push_back(gangs("Running"));
      row.push_back(gangs("Inqueue"));
      row.push_back(q.reclaimable ? "true" : "false");
    }
    row.push_back(std::to_string(q.pending.size()));
    row.push_back(q.pending.empty()
                      ? "<none>"
                      : fmt::format("{}: {}", q.pending.front().key, q.pending.front().why));
    t.rows.push_back(std::move(row));
  }
  return t;
}

struct TopOptions : ConnectedOutput {
  bool queues = false;  // top queues, else top nodes

  void Validate() const {
    if (format == OutputFormat::Yaml || format == OutputFormat::Name)
      throw Error(ErrorKind::Usage,
                  fmt::format("top: -o {} is not supported (use wide or json)", output));
  }

  void Run() {
    const AdmissionView view = read_admission_view(connection.client());
    if (format == OutputFormat::Json) {
      json items = json::array();
      if (queues) {
        for (const auto& q : view.queues)
          items.push_back(queue_json(q));
      } else {
        for (const auto& node : view.nodes)
          items.push_back(node_json(node));
      }
      print_document(std::cout, {{queues ? "queues" : "nodes", std::move(items)}}, format);
      return;
    }
    const bool wide = format == OutputFormat::Wide;
    if (queues) {
      print_table(std::cout, queues_table(view, wide));
      return;
    }
    print_table(std::cout, nodes_table(view, wide));
    std::cout << gpu_summary(view);
  }
};

}  // namespace

void add_top_command(CLI::App& app, const GlobalFlags& flags) {
  auto* top =
      app.add_subcommand("top", "Show nodes and queues as the builtin gang admission sees them");
  top->require_subcommand(1);
  for (const bool queues : {false, true}) {
    auto opts = std::make_shared<TopOptions>();
    opts->queues = queues;
    auto* cmd = top->add_subcommand(
        queues ? "queues" : "nodes",
        queues ? "Per queue: capability, deserved share, what admitted jobs hold, pending gangs "
                 "and the head of line with why it waits"
               : "Per node: GPU, CPU and memory requested by pods plus reserved by admitted "
                 "gangs, of what is allocatable, and the jobs holding them");
    add_examples(*cmd, queues ? R"(trainctl top queues
# Running and admitted gangs, and whether the queue lends what it does not use
trainctl top queues -o wide
trainctl top queues -o json)"
                              : R"(trainctl top nodes
# Every resource: requested, reserved, free; and the pod count
trainctl top nodes -o wide
trainctl top nodes -o json)");
    cmd->add_option("-o,--output", opts->output, "Output format: wide or json")
        ->check(one_of({"wide", "json"}));
    run_verb(*cmd, opts, flags);
  }
  // After the verbs: a footer set before would be inherited by them.
  add_examples(*top, R"(# Where GPUs are used, reserved for admitted gangs, and free
trainctl top nodes
# Why each queue's head of line waits
trainctl top queues)");
}

}  // namespace trainctl::cli
