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

/// The queues of `jobs` by name, each read once however many jobs share it; null for a queue that
/// cannot be read (no such queue, no Volcano CRDs, not allowed): `why` tells those apart later.
using Queues = std::map<std::string, nlohmann::json>;
Queues read_queues(kube::Client& client, const std::vector<nlohmann::json>& jobs);

/// For each of the `jobs` just submitted whose gang is bigger than its queue's capability, or
/// whose queue is not Open, a warning on stderr; nothing for a job whose queue is null or not in
/// `queues`.
void warn_about_queues_too_small(const Queues& queues, const std::vector<nlohmann::json>& jobs);

}  // namespace trainctl::cli
