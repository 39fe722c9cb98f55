#include "controller/placement.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <unordered_map>

#include "api/quantity.h"
#include "error.h"
#include "json_access.h"

namespace trainctl::controller {
namespace {

using nlohmann::json;

constexpr std::int64_t kNone = std::numeric_limits<std::int64_t>::min();
constexpr std::int64_t kDefaultPods = 110 * 1000;
/// The order pods are sorted in and resources named in messages: these first, then by name.
constexpr std::array<std::string_view, 3> kLeadingResources = {"nvidia.com/gpu", "cpu", "memory"};
/// The pseudo label key standing for the node's name (required affinity's matchFields).
constexpr std::string_view kNodeNameKey = "metadata.name";

/// The label keys a pod's node constraints read.
void selected_keys(const api::NodeSelection& selection, std::set<std::string>& keys) {
  if (selection.node_selector.is_object()) {
    for (auto it = selection.node_selector.begin(); it != selection.node_selector.end(); ++it)
      keys.insert(it.key());
  }
  if (!selection.required_terms.is_array())
    return;
  for (const auto& term : selection.required_terms) {
    const json& expressions = member(term, "matchExpressions");
    if (expressions.is_array()) {
      for (const auto& e : expressions)
        keys.insert(string_member(e, "key"));
    }
    const json& fields = member(term, "matchFields");
    if (fields.is_array() && !fields.empty())
      keys.insert(std::string(kNodeNameKey));
  }
}

/// The nodes alike in the labels pods select on and in their taints, with a max-tree over
/// their free capacity: inner entry i holds, per resource, the most any node below it has free.
struct NodeClass {
  std::vector<std::size_t> members;  // node indices, ascending
  std::size_t leaves = 1;            // a power of two >= members.size()
  std::vector<std::int64_t> tree;    // (2 * leaves) x dimensions
  std::vector<bool> stale;           // inner nodes to pull (NodeCapacity::Impl::settle)
};

}  // namespace

PodDemand pod_demand(std::string name, int first_index, int count, const json& pod_spec) {
  return {.name = std::move(name),
          .first_index = first_index,
          .count = count,
          .requests = api::pod_requests(pod_spec),
          .selection = api::node_selection_of(pod_spec),
          .tolerations = api::tolerations_of(pod_spec)};
}

std::optional<api::ResourceList> allocatable_of(const json& node) {
  try {
    return api::parse_resource_list(member(object_member(node, "status"), "allocatable"));
  } catch (const Error&) {
    return std::nullopt;
  }
}

std::optional<NodeFacts> schedulable_node(const json& node) {
  auto allocatable = allocatable_of(node);
  if (!allocatable)
    return std::nullopt;  // an unreadable allocatable offers nothing
  return schedulable_node(node, std::move(*allocatable));
}

std::optional<NodeFacts> schedulable_node(const json& node, api::ResourceList allocatable) {
  const json& spec = object_member(node, "spec");
  if (spec.value("unschedulable", false))
    return std::nullopt;
  const json* ready = find_condition(object_member(node, "status"), "Ready");
  if (ready == nullptr || string_member(*ready, "status") != "True")
    return std::nullopt;
  NodeFacts facts{.name = name_of(node),
                  .labels = api::node_labels_of(node),
                  .taints = api::taints_of(spec),
                  .free = std::move(allocatable)};
  facts.free.try_emplace(std::string(kPodsResource), kDefaultPods);
  return facts;
}

struct NodeCapacity::Impl {
  /// By name; `free` unused (see `free`). Never changed once built, so copies of a NodeCapacity
  /// (the what-if capacities of an admission pass) share it and copy only the numbers.
  std::shared_ptr<const std::vector<std::shared_ptr<const NodeFacts>>> nodes;
  /// Node index by name (names are views into `nodes`), shared like it: an admission pass finds
  /// the node of every bound pod and reservation.
  std::shared_ptr<const std::unordered_map<std::string_view, std::size_t>> by_name;
  std::vector<std::string> resources;
  std::vector<std::int64_t> scratch;     // take()'s dense amount, kept to spare an allocation each
  std::vector<std::int64_t> free;        // nodes x resources
  std::vector<std::int64_t> total_free;  // per resource, a node's overflow counted against it
  /// total_free by name, made when asked for and dropped by the next change (admission asks
  /// once per gang, and most gangs of a full cluster change nothing).
  mutable std::optional<api::ResourceList> total_free_list;
  std::set<std::string> keys;  // the label keys classes are split by
  std::vector<NodeClass> classes;
  std::vector<std::size_t> class_of, leaf_of;
  /// Nodes taken from (NodeCapacity::take) since the trees were last brought up to date: their
  /// leaves are, their ancestors not yet. An admission pass takes every bound pod's and
  /// reservation's share before it places anything: one pull per ancestor of many changed
  /// leaves (settle) instead of a path to the root per take.
  std::vector<std::size_t> unsettled;

