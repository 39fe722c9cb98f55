#include "kube/cache/work_queue.h"

namespace trainctl::kube::cache {

// Compiled once here; every other translation unit uses it through the extern declaration.
template class WorkQueueOf<std::string>;

}  // namespace trainctl::kube::cache
