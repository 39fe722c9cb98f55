// Client benchmarks against a loopback HTTPS server:
//  1. GET latency through kube::Client on a reused connection, against a bare libcurl handle
//     doing the same GET (the reference): the difference is the client's own overhead.
//  2. Requests per second through kube::Client from one thread.
//  3. Watch decode rate for ~4 KB pod events: WatchDecoder against nlohmann::json::parse of the
//     same lines (the floor any JSON-based decoder pays).
#include <curl/curl.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "kube/client.h"
#include "kube/watch.h"
#include "tests/support/https_test_server.h"

using namespace trainctl;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

namespace {

double median_us(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

json pod_of_about_4k(int i) {
  json containers = json::array();
  json env = json::array();
  for (int e = 0; e < 52; ++e) {
    env.push_back({{"name", fmt::format("VAR_{}", e)}, {"value", std::string(40, 'v')}});
  }
  containers.push_back({{"name", "tensorflow"},
                        {"image", "registry.example.com/team/mnist:2026.11"},
                        {"env", env},
                        {"resources", {{"limits", {{"nvidia.com/gpu", "8"}, {"cpu", "32"}}}}}});
  return {{"type", "MODIFIED"},
          {"object",
           {{"apiVersion", "v1"},
            {"kind", "Pod"},
            {"metadata",
             {{"name", fmt::format("mnist-worker-{}", i)},
              {"namespace", "team-a"},
              {"resourceVersion", std::to_string(1000 + i)},
              {"labels",
               {{"training.kubeflow.org/job-name", "mnist"},
                {"training.kubeflow.org/replica-type", "worker"},
                {"training.kubeflow.org/replica-index", std::to_string(i)}}}}},
            {"spec", {{"containers", containers}, {"nodeName", "node-3"}}},
            {"status", {{"phase", "Running"}, {"podIP", "10.0.3.17"}}}}}};
}

size_t discard(char*, size_t size, size_t n, void*) {
  return size * n;
}

}  // namespace

int main() {
  testing::HttpsTestServer server;
  const std::string pod = pod_of_about_4k(0)["object"].dump();
  server.routes().Get("/api/v1/namespaces/default/pods/p",
                      [&](const httplib::Request&, httplib::Response& res) {
                        res.set_content(pod, "application/json");
                      });
  server.start();
  const int n = 2000;

  // Reference: a bare libcurl handle, reused, same TLS settings.
  CURL* curl = curl_easy_init();
  const std::string url = server.url() + "/api/v1/namespaces/default/pods/p";
  curl_blob ca{const_cast<char*>(testing::TestPki::shared().ca.cert_pem.data()),
               testing::TestPki::shared().ca.cert_pem.size(), CURL_BLOB_COPY};
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_CAINFO_BLOB, &ca);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, discard);
  std::vector<double> raw;
  for (int i = 0; i < n; ++i) {
    auto t0 = Clock::now();
    curl_easy_perform(curl);
    raw.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  curl_easy_cleanup(curl);

  kube::Client client(server.rest_config());
  std::vector<double> ours;
  auto start = Clock::now();
  for (int i = 0; i < n; ++i) {
    auto t0 = Clock::now();
    client.get(kube::resources::pods(), "default", "p");
    ours.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();

  const double raw_med = median_us(raw), our_med = median_us(ours);
  fmt::print("GET (4 KB pod, reused TLS connection, {} requests)\n", n);
  fmt::print("  libcurl reference median   {:8.1f} us\n", raw_med);
  fmt::print("  kube::Client median        {:8.1f} us   ratio {:.2f}x\n", our_med,
             our_med / raw_med);
  fmt::print("  client overhead            {:8.1f} us   (target <= 200 us)\n", our_med - raw_med);
  fmt::print("  throughput                 {:8.0f} requests/s (one thread)\n", n / seconds);

  // Watch decoding.
  std::string stream;
  std::vector<std::string> lines;
  const int events = 20000;
  for (int i = 0; i < 64; ++i)
    lines.push_back(pod_of_about_4k(i).dump());
  for (int i = 0; i < events; ++i)
    stream += lines[i % lines.size()] + "\n";
  const double avg_size = static_cast<double>(stream.size()) / events;

  auto t0 = Clock::now();
  size_t parsed = 0;
  for (int i = 0; i < events; ++i)
    parsed += json::parse(lines[i % lines.size()]).size();
  const double ref_s = std::chrono::duration<double>(Clock::now() - t0).count();

  t0 = Clock::now();
  kube::WatchDecoder decoder;
  size_t decoded = 0;
  for (size_t off = 0; off < stream.size(); off += 16384) {
    decoder.feed(std::string_view(stream).substr(off, 16384));  // chunks as curl hands them over
    while (auto e = decoder.next())
      decoded += e->object.size() > 0;
  }
  const double dec_s = std::chrono::duration<double>(Clock::now() - t0).count();
  fmt::print("Watch decode ({} events of {:.0f} bytes, 16 KB chunks, one core)\n", events,
             avg_size);
  fmt::print("  json::parse reference      {:8.0f} events/s\n", events / ref_s);
  fmt::print("  WatchDecoder               {:8.0f} events/s   ratio {:.2f}x   (target >= 20000)\n",
             decoded / dec_s, (decoded / dec_s) / (events / ref_s));
  return parsed > 0 && decoded == static_cast<size_t>(events) ? 0 : 1;
}