  std::size_t dims() const { return resources.size(); }
  const NodeFacts& node(std::size_t i) const { return *(*nodes)[i]; }
  std::int64_t& at(std::size_t node, std::size_t r) { return free[node * dims() + r]; }
  /// The index of resource `name`, nullopt when no node has it: a scan, since a cluster names a
  /// handful of resources, mostly of different lengths (equality compares lengths first).
  std::optional<std::size_t> resource(std::string_view name) const {
    const auto it = std::find(resources.begin(), resources.end(), name);
    if (it == resources.end())
      return std::nullopt;
    return static_cast<std::size_t>(it - resources.begin());
  }

  void index_resources() {
    // Every node has `pods` (schedulable_node's default): indexed with no node too.
    std::set<std::string> names = {std::string(kPodsResource)};
    for (const auto& n : *nodes)
      for (const auto& [name, value] : n->free)
        names.insert(name);
    for (std::string_view leading : kLeadingResources) {
      resources.emplace_back(leading);
      names.erase(std::string(leading));
    }
    resources.insert(resources.end(), names.begin(), names.end());
    free.assign(nodes->size() * dims(), 0);
    total_free.assign(dims(), 0);
    for (std::size_t i = 0; i < nodes->size(); ++i) {
      for (const auto& [name, value] : node(i).free) {
        const std::size_t r = *resource(name);
        at(i, r) = value;
        total_free[r] += value;
      }
    }
  }

  /// The class key of node `i`: the values of the selected label keys and the taints.
  std::string class_key(std::size_t i) const {
    std::string key;
    for (const auto& k : keys) {
      if (k == kNodeNameKey) {
        key += node(i).name;
      } else if (const auto it = node(i).labels.find(k); it != node(i).labels.end()) {
        key += "=" + it->second;
      }
      key += '\0';
    }
    for (const auto& t : node(i).taints)
      key += t.key + '\1' + t.value + '\1' + t.effect + '\0';
    return key;
  }

  void group() {
    unsettled.clear();  // every tree is built again from `free`
    std::map<std::string, std::size_t> by_key;
    classes.clear();
    class_of.assign(nodes->size(), 0);
    leaf_of.assign(nodes->size(), 0);
    for (std::size_t i = 0; i < nodes->size(); ++i) {
      const auto [it, added] = by_key.emplace(class_key(i), classes.size());
      if (added)
        classes.emplace_back();
      class_of[i] = it->second;
      leaf_of[i] = classes[it->second].members.size();
      classes[it->second].members.push_back(i);
    }
    for (auto& c : classes) {
      while (c.leaves < c.members.size())
        c.leaves *= 2;
      c.tree.assign(2 * c.leaves * dims(), kNone);
      for (std::size_t leaf = 0; leaf < c.members.size(); ++leaf)
        std::copy_n(&free[c.members[leaf] * dims()], dims(), &c.tree[(c.leaves + leaf) * dims()]);
      for (std::size_t i = c.leaves - 1; i >= 1; --i)
        pull(c, i);
    }
  }

  void pull(NodeClass& c, std::size_t i) const {
    for (std::size_t r = 0; r < dims(); ++r)
      c.tree[i * dims() + r] =
          std::max(c.tree[2 * i * dims() + r], c.tree[(2 * i + 1) * dims() + r]);
  }

