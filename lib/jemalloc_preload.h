#pragma once

// The processes that run long (the controller, the sandbox) allocate through jemalloc, on huge
// pages (ARCHITECTURE.md "Memory"); commands allocate through glibc's malloc. The binary does
// not link jemalloc: set up before main, it cost every command ~1 ms of start-up (a third of an
// offline verb's own time). Those two verbs start again through run_on_jemalloc().

#include <functional>
#include <string>

namespace trainctl {

/// Called by `controller` and `sandbox up` before anything else: unless the process already
/// allocates through jemalloc, executes the binary again, same arguments and process, with
/// Debian's libjemalloc.so.2 (found beside glibc) preloaded and kJemallocOptions in MALLOC_CONF
/// (an environment's MALLOC_CONF after them, so its options still win), under the name it had
/// (ps, top, pkill: "trainctl", not the "exe" of /proc/self/exe). In the process so
/// started, puts LD_PRELOAD and MALLOC_CONF back as they were, so the processes it starts in turn
/// (credential plugins) do not inherit them. Returns without starting again when the binary was
/// built without jemalloc (sanitizers), or with a warning through `warn` when libjemalloc.so.2
/// is not installed or could not be preloaded: the process then runs on glibc's malloc.
void run_on_jemalloc(const std::function<void(const std::string&)>& warn);

}  // namespace trainctl
