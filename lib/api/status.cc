#include "api/status.h"

#include <fmt/format.h>
#include <time.h>

#include <algorithm>
#include <cctype>

#include "api/job.h"
#include "api/job_view.h"
#include "api/quantity.h"
#include "json_access.h"
#include "text.h"

namespace trainctl::api {
namespace {

using nlohmann::json;

int int_member(const json& object, std::string_view key, int fallback) {
  const json& v = member(object, key);
  return v.is_number_integer() ? v.get<int>() : fallback;
}

bool is_true(const json& condition) {
  return string_member(condition, "status") == "True";
}

/// The condition types of the Kubeflow job lifecycle.
bool is_lifecycle(std::string_view type) {
  return type == "Created" || type == "Running" || type == "Restarting" || type == "Succeeded" ||
         type == "Failed" || type == "Suspended";
}

bool is_terminal(std::string_view type) {
  return type == "Succeeded" || type == "Failed";
}

/// Parses exactly `n` digits at `s[pos]`, advancing pos.
std::optional<int> digits(std::string_view s, size_t& pos, size_t n) {
  if (pos + n > s.size())
    return std::nullopt;
  int v = 0;
  for (size_t i = 0; i < n; ++i) {
    const char c = s[pos + i];
    if (!std::isdigit(static_cast<unsigned char>(c)))
      return std::nullopt;
    v = v * 10 + (c - '0');
  }
  pos += n;
  return v;
}

bool expect(std::string_view s, size_t& pos, char c) {
  if (pos >= s.size() || (s[pos] != c && std::tolower(static_cast<unsigned char>(s[pos])) != c))
    return false;
  ++pos;
  return true;
}

}  // namespace

std::optional<JobKind> kind_of(const json& job) {
  return job_kind_from_name(string_member(job, "kind"));
}

std::string kind_resource_name(JobKind kind) {
  const JobKindInfo& info = job_kind_info(kind);
  const std::string_view api_version = info.api_version;
  return fmt::format("{}.{}", to_lower(info.name), api_version.substr(0, api_version.find('/')));
}

std::string job_status(const json& job) {
  const json& conditions = member(member(job, "status"), "conditions");
  if (!conditions.is_array())
    return "Pending";
  std::string last_true;
  std::string terminal;
  for (const auto& c : conditions) {
    if (!is_true(c) || !is_lifecycle(string_member(c, "type")))
      continue;
    last_true = string_member(c, "type");
    if (is_terminal(last_true))
      terminal = last_true;
  }
  if (!terminal.empty())
    return terminal;
  return last_true.empty() ? "Pending" : last_true;
}

std::string status_detail(const json& job) {
  const std::string status = job_status(job);
  const json& conditions = member(member(job, "status"), "conditions");
  if (!conditions.is_array())
    return "";
  for (const auto& c : conditions) {
    if (!is_true(c) || string_member(c, "type") != status)
      continue;
    const std::string reason = string_member(c, "reason");
    const std::string message = string_member(c, "message");
    return reason.empty() || message.empty() ? reason + message
                                             : fmt::format("{}: {}", reason, message);
  }
  return "";
}

std::string display_status(const json& job, const json& podgroup) {
  const std::string status = job_status(job);
  const std::string phase = string_member(member(podgroup, "status"), "phase");
  if ((status == "Pending" || status == "Created") && podgroup.is_object() &&
      (phase.empty() || phase == "Pending"))
    return "Queued";
  return status;
}

std::vector<ReplicaTotals> replica_totals(const json& job) {
  const json& statuses = member(member(job, "status"), "replicaStatuses");
  std::vector<ReplicaTotals> totals;
  const JobView view(job);
  for (const ReplicaSpecView& replica : view.replica_specs()) {
    // The operators count a case variant ("worker") as its type, under the CamelCase name.
    const auto canonical =
        view.kind() ? canonical_replica_type(*view.kind(), replica.type) : std::nullopt;
    const std::string type = canonical ? std::string(*canonical) : replica.type;
    const json& st = member(statuses, type);
    totals.push_back({.type = type,
                      .replicas = replica.replicas,
                      .active = int_member(st, "active", 0),
                      .succeeded = int_member(st, "succeeded", 0),
                      .failed = int_member(st, "failed", 0)});
  }
  return totals;
}

std::string format_replicas(const std::vector<ReplicaTotals>& totals) {
  if (totals.empty())
    return "<none>";
  std::string out;
  for (const auto& t : totals) {
    if (!out.empty())
      out += ',';
    out += fmt::format("{}:{}/{}", t.type, t.active, t.replicas);
  }
  return out;
}

std::string replicas_column(const json& job) {
  const std::vector<ReplicaTotals> totals = replica_totals(job);
  if (!is_terminal(job_status(job)) || totals.empty())
    return format_replicas(totals);
  std::string out;
  for (const auto& t : totals) {
    std::string counts;
    if (t.succeeded > 0 || t.failed == 0)
      counts = fmt::format("{} succeeded", t.succeeded);
    if (t.failed > 0)
      counts += fmt::format("{}{} failed", counts.empty() ? "" : " ", t.failed);
    out += fmt::format("{}{}:{}", out.empty() ? "" : ",", t.type, counts);
  }
  return out;
}

std::string job_queue(const json& job) {
  return JobView(job).run_policy().scheduling.queue;
}

std::int64_t job_gpus(const json& job) {
  std::int64_t milli = 0;
  for (const ReplicaSpecView& replica : JobView(job).replica_specs()) {
    const json& containers =
        member(member(member(*replica.spec, "template"), "spec"), "containers");
    if (!containers.is_array())
      continue;
    std::int64_t per_replica = 0;
    for (const auto& c : containers) {
      const json& gpu = member(member(member(c, "resources"), "limits"), "nvidia.com/gpu");
      if (gpu.is_null())
        continue;
      try {
        per_replica += quantity_milli(gpu);
      } catch (const std::exception&) {
        // The API server would have rejected it; count nothing rather than fail a listing.
      }
    }
    milli += per_replica * replica.replicas;
  }
  return milli / 1000;
}

std::optional<std::chrono::system_clock::time_point> parse_timestamp(std::string_view s) {
  size_t pos = 0;
  const auto year = digits(s, pos, 4);
  if (!year || !expect(s, pos, '-'))
    return std::nullopt;
  const auto month = digits(s, pos, 2);
  if (!month || !expect(s, pos, '-'))
    return std::nullopt;
  const auto day = digits(s, pos, 2);
  if (!day || !expect(s, pos, 't'))
    return std::nullopt;
  const auto hour = digits(s, pos, 2);
  if (!hour || !expect(s, pos, ':'))
    return std::nullopt;
  const auto minute = digits(s, pos, 2);
  if (!minute || !expect(s, pos, ':'))
    return std::nullopt;
  const auto second = digits(s, pos, 2);
  if (!second)
    return std::nullopt;
  if (pos < s.size() && s[pos] == '.') {
    ++pos;
    while (pos < s.size() && std::isdigit(static_cast<unsigned char>(s[pos])))
      ++pos;
  }
  int offset_seconds = 0;
  if (expect(s, pos, 'z')) {
    // UTC
  } else if (pos < s.size() && (s[pos] == '+' || s[pos] == '-')) {
    const int sign = s[pos] == '-' ? -1 : 1;
    ++pos;
    const auto oh = digits(s, pos, 2);
    if (!oh || !expect(s, pos, ':'))
      return std::nullopt;
    const auto om = digits(s, pos, 2);
    if (!om)
      return std::nullopt;
    offset_seconds = sign * (*oh * 3600 + *om * 60);
  } else {
    return std::nullopt;
  }
  if (pos != s.size() || *month < 1 || *month > 12 || *day < 1 || *day > 31 || *hour > 23 ||
      *minute > 59 || *second > 60)
    return std::nullopt;
  std::tm tm{};
  tm.tm_year = *year - 1900;
  tm.tm_mon = *month - 1;
  tm.tm_mday = *day;
  tm.tm_hour = *hour;
  tm.tm_min = *minute;
  tm.tm_sec = *second;
  const time_t t = ::timegm(&tm);
  return std::chrono::system_clock::from_time_t(t - offset_seconds);
}

std::optional<std::chrono::seconds> job_duration(const json& job,
                                                 std::chrono::system_clock::time_point now) {
  const json& status = member(job, "status");
  const auto start = parse_timestamp(string_member(status, "startTime"));
  if (!start)
    return std::nullopt;
  const auto end = parse_timestamp(string_member(status, "completionTime")).value_or(now);
  return std::max(std::chrono::seconds(0),
                  std::chrono::duration_cast<std::chrono::seconds>(end - *start));
}

std::optional<std::chrono::seconds> age_of(const json& timestamp,
                                           std::chrono::system_clock::time_point now) {
  if (!timestamp.is_string())
    return std::nullopt;
  const auto t = parse_timestamp(timestamp.get<std::string>());
  if (!t)
    return std::nullopt;
  return std::chrono::duration_cast<std::chrono::seconds>(now - *t);
}

std::string human_duration(std::chrono::seconds d) {
  const long long s = std::max<long long>(0, d.count());
  if (s < 120)
    return fmt::format("{}s", s);
  const long long m = s / 60;
  if (m < 10)
    return s % 60 == 0 ? fmt::format("{}m", m) : fmt::format("{}m{}s", m, s % 60);
  if (m < 180)
    return fmt::format("{}m", m);
  const long long h = m / 60;
  if (h < 8)
    return m % 60 == 0 ? fmt::format("{}h", h) : fmt::format("{}h{}m", h, m % 60);
  if (h < 48)
    return fmt::format("{}h", h);
  const long long days = h / 24;
  if (days < 8)
    return h % 24 == 0 ? fmt::format("{}d", days) : fmt::format("{}d{}h", days, h % 24);
  if (days < 365 * 2)
    return fmt::format("{}d", days);
  return fmt::format("{}y", days / 365);
}

std::string human_duration_or_none(std::optional<std::chrono::seconds> d) {
  return d ? human_duration(*d) : "<none>";
}

std::string format_timestamp(std::chrono::system_clock::time_point t) {
  const std::time_t secs = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace trainctl::api