  /// Takes `amount` (dense) `times` off `node`, its leaf included; its ancestors are pulled now
  /// (`settle_now`) or by the next settle().
  void take(std::size_t node, const std::int64_t* amount, int times, bool settle_now) {
    total_free_list.reset();
    for (std::size_t r = 0; r < dims(); ++r) {
      if (amount[r] == 0)
        continue;
      at(node, r) -= amount[r] * times;
      total_free[r] -= amount[r] * times;
    }
    NodeClass& c = classes[class_of[node]];
    std::size_t i = c.leaves + leaf_of[node];
    std::copy_n(&free[node * dims()], dims(), &c.tree[i * dims()]);
    if (!settle_now) {
      unsettled.push_back(node);
      return;
    }
    for (i /= 2; i >= 1; i /= 2)
      pull(c, i);
  }
  void take(std::size_t node, const std::vector<std::int64_t>& amount, int times) {
    take(node, amount.data(), times, true);
  }

  /// Pulls the ancestors of the unsettled leaves, each once, children before parents.
  void settle() {
    if (unsettled.empty())
      return;
    std::vector<std::size_t> touched;  // classes
    for (const std::size_t node : unsettled) {
      NodeClass& c = classes[class_of[node]];
      if (c.stale.empty()) {
        c.stale.assign(c.leaves, false);
        touched.push_back(class_of[node]);
      }
      for (std::size_t i = (c.leaves + leaf_of[node]) / 2; i >= 1 && !c.stale[i]; i /= 2)
        c.stale[i] = true;  // its ancestors are marked already when it is
    }
    for (const std::size_t k : touched) {
      NodeClass& c = classes[k];
      for (std::size_t i = c.leaves - 1; i >= 1; --i) {
        if (c.stale[i])
          pull(c, i);
      }
      c.stale.clear();
    }
    unsettled.clear();
  }

  /// Requests as a dense vector with one pod added; nullopt when a resource no node has is
  /// requested (`missing` names it).
  std::optional<std::vector<std::int64_t>> dense(const api::ResourceList& requests,
                                                 std::string& missing) const {
    std::vector<std::int64_t> result(dims(), 0);
    for (const auto& [name, value] : requests) {
      if (value <= 0 || name == kPodsResource)
        continue;
      const auto r = resource(name);
      if (!r) {
        missing = name;
        return std::nullopt;
      }
      result[*r] = value;
    }
    result[*resource(kPodsResource)] = 1000;
    return result;
  }

  bool covers(const NodeClass& c, std::size_t i, const std::vector<std::size_t>& active,
              const std::vector<std::int64_t>& need) const {
    return std::all_of(active.begin(), active.end(),
                       [&](std::size_t r) { return c.tree[i * dims() + r] >= need[r]; });
  }

  /// The first member of `c` (by name) whose free capacity covers `need`.
  std::optional<std::size_t> first_fit(const NodeClass& c, std::size_t i,
                                       const std::vector<std::size_t>& active,
                                       const std::vector<std::int64_t>& need) const {
    if (!covers(c, i, active, need))
      return std::nullopt;
    if (i >= c.leaves)
      return c.members[i - c.leaves];
    if (auto left = first_fit(c, 2 * i, active, need))
      return left;
    return first_fit(c, 2 * i + 1, active, need);
  }

  /// The first member of `c` with the most of resource `r` free.
  std::size_t argmax(const NodeClass& c, std::size_t r) const {
    std::size_t i = 1;
    while (i < c.leaves)
      i = c.tree[2 * i * dims() + r] == c.tree[i * dims() + r] ? 2 * i : 2 * i + 1;
    return c.members[i - c.leaves];
  }

  /// Why a node of class `c` cannot take a pod of `demand`, in kube-scheduler's words; empty
  /// when its labels and taints allow it.
  std::string excluded_because(const NodeClass& c, const PodDemand& demand) const {
    const NodeFacts& first = node(c.members.front());
    if (const auto taint = api::untolerated_taint(demand.tolerations, first.taints))
      return fmt::format("node(s) had untolerated taint {{{}: {}}}", taint->key, taint->value);
    if (!api::matches_node(demand.selection, first.name, first.labels))
      return "node(s) didn't match Pod's node affinity/selector";
    return "";
  }

