#include "job_follow.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <tuple>

#include "api/status.h"
#include "api/well_known.h"
#include "error.h"
#include "json_access.h"
#include "text.h"

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

/// A stable ANSI colour per replica name (FNV-1a over the name), so worker-1 keeps its colour
/// from one run to the next.
int color_of(std::string_view replica) {
  static constexpr std::array<int, 12> kPalette = {36, 33, 32, 35, 34, 31, 96, 93, 92, 95, 94, 91};
  std::uint32_t hash = 2166136261u;
  for (const char c : replica)
    hash = (hash ^ static_cast<unsigned char>(c)) * 16777619u;
  return kPalette[hash % kPalette.size()];
}

/// Waits for `d` or until `stop` is requested.
void pause(std::stop_token stop, std::chrono::milliseconds d) {
  std::mutex m;
  std::condition_variable_any cv;
  std::unique_lock lock(m);
  cv.wait_for(lock, stop, d, [] { return false; });
}

}  // namespace

std::string replica_selector(std::string_view job) {
  return fmt::format("{}={}", api::labels::job_name, job);
}

std::string label_of(const json& object, std::string_view key) {
  const json& labels = object.value("metadata", json::object()).value("labels", json::object());
  const auto it = labels.find(key);
  return it != labels.end() && it->is_string() ? it->get<std::string>() : "";
}

namespace {

/// The replica-type label, else the MPI Operator's job-role.
std::string replica_type_label(const json& pod) {
  std::string type = label_of(pod, api::labels::replica_type);
  return type.empty() ? label_of(pod, api::labels::job_role) : type;
}

}  // namespace

std::string replica_name(const json& pod) {
  const std::string type = replica_type_label(pod);
  if (type.empty())
    return pod["metadata"].value("name", "");
  const std::string index = label_of(pod, api::labels::replica_index);
  return index.empty() ? to_lower(type) : fmt::format("{}-{}", to_lower(type), index);
}

bool replica_order(const json& a, const json& b) {
  auto key = [](const json& pod) {
    const std::string index = label_of(pod, api::labels::replica_index);
    const bool numeric =
        !index.empty() && index.size() < 9 && std::all_of(index.begin(), index.end(), ::isdigit);
    return std::tuple(to_lower(replica_type_label(pod)), numeric ? std::stoi(index) : -1,
                      pod["metadata"].value("name", ""));
  };
  return key(a) < key(b);
}

std::string log_container(const json& pod, api::JobKind kind) {
  const json annotations =
      pod.value("metadata", json::object()).value("annotations", json::object());
  const std::string annotated =
      annotations.value(std::string(api::annotations::default_container), "");
  if (!annotated.empty())
    return annotated;
  const json containers = pod.value("spec", json::object()).value("containers", json::array());
  const std::string_view preferred = api::job_kind_info(kind).default_container;
  for (const auto& c : containers) {
    if (!preferred.empty() && c.value("name", "") == preferred)
      return std::string(preferred);
  }
  return containers.empty() ? "" : containers[0].value("name", "");
}

json container_status(const json& pod, std::string_view container) {
  for (const auto& cs :
       pod.value("status", json::object()).value("containerStatuses", json::array())) {
    if (cs.value("name", "") == container)
      return cs;
  }
  return nullptr;
}

std::chrono::milliseconds parse_duration(std::string_view flag, std::string_view text) {
  auto bad = [&] {
    return Error(
        ErrorKind::Usage,
        fmt::format("invalid {} {:?}: use a duration such as 30s, 5m or 1h30m", flag, text));
  };
  if (text.empty())
    throw bad();
  if (std::all_of(text.begin(), text.end(), ::isdigit)) {
    if (text.size() > 12)
      throw bad();
    return std::chrono::seconds(std::stoll(std::string(text)));
  }
  double total_ms = 0;
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t number_start = i;
    while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.'))
      ++i;
    const std::string number(text.substr(number_start, i - number_start));
    const std::size_t unit_start = i;
    while (i < text.size() && std::isalpha(static_cast<unsigned char>(text[i])))
      ++i;
    const std::string_view unit = text.substr(unit_start, i - unit_start);
    const double scale = unit == "h"                    ? 3'600'000
                         : unit == "m"                  ? 60'000
                         : unit == "s"                  ? 1000
                         : unit == "ms"                 ? 1
                         : unit == "us" || unit == "µs" ? 1e-3
                         : unit == "ns"                 ? 1e-6
                                                        : 0;
    if (number.empty() || number == "." || scale == 0 || number.size() > 12)
      throw bad();
    total_ms += std::stod(number) * scale;
  }
  return std::chrono::milliseconds(std::llround(total_ms));
}

