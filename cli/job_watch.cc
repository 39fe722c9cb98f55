#include "job_watch.h"

#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>

#include "api/status.h"
#include "error.h"
#include "json_access.h"
#include "replicas.h"

namespace trainctl::cli {

using nlohmann::json;

bool job_finished(const json& job) {
  const std::string status = api::job_status(job);
  return status == "Succeeded" || status == "Failed";
}

bool watch_job(kube::Client& client, const kube::Resource& resource, const std::string& ns,
               const std::string& name,
               std::optional<std::chrono::steady_clock::time_point> deadline,
               const std::function<bool(const json*)>& on_change, std::stop_token stop) {
  std::mutex mu;
  std::condition_variable_any changed;
  bool seen = false;  // on_change has been called
  bool done = false;  // on_change returned false
  auto deliver = [&](const json* job) {
    std::lock_guard lock(mu);
    seen = true;
    if (!done && !on_change(job)) {
      done = true;
      changed.notify_all();
    }
  };
  // LIST by name rather than GET: its resourceVersion is where the watch resumes, so a job
  // created between the two requests is not missed.
  kube::cache::Watcher watcher(client,
                               {.resource = resource,
                                .namespace_ = ns,
                                .field_selector = fmt::format("metadata.name={}", name),
                                .page_size = 0},
                               {.on_add = [&](const json& job) { deliver(&job); },
                                .on_modify = [&](const json& job) { deliver(&job); },
                                .on_delete = [&](const json&) { deliver(nullptr); }},
                               [](const Error&) { return true; });
  watcher.start();
  std::unique_lock lock(mu);
  if (!seen) {  // the LIST found nothing, and the watch has not said otherwise since
    seen = true;
    done = !on_change(nullptr);
  }
  const std::stop_callback wake_on_stop(stop, [&] { changed.notify_all(); });
  const std::stop_callback wake_on_error(watcher.stopped(), [&] { changed.notify_all(); });
  const auto over = [&] {
    return done || stop.stop_requested() || watcher.stopped().stop_requested();
  };
  if (deadline)
    changed.wait_until(lock, *deadline, over);
  else
    changed.wait(lock, over);
  const bool satisfied = done;
  lock.unlock();
  watcher.stop();
  if (!satisfied)
    watcher.rethrow();
  return satisfied;
}

bool wait_until_deleted(kube::Client& client, const kube::Resource& resource, const std::string& ns,
                        const std::string& name, const std::string& uid,
                        std::chrono::steady_clock::time_point deadline) {
  return watch_job(client, resource, ns, name, deadline,
                   [&uid](const json* j) { return j != nullptr && uid_of(*j) == uid; });
}

PodWatch::PodWatch(kube::Client& client, std::string ns, std::string job)
    : client_(client), ns_(std::move(ns)), job_(std::move(job)) {}

PodWatch::~PodWatch() {
  stop();
}

void PodWatch::publish(const json& pod, bool deleted) const {
  for (const auto& listener : listeners_)
    listener(pod, deleted);
}

void PodWatch::start() {
  watcher_ = std::make_unique<kube::cache::Watcher>(
      client_,
      kube::cache::InformerOptions{.resource = kube::resources::pods(),
                                   .namespace_ = ns_,
                                   .label_selector = replica_selector(job_)},
      kube::cache::EventHandlers{.on_add = [this](const json& pod) { publish(pod, false); },
                                 .on_modify = [this](const json& pod) { publish(pod, false); },
                                 .on_delete = [this](const json& pod) { publish(pod, true); }},
      [](const Error&) { return false; });
  watcher_->start();
}

void PodWatch::stop() {
  if (watcher_)
    watcher_->stop();
}

std::vector<json> PodWatch::pods() const {
  if (!watcher_)
    return {};
  std::vector<json> pods = watcher_->informer().list();
  std::sort(pods.begin(), pods.end(), replica_order);
  return pods;
}

}  // namespace trainctl::cli
