// jemalloc's options for every process that links trainctl_malloc (the trainctl binary and the
// benchmarks, which measure its code as it runs there): jemalloc reads this symbol when it
// starts, before main; MALLOC_CONF in the environment overrides it option by option.
//   thp:always           its extents are advised as transparent huge pages (where the kernel
//                        does THP on madvise, Debian's default): a first touch of 2 MiB costs
//                        about what one of 4 KiB does. A controller's admission pass over
//                        10,000 gangs touched 4,316 new pages (~45 ms of 126 on a virtual
//                        machine at ~10 us a fault); with this, 5.
//   metadata_thp:disabled  jemalloc's own metadata stays in small pages: a command that
//                        allocates little would otherwise zero a huge page for it.
//   narenas:1            one arena (each thread still caches per size class): with the default
//                        four per CPU the controller's peak RSS with 8,000 pods cached was
//                        116 MiB, with one 94 MiB.
//   dirty_decay_ms:1000  freed pages go back to the system after ~1 s, not 10: 86 MiB.
// ARCHITECTURE.md "Memory" has the measurements.
extern "C" {
// NOLINTNEXTLINE: the name and type are jemalloc's.
const char* malloc_conf = "thp:always,metadata_thp:disabled,narenas:1,dirty_decay_ms:1000";
}
