#pragma once

// Resource lists (cpu, memory, nvidia.com/gpu, ...) as the scheduler adds them up: what a
// container or pod requests, what a node offers, what a queue may hold.

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace trainctl::api {

/// A resource list in thousandths of each resource's unit: {"cpu": 1500} is 1.5 cores.
///
/// The subset of std::map<std::string, std::int64_t>'s interface the tree uses, over one vector
/// kept in name order: a list names a handful of resources, and admission and the sandbox's
/// scheduler make, copy, add and compare millions of them (a tree node per resource made a pass
/// over 10,000 gangs spend a quarter of its time in the allocator). Unlike std::map's, an
/// insertion moves the entries after it: references and iterators into a list do not survive one.
class ResourceList {
 public:
  using value_type = std::pair<std::string, std::int64_t>;
  using iterator = std::vector<value_type>::iterator;
  using const_iterator = std::vector<value_type>::const_iterator;

  ResourceList() = default;
  /// Of two entries of one name the first counts, as in a std::map made from the same list.
  ResourceList(std::initializer_list<value_type> entries) {
    for (const auto& [name, value] : entries)
      try_emplace(name, value);
  }

  iterator begin() { return items_.begin(); }
  iterator end() { return items_.end(); }
  const_iterator begin() const { return items_.begin(); }
  const_iterator end() const { return items_.end(); }
  std::size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  void clear() { items_.clear(); }

  /// A scan for an equal name: a list names a handful of resources, mostly of different
  /// lengths, and equality looks at the length first (a binary search compared the characters).
  iterator find(std::string_view name) {
    return std::find_if(items_.begin(), items_.end(),
                        [&](const value_type& entry) { return entry.first == name; });
  }
  const_iterator find(std::string_view name) const {
    return const_cast<ResourceList&>(*this).find(name);
  }
  bool contains(std::string_view name) const { return find(name) != end(); }
  std::size_t count(std::string_view name) const { return contains(name) ? 1 : 0; }

  /// The amount of `name`, added as 0 when absent.
  std::int64_t& operator[](std::string_view name) { return try_emplace(name, 0).first->second; }
  const std::int64_t& at(std::string_view name) const {
    const auto it = find(name);
    if (it == end())
      throw std::out_of_range("ResourceList::at: no resource " + std::string(name));
    return it->second;
  }
  std::int64_t& at(std::string_view name) {
    return const_cast<std::int64_t&>(std::as_const(*this).at(name));
  }

  /// Adds `name` with `value` unless the list has it; the entry and whether it was added.
  std::pair<iterator, bool> try_emplace(std::string_view name, std::int64_t value) {
    if (items_.empty() || items_.back().first < name) {  // lists are mostly made in name order
      if (items_.empty())
        items_.reserve(4);  // cpu, memory, pods and a GPU, typically
      items_.emplace_back(std::string(name), value);
      return {std::prev(items_.end()), true};
    }
    const auto it = lower_bound(name);
    if (it != items_.end() && it->first == name)
      return {it, false};
    return {items_.emplace(it, std::string(name), value), true};
  }
  std::pair<iterator, bool> emplace(std::string_view name, std::int64_t value) {
    return try_emplace(name, value);
  }
  std::size_t erase(std::string_view name) {
    const auto it = find(name);
    if (it == end())
      return 0;
    items_.erase(it);
    return 1;
  }
  iterator erase(const_iterator at) { return items_.erase(at); }
  template <class Predicate>
  friend std::size_t erase_if(ResourceList& list, Predicate predicate) {
    return std::erase_if(list.items_, predicate);
  }

  bool operator==(const ResourceList&) const = default;

 private:
  iterator lower_bound(std::string_view name) {
    return std::lower_bound(
        items_.begin(), items_.end(), name,
        [](const value_type& entry, std::string_view n) { return entry.first < n; });
  }

  std::vector<value_type> items_;  // in name order, names unique
};

/// Adds `more` into `into`, resource by resource.
void add(ResourceList& into, const ResourceList& more);

/// The amount of `resource` in `list`, 0 when it is absent.
std::int64_t amount(const ResourceList& list, const std::string& resource);

/// A `{name: quantity}` object (requests, allocatable, capability) as a ResourceList; anything
/// else is empty. Throws Error(Invalid) for a quantity that does not parse.
ResourceList parse_resource_list(const nlohmann::json& object);

/// A ResourceList as a `{name: quantity}` object, quantities written by format_quantity.
nlohmann::json resource_list_json(const ResourceList& list);

/// Whether the API server lets a container request less of `name` than its limit: native
/// resources (no domain, or a kubernetes.io one) but hugepages (Kubernetes' IsOvercommitAllowed).
/// For the others (nvidia.com/gpu and every extended resource) a request needs an equal limit.
bool overcommit_allowed(std::string_view name);
/// Whether `name` is an extended resource (nvidia.com/gpu, example.com/foo: a domain outside
/// kubernetes.io): counted in whole units only (Kubernetes' IsExtendedResourceName).
bool is_extended_resource(std::string_view name);

/// Whether `name` may name an environment variable: [-._a-zA-Z][-._a-zA-Z0-9]* (the API server
/// refuses a container with any other).
bool is_env_var_name(std::string_view name);

/// A container's requests, defaulted from its limits per resource as the API server does.
ResourceList container_requests(const nlohmann::json& container);

/// What a pod holds on its node, as resourcehelper.PodRequests computes it: app containers and
/// native sidecars together, or the largest init container plus the sidecars started before it,
/// whichever is more; plus the pod overhead.
ResourceList pod_requests(const nlohmann::json& pod_spec);

}  // namespace trainctl::api
