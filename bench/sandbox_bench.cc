// Sandbox benchmarks, all in one run (numbers, not pass/fail):
//  1. Object writes per second through the whole HTTPS API (kube::Client, several threads),
//     against the same writes straight into the Store (the reference: the API's own cost).
//  2. 100,000 objects held: resident memory, and LIST/GET latency with that many.
//  3. 50 concurrent HTTPS watches, each of which must receive every event of a write burst.
#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <thread>
#include <vector>

#include "bench/bench_support.h"
#include "kube/client.h"
#include "sandbox/sandbox.h"
#include "tests/support/temp_dir.h"

using namespace trainctl;
using bench::Clock;
using bench::seconds_since;
using nlohmann::json;

namespace {

long rss_mib() {
  std::ifstream in("/proc/self/statm");
  long pages = 0, resident = 0;
  in >> pages >> resident;
  return resident * ::sysconf(_SC_PAGESIZE) / (1024 * 1024);
}

json config_map(const std::string& name, int i) {
  return {
      {"apiVersion", "v1"},
      {"kind", "ConfigMap"},
      {"metadata",
       {{"name", name}, {"namespace", "default"}, {"labels", {{"batch", std::to_string(i % 10)}}}}},
      {"data", {{"hostfile", fmt::format("worker-{}.mnist.default.svc slots=8\n", i)}}}};
}

}  // namespace

int main() {
  testing::TempDir dir;
  sandbox::SandboxOptions options;
  options.data_dir = dir.path();
  options.port = 0;
  options.cluster.nodes = 4;
  sandbox::Sandbox sb(options);
  sb.start();
  const kube::Resource cms = kube::resources::configmaps();

  // 1. Writes: the Store alone, then through HTTPS from several client threads.
  const int direct_writes = 20000;
  auto t0 = Clock::now();
  for (int i = 0; i < direct_writes; ++i) {
    sb.store().create("configmaps", config_map(fmt::format("direct-{}", i), i));
  }
  const double direct_rate = direct_writes / seconds_since(t0);

  const int threads = 4, per_thread = 2500;
  std::vector<std::thread> workers;
  t0 = Clock::now();
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      kube::Client client(sb.admin_config());
      for (int i = 0; i < per_thread; ++i) {
        client.create(cms, "default", config_map(fmt::format("api-{}-{}", t, i), i));
      }
    });
  }
  for (auto& w : workers)
    w.join();
  const double api_rate = threads * per_thread / seconds_since(t0);
  fmt::print("Writes (ConfigMap create)\n");
  fmt::print("  Store directly (reference)     {:8.0f} writes/s\n", direct_rate);
  fmt::print(
      "  HTTPS API, {} client threads    {:8.0f} writes/s   ratio {:.2f}x of direct   "
      "(target >= 5000)\n",
      threads, api_rate, api_rate / direct_rate);

  // 2. 100,000 objects held.
  const long rss_before = rss_mib();
  const int held_target = 100000;
  for (int i = direct_writes + threads * per_thread; i < held_target; ++i) {
    sb.store().create("configmaps", config_map(fmt::format("held-{}", i), i));
  }
  kube::Client client(sb.admin_config());
  t0 = Clock::now();
  const json page = client.list(cms, "default", {.label_selector = "batch=3", .limit = 500});
  const double list_ms = seconds_since(t0) * 1000;
  t0 = Clock::now();
  for (int i = 0; i < 200; ++i)
    client.get(cms, "default", fmt::format("held-{}", 50000 + i));
  const double get_us = seconds_since(t0) * 1e6 / 200;
  fmt::print("Holding {} objects (store object count {})\n", held_target,
             sb.store().object_count());
  fmt::print("  resident memory                 {:6d} MiB (was {} MiB at 30,000)\n", rss_mib(),
             rss_before);
  fmt::print("  LIST page of 500 by label       {:8.1f} ms ({} items)\n", list_ms,
             page["items"].size());
  fmt::print("  GET by name                     {:8.1f} us\n", get_us);

  // 3. Fan-out: 50 watches over HTTPS, each must see every event of a burst of writes.
  const int watchers = 50, burst = 2000;
  const std::string from = sb.store().current_resource_version();
  std::atomic<long> delivered{0};
  std::atomic<int> complete{0};
  std::vector<std::thread> watch_threads;
  std::vector<std::stop_source> stops(watchers);
  for (int w = 0; w < watchers; ++w) {
    watch_threads.emplace_back([&, w] {
      kube::Client watch_client(sb.admin_config());
      int seen = 0;
      watch_client.watch(
          cms, "default",
          {.label_selector = "burst=yes",
           .resource_version = from,
           .timeout_seconds = 120,
           .allow_bookmarks = false},
          [&](const kube::WatchEvent&) {
            ++delivered;
            if (++seen == burst) {
              ++complete;
              return false;
            }
            return true;
          },
          stops[w].get_token());
    });
  }
  t0 = Clock::now();
  for (int i = 0; i < burst; ++i) {
    json cm = config_map(fmt::format("burst-{}", i), i);
    cm["metadata"]["labels"]["burst"] = "yes";
    sb.store().create("configmaps", cm);
  }
  const double write_s = seconds_since(t0);
  while (complete.load() < watchers && seconds_since(t0) < 120) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const double fan_s = seconds_since(t0);
  for (auto& s : stops)
    s.request_stop();
  for (auto& t : watch_threads)
    t.join();
  fmt::print("Fan-out: {} HTTPS watches x {} events\n", watchers, burst);
  fmt::print("  writes took                     {:8.2f} s\n", write_s);
  fmt::print(
      "  all watches complete after      {:8.2f} s   ({} of {} complete, {:.0f} events/s "
      "delivered)\n",
      fan_s, complete.load(), watchers, delivered.load() / fan_s);
  sb.stop();
  return complete.load() == watchers ? 0 : 1;
}
