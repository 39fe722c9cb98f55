#pragma once

// The order of gangs across and within queues, as Volcano's priority and proportion plugins
// decide it. Pure: the caller passes the PriorityClasses and queue figures it read.

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "api/resources.h"

namespace trainctl::controller {

/// A PriorityClass name resolved to its value.
struct Priority {
  std::int64_t value = 0;
  /// Why the value is not the class's own ("priority class urgent not found, using 0"); empty
  /// when it is.
  std::string note;
};

/// The cluster's scheduling.k8s.io/v1 PriorityClasses.
class PriorityClasses {
 public:
  explicit PriorityClasses(const std::vector<nlohmann::json>& classes);
  /// `name`'s value; no name: the globalDefault class's value, else 0; an unknown name: 0 and a
  /// note saying so.
  Priority resolve(std::string_view name) const;

 private:
  std::map<std::string, std::int64_t, std::less<>> values_;
  std::int64_t global_default_ = 0;
};

/// What proportion needs to know about one queue.
struct QueueFigures {
  std::string name;
  std::int64_t weight = 1;
  api::ResourceList capability;  // a resource not named is not capped
  api::ResourceList guarantee;
  api::ResourceList request;  // what its admitted gangs hold plus what its pending ones ask
};

/// Each queue's deserved share of `total` (Volcano's proportion plugin): in rounds, what is
/// left is split among the queues still asking by weight; a queue's share is capped by its
/// capability and by its request (a queue that reached either leaves the rounds); rounds end
/// when nothing is left or nothing changes. Finally no share is below the queue's guarantee.
std::map<std::string, api::ResourceList> deserved_shares(const std::vector<QueueFigures>& queues,
                                                         const api::ResourceList& total);

/// How far a queue is into its deserved share: the largest allocated/deserved over the
/// resources (a resource deserved 0 counts 1 once any of it is allocated). Lowest goes first.
double queue_share(const api::ResourceList& allocated, const api::ResourceList& deserved);

}  // namespace trainctl::controller
