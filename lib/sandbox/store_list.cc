// LIST: pages over the state at a resource version (rebuilt from the event window), continue
// tokens, and the watch cache's wait for a version the store has not reached.

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <ctime>
#include <map>
#include <random>
#include <set>
#include <tuple>
#include <unordered_map>

#include "api/status.h"
#include "json_access.h"
#include "sandbox/field_errors.h"
#include "sandbox/store.h"
#include "sandbox/store_core.h"
#include "sandbox/strategy.h"
#include "text.h"

namespace trainctl::sandbox {

namespace {

struct ContinueToken {
  std::int64_t rv = 0;
  std::string start;
};

constexpr std::string_view kTooOldContinue =
    "The provided continue parameter is too old to display a consistent list result. You can "
    "start a new list without the continue parameter, or use the continue token in this response "
    "to retrieve the remainder of the results. Continuing with the provided token results in an "
    "inconsistent list - objects that were created, modified, or deleted between the time the "
    "first chunk was returned and now may show up in the list.";

std::string base64url_encode(std::string_view in) {
  std::string out = base64_encode(in);
  for (char& c : out) {
    if (c == '+')
      c = '-';
    else if (c == '/')
      c = '_';
  }
  while (!out.empty() && out.back() == '=')
    out.pop_back();
  return out;
}

std::optional<std::string> base64url_decode(std::string_view in) {
  std::string s(in);
  for (char& c : s) {
    if (c == '-')
      c = '+';
    else if (c == '_')
      c = '/';
  }
  return base64_decode(s);
}

std::string encode_continue(std::int64_t rv, const std::string& start) {
  json token = {{"v", "meta.k8s.io/v1"}, {"rv", rv}, {"start", start}};
  return base64url_encode(token.dump());
}

ContinueToken decode_continue(const std::string& text) {
  auto fail = [](const std::string& why) {
    return bad_request("invalid continue token: continue key is not valid: " + why);
  };
  auto raw = base64url_decode(text);
  if (!raw)
    throw fail("illegal base64 data");
  json token = json::parse(*raw, nullptr, /*allow_exceptions=*/false);
  if (!token.is_object())
    throw fail("invalid character in the encoded token");
  if (string_member(token, "v") != "meta.k8s.io/v1") {
    throw fail(fmt::format("server does not recognize this encoded version {}",
                           api::names::go_quote(string_member(token, "v"))));
  }
  ContinueToken out;
  const json& rv = member(token, "rv");
  out.rv = rv.is_number_integer() ? rv.get<std::int64_t>() : 0;
  if (out.rv == 0)
    throw fail("incorrect encoded start resourceVersion (version meta.k8s.io/v1)");
  out.start = string_member(token, "start");
  if (out.start.empty())
    throw fail("encoded start key empty (version meta.k8s.io/v1)");
  return out;
}

}  // namespace

ListPage Store::list(const std::string& group_resource, const ListRequest& request) const {
  SharedListPage shared = list_shared(group_resource, request);
  ListPage page{.resource_version = std::move(shared.resource_version),
                .continue_token = std::move(shared.continue_token),
                .remaining_item_count = shared.remaining_item_count};
  page.items.reserve(shared.items.size());
  for (const auto& item : shared.items)
    page.items.push_back(*item);
  return page;
}

SharedListPage Store::list_shared(const std::string& group_resource,
                                  const ListRequest& request) const {
  // The real server reads from its watch cache, unless the request needs etcd: no version, a
  // continue token, a limit with a version other than "0", or an exact version.
  const std::string& rv_text = request.resource_version;
  const bool from_etcd = rv_text.empty() || !request.continue_token.empty() ||
                         (request.limit > 0 && rv_text != "0") ||
                         request.resource_version_match == "Exact";
  if (const std::string bad = rv_parameter_error(rv_text); !bad.empty()) {
    if (from_etcd)
      throw bad_request("invalid resource version: " + bad);
    throw rv_parameter_invalid(bad);
  }
  const std::uint64_t wanted = parse_rv(rv_text);
  if (!from_etcd && wanted > 0) {
    {
      std::lock_guard lock(core_->mu);
      core_->table(group_resource);  // an unknown resource fails at once
    }
    core_->wait_for_version(wanted, request.stop);
  }
  SharedListPage page;
  std::vector<SharedJson>& items = page.items;
  {
    std::lock_guard lock(core_->mu);
    auto& core = *core_;
    Table& t = core.table(group_resource);
    const std::string prefix = t.info.namespaced && !request.ns.empty() ? request.ns + "/" : "";
    std::uint64_t at = core.rv;
    std::string start = prefix;
    if (!request.continue_token.empty()) {
      if (!request.resource_version.empty() && request.resource_version != "0")
        throw bad_request("specifying resource version is not allowed when using continue");
      ContinueToken token = decode_continue(request.continue_token);
      start = prefix + token.start;
      if (token.rv > 0) {
        at = static_cast<std::uint64_t>(token.rv);
        if (at < core.evicted_through) {
          ApiError err = gone(std::string(kTooOldContinue));
          err.api_status()["metadata"]["continue"] = encode_continue(-1, token.start);
          throw err;
        }
        at = std::min(at, core.rv);
      }
    } else if (wanted > 0) {
      if (wanted > core.rv) {
        // Only etcd reads get here (the cache waited above): a read not older than the version
        // checks the revision etcd answered at; an exact read asks etcd for a future revision.
        if (request.resource_version_match == "NotOlderThan")
          throw too_large_resource_version(wanted, core.rv, 0);
        throw ApiError(ErrorKind::ServerError, 500, "",
                       "etcdserver: mvcc: required revision is a future revision");
      }
      if (request.resource_version_match == "Exact") {
        if (wanted < core.evicted_through) {
          throw gone(
              fmt::format("too old resource version: {} ({})", wanted, core.evicted_through));
        }
        at = wanted;
      }
    }

    const auto overrides = core.rewind(t, at, prefix, start);
    auto cur = t.objects.lower_bound(start);
    auto old = overrides.lower_bound(start);
    auto in_scope = [&](const std::string& key) {
      return key.compare(0, prefix.size(), prefix) == 0;
    };
    // Walks the keys of the state at `at` in order.
    auto next_entry = [&]() -> std::optional<std::pair<std::string, SharedJson>> {
      while (true) {
        const bool cur_ok = cur != t.objects.end() && in_scope(cur->first);
        const bool old_ok = old != overrides.end();
        if (!cur_ok && !old_ok)
          return std::nullopt;
        std::pair<std::string, SharedJson> entry;
        if (old_ok && (!cur_ok || old->first <= cur->first)) {
          if (cur_ok && cur->first == old->first)
            ++cur;
          entry = *old++;
        } else {
          entry = *cur++;
        }
        if (entry.second)
          return entry;
      }
    };
    const bool filtered = !request.labels.empty() || !request.fields.empty();
    std::string last_key;
    bool more = false;
    while (auto entry = next_entry()) {
      if (request.limit > 0 && static_cast<std::int64_t>(items.size()) >= request.limit) {
        more = true;
        if (!filtered) {
          std::int64_t remaining = 1;
          while (next_entry())
            ++remaining;
          page.remaining_item_count = remaining;
        }
        break;
      }
      const json& obj = *entry->second;
      last_key = entry->first;
      if (!request.labels.empty() && !request.labels.matches(member(meta(obj), "labels")))
        continue;
      if (!request.fields.empty() && !request.fields.matches(obj))
        continue;
      items.push_back(entry->second);
    }
    page.resource_version = std::to_string(at);
    if (more) {
      page.continue_token =
          encode_continue(static_cast<std::int64_t>(at), last_key.substr(prefix.size()) + '\0');
    }
  }
  return page;
}

void StoreCore::wait_for_version(std::uint64_t wanted, const std::stop_token& stop) {
  std::stop_callback wake(stop, [this] {
    std::lock_guard lock(mu);
    rv_advanced.notify_all();
  });
  std::unique_lock lock(mu);
  rv_advanced.wait_for(lock, options.fresh_wait,
                       [&] { return rv >= wanted || stop.stop_requested(); });
  if (rv < wanted)
    throw too_large_resource_version(wanted, rv, 1);
}

std::map<std::string, SharedJson> StoreCore::rewind(const Table& t, std::uint64_t at,
                                                    const std::string& prefix,
                                                    const std::string& start) const {
  std::map<std::string, SharedJson> overrides;
  if (window.empty() || at >= rv)
    return overrides;
  const std::string gr = t.info.group_resource();
  std::size_t first = at + 1 > window.front().rv ? at + 1 - window.front().rv : 0;
  for (std::size_t i = first; i < window.size(); ++i) {
    const Event& ev = window[i];
    if (ev.gr != gr || ev.key < start || ev.key.compare(0, prefix.size(), prefix) != 0)
      continue;
    overrides.emplace(ev.key, ev.prev);  // keeps the earliest
  }
  return overrides;
}

}  // namespace trainctl::sandbox