bool job_finished(const json& job) {
  const std::string status = api::job_status(job);
  return status == "Succeeded" || status == "Failed";
}

json event_time(const json& event) {
  for (const char* field : {"lastTimestamp", "eventTime", "firstTimestamp"}) {
    if (event.contains(field) && event[field].is_string())
      return event[field];
  }
  return event.value("metadata", json::object()).value("creationTimestamp", json());
}

std::vector<json> recent_events(kube::Client& client, std::string_view ns,
                                const std::vector<std::string>& names, std::size_t limit) {
  std::vector<json> events;
  for (const auto& name : names) {
    const json list =
        client.list_all(kube::resources::events(), ns,
                        {.field_selector = fmt::format("involvedObject.name={}", name)});
    for (const auto& e : list.value("items", json::array()))
      events.push_back(e);
  }
  auto when = [](const json& event) {
    const json t = event_time(event);
    return t.is_string() ? api::parse_timestamp(t.get<std::string>()) : std::nullopt;
  };
  std::stable_sort(events.begin(), events.end(),
                   [&when](const json& a, const json& b) { return when(a) < when(b); });
  if (events.size() > limit)
    events.erase(events.begin(), events.end() - static_cast<std::ptrdiff_t>(limit));
  return events;
}

bool watch_job(kube::Client& client, const kube::Resource& resource, const std::string& ns,
               const std::string& name,
               std::optional<std::chrono::steady_clock::time_point> deadline,
               const std::function<bool(const json*)>& on_change, std::stop_token stop) {
  const std::string by_name = fmt::format("metadata.name={}", name);
  std::string resource_version;
  // LIST by name rather than GET: its resourceVersion is where the watch resumes, so a job
  // created between the two requests is not missed.
  auto relist = [&] {
    const json list = client.list(resource, ns, {.field_selector = by_name});
    resource_version = list["metadata"].value("resourceVersion", "");
    const json items = list.value("items", json::array());
    return items.empty() ? on_change(nullptr) : on_change(&items[0]);
  };
  if (!relist())
    return true;
  while (!stop.stop_requested()) {
    int timeout_seconds = 300;
    if (deadline) {
      const auto left = *deadline - std::chrono::steady_clock::now();
      if (left <= std::chrono::steady_clock::duration::zero())
        return false;
      const auto left_s = std::chrono::ceil<std::chrono::seconds>(left).count();
      timeout_seconds = static_cast<int>(std::clamp<std::int64_t>(left_s, 1, 300));
    }
    bool satisfied = false;
    try {
      const kube::WatchResult result = client.watch(
          resource, ns,
          {.field_selector = by_name,
           .resource_version = resource_version,
           .timeout_seconds = timeout_seconds},
          [&](const kube::WatchEvent& event) {
            if (event.type == kube::WatchEventType::Bookmark)
              return true;
            const bool deleted = event.type == kube::WatchEventType::Deleted;
            satisfied = !on_change(deleted ? nullptr : &event.object);
            return !satisfied;
          },
          stop);
      resource_version = result.resource_version;
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::Gone)
        throw;
      satisfied = !relist();
    }
    if (satisfied)
      return true;
  }
  return false;
}

bool wait_until_deleted(kube::Client& client, const kube::Resource& resource, const std::string& ns,
                        const std::string& name, const std::string& uid,
                        std::chrono::steady_clock::time_point deadline) {
  return watch_job(client, resource, ns, name, deadline,
                   [&uid](const json* j) { return j != nullptr && uid_of(*j) == uid; });
}

// ---- FollowOutput ----

bool is_terminal(int fd) {
  return ::isatty(fd) == 1;
}

bool color_allowed(int fd) {
  const char* no_color = std::getenv("NO_COLOR");
  return is_terminal(fd) && (no_color == nullptr || *no_color == '\0');
}

FollowOutput::FollowOutput(std::ostream& out, bool prefix, bool color, bool live)
    : out_(out), prefix_(prefix), color_(color), live_(live) {}

FollowOutput::~FollowOutput() {
  finish();
}

void FollowOutput::log_line(std::string_view replica, std::string_view text) {
  std::lock_guard lock(mu_);
  clear_status_locked();
  if (prefix_ && color_)
    out_ << fmt::format("\033[{}m[{}]\033[0m ", color_of(replica), replica);
  else if (prefix_)
    out_ << '[' << replica << "] ";
  out_ << text << '\n';
  draw_status_locked();
  out_.flush();
}