  std::string why_not(const PodDemand& demand, int pod, const std::vector<std::size_t>& eligible,
                      const std::vector<std::int64_t>& need) const {
    const std::string name = fmt::format("{}-{}", demand.name, demand.first_index + pod);
    if (nodes->empty())
      return fmt::format("no node fits pod {}: no node is Ready and schedulable", name);
    if (eligible.empty()) {
      std::map<std::string, std::size_t> reasons;
      for (const auto& c : classes)
        reasons[excluded_because(c, demand)] += c.members.size();
      std::vector<std::string> parts;
      for (const auto& [reason, count] : reasons)
        parts.push_back(fmt::format("{} {}", count, reason));
      return fmt::format("no node fits pod {}: 0/{} nodes are available: {}", name, nodes->size(),
                         fmt::join(parts, ", "));
    }
    for (std::size_t r = 0; r < dims(); ++r) {
      if (need[r] == 0)
        continue;
      std::int64_t most = kNone;
      std::size_t where = 0;
      for (const std::size_t k : eligible) {
        const std::int64_t m = classes[k].tree[dims() + r];
        const std::size_t node = argmax(classes[k], r);
        if (m > most || (m == most && node < where)) {
          most = m;
          where = node;
        }
      }
      if (most >= need[r])
        continue;
      if (resources[r] == kPodsResource)
        return fmt::format("no node fits pod {}: every node it may run on has its most pods", name);
      return fmt::format("no node fits pod {}: needs {} {}, largest free on one node is {} ({})",
                         name, api::format_quantity(resources[r], need[r]), resources[r],
                         api::format_quantity(resources[r], std::max<std::int64_t>(most, 0)),
                         node(where).name);
    }
    std::vector<std::string> parts;
    for (std::size_t r = 0; r < dims(); ++r) {
      if (need[r] > 0 && resources[r] != kPodsResource)
        parts.push_back(
            fmt::format("{} {}", api::format_quantity(resources[r], need[r]), resources[r]));
    }
    return fmt::format("no node fits pod {}: no node has {} free at once", name,
                       fmt::join(parts, ", "));
  }
};

namespace {

std::vector<std::shared_ptr<const NodeFacts>> shared(std::vector<NodeFacts> nodes) {
  std::vector<std::shared_ptr<const NodeFacts>> result;
  result.reserve(nodes.size());
  for (NodeFacts& n : nodes)
    result.push_back(std::make_shared<const NodeFacts>(std::move(n)));
  return result;
}

}  // namespace

NodeCapacity::NodeCapacity(std::vector<NodeFacts> nodes) : NodeCapacity(shared(std::move(nodes))) {}

NodeCapacity::NodeCapacity(std::vector<std::shared_ptr<const NodeFacts>> nodes)
    : impl_(std::make_unique<Impl>()) {
  const auto by_name = [](const auto& a, const auto& b) { return a->name < b->name; };
  if (!std::is_sorted(nodes.begin(), nodes.end(), by_name))  // as an API list returns them
    std::sort(nodes.begin(), nodes.end(), by_name);
  auto by_name_index = std::make_shared<std::unordered_map<std::string_view, std::size_t>>();
  by_name_index->reserve(nodes.size());
  for (std::size_t i = 0; i < nodes.size(); ++i)
    by_name_index->emplace(nodes[i]->name, i);
  impl_->by_name = std::move(by_name_index);
  impl_->nodes =
      std::make_shared<const std::vector<std::shared_ptr<const NodeFacts>>>(std::move(nodes));
  impl_->index_resources();
  impl_->group();
}

NodeCapacity::~NodeCapacity() = default;
NodeCapacity::NodeCapacity(const NodeCapacity& other)
    : impl_(std::make_unique<Impl>(*other.impl_)) {}
NodeCapacity& NodeCapacity::operator=(const NodeCapacity& other) {
  impl_ = std::make_unique<Impl>(*other.impl_);
  return *this;
}

std::size_t NodeCapacity::size() const {
  return impl_->nodes->size();
}

const std::string& NodeCapacity::name(std::size_t node) const {
  return impl_->node(node).name;
}

std::optional<std::size_t> NodeCapacity::find(const std::string& name) const {
  const auto it = impl_->by_name->find(name);
  if (it == impl_->by_name->end())
    return std::nullopt;
  return it->second;
}

api::ResourceList NodeCapacity::free(std::size_t node) const {
  api::ResourceList result;
  for (std::size_t r = 0; r < impl_->dims(); ++r)
    result[impl_->resources[r]] = impl_->at(node, r);
  return result;
}

const api::ResourceList& NodeCapacity::total_free() const {
  if (!impl_->total_free_list) {
    api::ResourceList& result = impl_->total_free_list.emplace();
    for (std::size_t r = 0; r < impl_->dims(); ++r)
      result[impl_->resources[r]] = impl_->total_free[r];
  }
  return *impl_->total_free_list;
}

void NodeCapacity::take(std::size_t node, const api::ResourceList& amount) {
  Impl& m = *impl_;
  m.scratch.assign(m.dims(), 0);
  for (const auto& [name, value] : amount) {
    if (const auto r = m.resource(name))
      m.scratch[*r] = value;
  }
  m.take(node, m.scratch.data(), 1, false);
}

std::optional<GangPlacement> NodeCapacity::place(const std::vector<PodDemand>& demands,
                                                 std::string* why_not, bool commit) {
  Impl& m = *impl_;
  m.settle();
  std::set<std::string> keys = m.keys;
  for (const auto& d : demands)
    selected_keys(d.selection, keys);
  if (keys != m.keys) {  // a constraint on a label no class is split by yet
    m.keys = std::move(keys);
    m.group();
  }

  struct Shape {
    std::size_t demand;
    std::vector<std::int64_t> need;
    std::vector<std::size_t> active;    // resources it requests
    std::vector<std::size_t> eligible;  // classes it may run on
  };
  std::vector<Shape> shapes;
  for (std::size_t i = 0; i < demands.size(); ++i) {
    if (demands[i].count <= 0)
      continue;
    std::string missing;
    auto need = m.dense(demands[i].requests, missing);
    if (!need) {
      if (why_not)
        *why_not =
            fmt::format("no node fits pod {}-{}: needs {} {}, no node has any", demands[i].name,
                        demands[i].first_index,
                        api::format_quantity(missing, demands[i].requests.at(missing)), missing);
      return std::nullopt;
    }
    Shape s{.demand = i, .need = std::move(*need)};
    for (std::size_t r = 0; r < m.dims(); ++r) {
      if (s.need[r] > 0)
        s.active.push_back(r);
    }
    for (std::size_t k = 0; k < m.classes.size(); ++k) {
      if (m.excluded_because(m.classes[k], demands[i]).empty())
        s.eligible.push_back(k);
    }
    shapes.push_back(std::move(s));
  }
  std::stable_sort(shapes.begin(), shapes.end(),
                   [](const Shape& a, const Shape& b) { return a.need > b.need; });

  GangPlacement placement;
  placement.nodes.resize(demands.size());
  struct Taken {
    std::size_t node;
    const std::vector<std::int64_t>* need;
    int pods;
  };
  std::vector<Taken> taken;
  const auto undo = [&] {
    for (auto it = taken.rbegin(); it != taken.rend(); ++it)
      m.take(it->node, *it->need, -it->pods);
  };
  for (const Shape& s : shapes) {
    const PodDemand& demand = demands[s.demand];
    int left = demand.count;
    while (left > 0) {
      std::optional<std::size_t> node;
      for (const std::size_t k : s.eligible) {
        const auto fit = m.first_fit(m.classes[k], 1, s.active, s.need);
        if (fit && (!node || *fit < *node))
          node = fit;
      }
      if (!node) {
        if (why_not)
          *why_not = m.why_not(demand, demand.count - left, s.eligible, s.need);
        undo();
        return std::nullopt;
      }
      std::int64_t room = left;
      for (const std::size_t r : s.active)
        room = std::min(room, m.at(*node, r) / s.need[r]);
      const int pods = static_cast<int>(room);
      m.take(*node, s.need, pods);
      taken.push_back({*node, &s.need, pods});
      placement.nodes[s.demand].emplace_back(*node, pods);
      left -= pods;
    }
  }
  if (!commit)
    undo();
  return placement;
}

}  // namespace trainctl::controller
