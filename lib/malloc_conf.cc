// The benchmarks link jemalloc in (they measure code as it runs in the controller and the
// sandbox): jemalloc reads this symbol when it starts, before main; MALLOC_CONF in the environment
// overrides it option by option.
#include "malloc_conf.h"

extern "C" {
// NOLINTNEXTLINE: the name and type are jemalloc's.
const char* malloc_conf = trainctl::kJemallocOptions;
}
