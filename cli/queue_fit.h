#pragma once

// Whether a job's gang can ever fit its queue: `why` ranks a gang bigger than its queue's
// capability first, and `submit` warns about one before the job waits for ever.

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kube/client.h"

namespace trainctl::cli {

/// One line per resource a gang needs more of than its queue may ever hold:
/// `queue "small" can never admit it: it needs nvidia.com/gpu 16, the queue's capability is 8`.
/// `podgroup` is the job's PodGroup (observed, or as the controller would create it).
std::vector<std::string> capability_shortfalls(const nlohmann::json& queue,
                                               const nlohmann::json& podgroup);

/// A job's queue as submit read it: the object, null when it could not be read (no Volcano CRDs,
/// not allowed, the server unreachable), `missing` when the server says it does not exist.
struct QueueRead {
  nlohmann::json object;
  bool missing = false;
};
/// The queues of `jobs` by name, each read once however many jobs share it.
using Queues = std::map<std::string, QueueRead>;
Queues read_queues(kube::Client& client, const std::vector<nlohmann::json>& jobs);

/// For each of the `jobs` just submitted whose gang is bigger than its queue's capability, whose
/// queue is not Open, or whose queue does not exist (but `default`, which the controller makes),
/// a warning on stderr; nothing for a job whose queue could not be read or is not in `queues`.
void warn_about_queues_too_small(const Queues& queues, const std::vector<nlohmann::json>& jobs);

}  // namespace trainctl::cli
