#include "log_stream.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <iostream>

#include "error.h"
#include "replicas.h"

namespace trainctl::cli {

using nlohmann::json;

namespace {

/// Cuts a byte stream into lines; the last piece without a newline comes out on flush().
class LineSplitter {
 public:
  explicit LineSplitter(std::function<void(std::string_view)> emit) : emit_(std::move(emit)) {}

  void feed(std::string_view chunk) {
    buffer_.append(chunk);
    std::size_t start = 0;
    for (std::size_t nl; (nl = buffer_.find('\n', start)) != std::string::npos; start = nl + 1)
      emit_(std::string_view(buffer_).substr(start, nl - start));
    buffer_.erase(0, start);
  }

  void flush() {
    if (!buffer_.empty())
      emit_(buffer_);
    buffer_.clear();
  }

 private:
  std::function<void(std::string_view)> emit_;
  std::string buffer_;
};

/// Which run of a container a log stream reads: the container ID of the running or terminated
/// run, or of the last run while the container waits to restart; "" before it ever started.
std::string run_id(const json& pod, const std::string& container) {
  const json cs = container_status(pod, container);
  if (cs.is_null())
    return "";
  const json state = cs.value("state", json::object());
  if (state.contains("running") || state.contains("terminated")) {
    const std::string id = cs.value("containerID", "");
    return id.empty() ? fmt::format("run-{}", cs.value("restartCount", 0)) : id;
  }
  const json last = cs.value("lastState", json::object());
  if (last.contains("terminated"))
    return last["terminated"].value("containerID",
                                    fmt::format("run-{}", cs.value("restartCount", 0)));
  return "";
}

bool pod_terminal(const json& pod) {
  const std::string phase = pod.value("status", json::object()).value("phase", "");
  return phase == "Succeeded" || phase == "Failed";
}

/// Waits for `d` or until `stop` is requested.
void pause(std::stop_token stop, std::chrono::milliseconds d) {
  std::mutex m;
  std::condition_variable_any cv;
  std::unique_lock lock(m);
  cv.wait_for(lock, stop, d, [] { return false; });
}

}  // namespace

bool LogSelection::selects(const json& pod) const {
  return replica.empty() || replica_display_name(pod) == replica;
}

PrintedLogs print_job_logs(kube::Client& client, const LogSelection& selection, FollowOutput& out) {
  std::vector<json> pods = client
                               .list_all(kube::resources::pods(), selection.ns,
                                         {.label_selector = replica_selector(selection.job)})
                               .value("items", json::array());
  std::sort(pods.begin(), pods.end(), replica_order);
  PrintedLogs result;
  for (const auto& pod : pods) {
    if (!selection.selects(pod))
      continue;
    const std::string replica = replica_display_name(pod);
    LineSplitter lines([&](std::string_view line) { out.log_line(replica, line); });
    try {
      client.stream_logs(selection.ns, pod["metadata"].value("name", ""),
                         {.container = log_container(pod, selection.kind),
                          .tail_lines = selection.tail_lines,
                          .since_seconds = selection.since_seconds,
                          .timestamps = selection.timestamps,
                          .previous = selection.previous},
                         [&](std::string_view chunk) {
                           lines.feed(chunk);
                           return true;
                         });
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::BadRequest)
        throw;
      std::cerr << fmt::format("trainctl: {}: {}\n", replica, e.message());  // not started yet
      ++result.not_started;
      continue;
    }
    lines.flush();
    ++result.printed;
  }
  return result;
}

struct LogFollower::Stream {
  std::string pod_name;
  std::string replica;
  json pod;
  bool deleted = false;
  bool done = false;
  std::jthread thread;
};

LogFollower::LogFollower(kube::Client& client, LogSelection selection, FollowOutput& out,
                         PodWatch& pods, LogFailure on_failure, Tee tee)
    : client_(client),
      selection_(std::move(selection)),
      out_(out),
      pods_(pods),
      on_failure_(on_failure),
      tee_(std::move(tee)) {
  pods.on_change([this](const json& pod, bool deleted) { on_pod(pod, deleted); });
}

LogFollower::~LogFollower() {
  pods_.stop();
  stop();
}