void FollowOutput::note(std::string_view text) {
  std::lock_guard lock(mu_);
  clear_status_locked();
  out_ << text << '\n';
  draw_status_locked();
  out_.flush();
}

void FollowOutput::status(std::string status) {
  if (!live_)
    return;
  std::lock_guard lock(mu_);
  clear_status_locked();
  status_ = std::move(status);
  draw_status_locked();
  out_.flush();
}

void FollowOutput::finish() {
  std::lock_guard lock(mu_);
  if (live_ && !status_.empty())
    out_ << '\n' << std::flush;
  status_.clear();
}

void FollowOutput::warning(std::string_view text) {
  std::lock_guard lock(mu_);
  if (!warned_.emplace(text).second)
    return;
  clear_status_locked();
  out_.flush();
  std::cerr << "trainctl: warning: " << text << '\n' << std::flush;
  draw_status_locked();
  out_.flush();
}

std::string logs_unavailable(std::string_view replica, std::string_view why) {
  return fmt::format("logs of {} unavailable: {}", replica, why);
}

void FollowOutput::clear_status_locked() {
  if (live_ && !status_.empty())
    out_ << "\r\033[K";
}

void FollowOutput::draw_status_locked() {
  if (live_ && !status_.empty())
    out_ << status_;
}

// ---- PodWatch ----

PodWatch::PodWatch(kube::Client& client, std::string ns, std::string job)
    : client_(client), ns_(std::move(ns)), job_(std::move(job)) {}

PodWatch::~PodWatch() {
  stop();
}

void PodWatch::publish(const json& pod, bool deleted) {
  {
    std::lock_guard lock(mu_);
    const std::string name = pod["metadata"].value("name", "");
    if (deleted)
      pods_.erase(name);
    else
      pods_[name] = pod;
  }
  for (const auto& listener : listeners_)
    listener(pod, deleted);
}

void PodWatch::start() {
  const json list =
      client_.list_all(kube::resources::pods(), ns_, {.label_selector = replica_selector(job_)});
  for (const auto& pod : list.value("items", json::array()))
    publish(pod, false);
  thread_ = std::jthread([this, rv = list["metadata"].value("resourceVersion", "")](
                             std::stop_token stop) { run(stop, rv); });
}

void PodWatch::stop() {
  if (thread_.joinable()) {
    thread_.request_stop();
    thread_.join();
  }
}

std::vector<json> PodWatch::pods() const {
  std::vector<json> pods;
  {
    std::lock_guard lock(mu_);
    for (const auto& [name, pod] : pods_)
      pods.push_back(pod);
  }
  std::sort(pods.begin(), pods.end(), replica_order);
  return pods;
}

void PodWatch::run(std::stop_token stop, std::string resource_version) {
  while (!stop.stop_requested()) {
    try {
      resource_version =
          client_
              .watch(
                  kube::resources::pods(), ns_,
                  {.label_selector = replica_selector(job_), .resource_version = resource_version},
                  [this](const kube::WatchEvent& event) {
                    if (event.type != kube::WatchEventType::Bookmark)
                      publish(event.object, event.type == kube::WatchEventType::Deleted);
                    return true;
                  },
                  stop)
              .resource_version;
    } catch (const Error& e) {
      if (stop.stop_requested())
        return;
      if (e.kind() == ErrorKind::Gone) {
        // Too far behind: start over from a fresh LIST, reporting pods that went meanwhile.
        const json list = client_.list_all(kube::resources::pods(), ns_,
                                           {.label_selector = replica_selector(job_)});
        std::map<std::string, json> gone;
        {
          std::lock_guard lock(mu_);
          gone = pods_;
        }
        for (const auto& pod : list.value("items", json::array())) {
          gone.erase(pod["metadata"].value("name", ""));
          publish(pod, false);
        }
        for (const auto& [name, pod] : gone)
          publish(pod, true);
        resource_version = list["metadata"].value("resourceVersion", "");
        continue;
      }
      pause(stop, std::chrono::milliseconds(500));  // the connection dropped: resume shortly
    }
  }
}

// ---- logs ----

bool LogSelection::selects(const json& pod) const {
  return replica.empty() || replica_name(pod) == replica;
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
    const std::string replica = replica_name(pod);
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
                         PodWatch& pods, LogFailure on_failure)
    : client_(client),
      selection_(std::move(selection)),
      out_(out),
      pods_(pods),
      on_failure_(on_failure) {
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
    stream->replica = replica_name(pod);
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
  LineSplitter lines([&](std::string_view line) { out_.log_line(s.replica, line); });
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
