#pragma once

// jemalloc's options for the processes that allocate through it (ARCHITECTURE.md "Memory"): the
// controller and the sandbox, which preload Debian's libjemalloc.so.2 (jemalloc_preload.h), and
// the benchmarks, which link it in (malloc_conf.cc).
//   thp:always           its extents are advised as transparent huge pages (where the kernel
//                        does THP on madvise, Debian's default): a first touch of 2 MiB costs
//                        about what one of 4 KiB does. A controller's admission pass over
//                        10,000 gangs touched 4,316 new pages (~45 ms of 126 on a virtual
//                        machine at ~10 us a fault); with this, 5.
//   metadata_thp:disabled  jemalloc's own metadata stays in small pages.
//   narenas:1            one arena (each thread still caches per size class): with the default
//                        four per CPU the controller's peak RSS with 8,000 pods cached was
//                        116 MiB, with one 94 MiB.
//   dirty_decay_ms:1000  freed pages go back to the system after ~1 s, not 10: 86 MiB.

namespace trainctl {

inline constexpr const char* kJemallocOptions =
    "thp:always,metadata_thp:disabled,narenas:1,dirty_decay_ms:1000";

}  // namespace trainctl