void LogFollower::on_pod(const json& pod, bool deleted) {
  if (!selection_.selects(pod))
    return;
  const std::string uid = pod["metadata"].value("uid", "");
  std::lock_guard lock(mu_);
  if (stopped_)
    return;
  auto& stream = streams_[uid];
  if (!stream) {
    if (deleted) {
      streams_.erase(uid);
      return;
    }
    stream = std::make_unique<Stream>();
    stream->pod_name = pod["metadata"].value("name", "");
    stream->replica = replica_display_name(pod);
    stream->pod = pod;
    stream->thread =
        std::jthread([this, s = stream.get()](std::stop_token stop) { run_stream(stop, *s); });
  }
  stream->pod = pod;
  stream->deleted = stream->deleted || deleted;
  changed_.notify_all();
}

void LogFollower::run_stream(std::stop_token stop, Stream& s) {
  std::string streamed;  // the run whose log has been printed
  bool first = true;
  while (!stop.stop_requested()) {
    std::string container;
    std::string run;
    {
      std::unique_lock lock(mu_);
      const bool go = changed_.wait(lock, stop, [&] {
        if (s.deleted)
          return true;
        container = log_container(s.pod, selection_.kind);
        run = run_id(s.pod, container);
        return (!run.empty() && run != streamed) || pod_terminal(s.pod);
      });
      if (!go || s.deleted || run.empty() || run == streamed)
        break;  // stopped, gone, or finished with every run printed
    }
    streamed = run;
    try {
      stream_run(stop, s, container, first);
      first = false;
    } catch (const Error& e) {
      if (stop.stop_requested())
        break;  // ended by stop(), not by the server
      if (e.kind() == ErrorKind::BadRequest) {
        streamed.clear();  // the run was not ready after all: retry on the next change
        pause(stop, std::chrono::milliseconds(300));
        continue;
      }
      if (!unreadable(s, e))
        break;
    } catch (const std::exception& e) {
      if (stop.stop_requested() || !unreadable(s, e))
        break;
    }
  }
  std::lock_guard lock(mu_);
  s.done = true;
  changed_.notify_all();
}

bool LogFollower::unreadable(const Stream& s, const std::exception& e) {
  const auto* error = dynamic_cast<const Error*>(&e);
  const bool gone = error != nullptr && error->kind() == ErrorKind::NotFound;
  if (on_failure_ == LogFailure::Warn) {
    out_.warning(logs_unavailable(s.replica, e.what()));
    return !gone;  // a later run may be readable; a deleted pod has none
  }
  if (gone)
    return false;  // deleted meanwhile: its replacement has a stream of its own
  {
    std::lock_guard lock(mu_);
    if (!failure_)
      failure_ = std::current_exception();
  }
  failed_.request_stop();
  return false;
}

void LogFollower::throw_failure() const {
  std::exception_ptr failure;
  {
    std::lock_guard lock(mu_);
    failure = failure_;
  }
  if (failure)
    std::rethrow_exception(failure);
}

void LogFollower::stream_run(std::stop_token stop, Stream& s, const std::string& container,
                             bool first) {
  kube::LogOptions options{
      .container = container, .follow = true, .timestamps = selection_.timestamps};
  if (first) {
    options.tail_lines = selection_.tail_lines;
    options.since_seconds = selection_.since_seconds;
  }
  LineSplitter lines([&](std::string_view line) {
    out_.log_line(s.replica, line);
    if (tee_)
      tee_(s.replica, line);
  });
  client_.stream_logs(
      selection_.ns, s.pod_name, options,
      [&](std::string_view chunk) {
        lines.feed(chunk);
        return true;
      },
      stop);
  lines.flush();
}

void LogFollower::drain(std::chrono::milliseconds grace) {
  std::unique_lock lock(mu_);
  changed_.wait_for(lock, grace, [this] {
    return std::all_of(streams_.begin(), streams_.end(),
                       [](const auto& entry) { return entry.second->done; });
  });
}

void LogFollower::stop() {
  std::vector<std::jthread*> threads;
  {
    std::lock_guard lock(mu_);
    stopped_ = true;
    for (auto& [uid, stream] : streams_) {
      stream->thread.request_stop();
      threads.push_back(&stream->thread);
    }
  }
  changed_.notify_all();
  for (auto* t : threads) {
    if (t->joinable())
      t->join();
  }
}

}  // namespace trainctl::cli
