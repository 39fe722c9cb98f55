// Informers and leader election against an in-process sandbox.

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "json_access.h"
#include "kube/cache/informer.h"
#include "kube/cache/leader_election.h"
#include "kube/cache/watcher.h"
#include "tests/support/expect_error.h"
#include "tests/support/sandbox_fixture.h"

namespace trainctl::kube::cache {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using ::testing::UnorderedElementsAre;
using testing::wait_until;

json config_map(const std::string& name, const std::string& value, json labels = json::object()) {
  return {{"apiVersion", "v1"},
          {"kind", "ConfigMap"},
          {"metadata", {{"name", name}, {"namespace", "default"}, {"labels", std::move(labels)}}},
          {"data", {{"value", value}}}};
}

/// What an informer reported, as "add default/a", "update default/a 1->2", "delete default/a".
class EventLog {
 public:
  EventHandlers handlers() {
    return {.on_add = [this](const json& o) { record("add " + object_key(o)); },
            .on_update =
                [this](const json& old_object, const json& new_object) {
                  record("update " + object_key(new_object) + " " + value(old_object) + "->" +
                         value(new_object));
                },
            .on_delete = [this](const json& o) { record("delete " + object_key(o)); }};
  }
  std::vector<std::string> events() const {
    std::lock_guard lock(mu_);
    return events_;
  }
  bool contains(const std::string& event) const {
    std::lock_guard lock(mu_);
    return std::find(events_.begin(), events_.end(), event) != events_.end();
  }
  void clear() {
    std::lock_guard lock(mu_);
    events_.clear();
  }

 private:
  static std::string value(const json& o) {
    return o.value("data", json::object()).value("value", "");
  }
  void record(std::string event) {
    std::lock_guard lock(mu_);
    events_.push_back(std::move(event));
  }
  mutable std::mutex mu_;
  std::vector<std::string> events_;
};

/// Runs an informer on its own thread until destroyed: declare it after the informer and
/// whatever its handlers use.
class RunningInformer {
 public:
  explicit RunningInformer(Informer& informer)
      : thread_([&informer](std::stop_token stop) { informer.run(stop); }) {
    EXPECT_TRUE(wait_until([&] { return informer.has_synced(); }));
  }
  void stop() {
    thread_.request_stop();
    thread_.join();
  }

 private:
  std::jthread thread_;
};

class InformerTest : public testing::SandboxTest {
 protected:
  /// The test's ConfigMaps in `default`: not the CA bundle every namespace holds (kube-root-ca.crt,
  /// as kube-controller-manager publishes it).
  InformerOptions config_maps(std::string label_selector = {}) {
    return {.resource = resources::configmaps(),
            .namespace_ = "default",
            .label_selector = std::move(label_selector),
            .field_selector = "metadata.name!=kube-root-ca.crt"};
  }
  void set_faults(sandbox::Faults faults) { sandbox().api().set_faults(faults); }
  /// Sets (and returns, for more faults later) an end to every watch after a second: set before
  /// an informer's first watch, it lets faults set later reach its next watches.
  sandbox::Faults end_watches_after_a_second() {
    sandbox::Faults faults;
    faults.drop_watches_after = std::chrono::seconds(1);
    set_faults(faults);
    return faults;
  }
};

TEST_F(InformerTest, SyncsThenReportsAddsUpdatesAndDeletes) {
  client().create(resources::configmaps(), "default", config_map("a", "1"));
  client().create(resources::configmaps(), "default", config_map("b", "1"));
  Informer informer(client(), config_maps());
  EventLog log;
  informer.add_handlers(log.handlers());
  RunningInformer running(informer);
  EXPECT_THAT(log.events(), UnorderedElementsAre("add default/a", "add default/b"));
  EXPECT_EQ(informer.size(), 2u);
  EXPECT_EQ(informer.get("default/a")->at("data")["value"], "1");
  EXPECT_EQ(informer.get("default/a")->at("kind"), "ConfigMap");
  EXPECT_FALSE(informer.last_resource_version().empty());

  log.clear();
  client().create(resources::configmaps(), "default", config_map("c", "1"));
  json a = client().get(resources::configmaps(), "default", "a");
  a["data"]["value"] = "2";
  client().update(resources::configmaps(), "default", a);
  client().remove(resources::configmaps(), "default", "b");
  ASSERT_TRUE(wait_until([&] { return log.events().size() == 3; })) << log.events().size();
  EXPECT_THAT(log.events(),
              ::testing::ElementsAre("add default/c", "update default/a 1->2", "delete default/b"));
  EXPECT_EQ(informer.get("default/a")->at("data")["value"], "2");
  EXPECT_EQ(informer.get("default/b"), std::nullopt);
  EXPECT_EQ(informer.size(), 2u);
  EXPECT_EQ(informer.list_count(), 1u);
}

// A list (or get) with a filter decodes only the objects it accepts; the others come as their
// metadata alone (what admission's cache needs to find what it read from them).
TEST_F(InformerTest, ListAndGetWithAFilterHandOutWhatItDeclinesAsMetadataAlone) {
  const json a = client().create(resources::configmaps(), "default", config_map("a", "1"));
  const json b = client().create(resources::configmaps(), "default", config_map("b", "1"));
  Informer informer(client(), config_maps());
  RunningInformer running(informer);
  std::vector<std::pair<std::string, std::string>> asked;
  const std::vector<json> listed =
      informer.list([&](const std::string& uid, const std::string& version) {
        asked.emplace_back(uid, version);
        return uid == uid_of(a);
      });
  EXPECT_THAT(asked,
              UnorderedElementsAre(
                  std::pair(uid_of(a), a["metadata"]["resourceVersion"].get<std::string>()),
                  std::pair(uid_of(b), b["metadata"]["resourceVersion"].get<std::string>())));
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_EQ(listed[0], *informer.get("default/a"));  // decoded: the object as stored
  EXPECT_EQ(listed[1], json({{"metadata",
                              {{"name", "b"},
                               {"namespace", "default"},
                               {"uid", uid_of(b)},
                               {"resourceVersion", b["metadata"]["resourceVersion"]}}}}));
  EXPECT_EQ(informer.list([](const auto&, const auto&) { return true; }), informer.list());
  // get() gives one object's uid and resourceVersion, and the object where the filter accepts.
  const auto decline = [](const std::string&, const std::string&) { return false; };
  const std::optional<Versioned> declined = informer.get("default/b", decline);
  ASSERT_TRUE(declined);
  EXPECT_EQ(declined->uid, uid_of(b));
  EXPECT_EQ(declined->resource_version, b["metadata"]["resourceVersion"]);
  EXPECT_EQ(declined->object, std::nullopt);
  const std::optional<Versioned> accepted =
      informer.get("default/a", [](const auto&, const auto&) { return true; });
  ASSERT_TRUE(accepted);
  EXPECT_EQ(accepted->uid, uid_of(a));
  EXPECT_EQ(accepted->object, informer.get("default/a"));
  EXPECT_FALSE(informer.get("default/gone", decline));
}

// The Watcher commands follow objects with: start() returns once the first LIST has been
// delivered, changes follow on its thread, and an error of the first LIST is thrown, not retried.
TEST_F(InformerTest, WatcherDeliversTheListBeforeStartReturnsThenChanges) {
  client().create(resources::configmaps(), "default", config_map("a", "1"));
  EventLog log;
  Watcher watcher(client(), config_maps(), log.handlers(), [](const Error&) { return true; });
  watcher.start();
  EXPECT_THAT(log.events(), UnorderedElementsAre("add default/a"));
  client().create(resources::configmaps(), "default", config_map("b", "1"));
  ASSERT_TRUE(wait_until([&] { return log.events().size() == 2; }));
  EXPECT_EQ(log.events()[1], "add default/b");
  EXPECT_FALSE(watcher.stopped().stop_requested());
  watcher.stop();
  EXPECT_NO_THROW(watcher.rethrow());
}

TEST_F(InformerTest, WatcherThrowsTheFirstListsErrorInsteadOfRetrying) {
  EventLog log;
  Watcher watcher(client(), {.resource = resources::job(api::JobKind::TFJob)}, log.handlers(),
                  [](const Error&) { return false; });  // no CRDs here: 404
  const auto began = std::chrono::steady_clock::now();
  try {
    watcher.start();
    FAIL() << "start() returned";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::NotFound) << e.what();
  }
  EXPECT_TRUE(watcher.stopped().stop_requested());
  EXPECT_LT(std::chrono::steady_clock::now() - began, std::chrono::seconds(2));
}

TEST_F(InformerTest, LabelSelectorScopesTheCache) {
  const json mine = {{"app.kubernetes.io/managed-by", "trainctl"}};
  client().create(resources::configmaps(), "default", config_map("ours", "1", mine));
  client().create(resources::configmaps(), "default", config_map("theirs", "1"));
  Informer informer(client(), config_maps("app.kubernetes.io/managed-by=trainctl"));
  EventLog log;
  informer.add_handlers(log.handlers());
  RunningInformer running(informer);
  client().create(resources::configmaps(), "default", config_map("theirs-2", "1"));
  client().create(resources::configmaps(), "default", config_map("ours-2", "1", mine));
  // The store holds an object before its handlers hear of it: wait for the event, not the size.
  ASSERT_TRUE(wait_until([&] { return log.events().size() == 2; }));
  EXPECT_THAT(log.events(), ::testing::ElementsAre("add default/ours", "add default/ours-2"));
  EXPECT_EQ(informer.size(), 2u);
  EXPECT_EQ(informer.get("default/theirs"), std::nullopt);
}

TEST_F(InformerTest, TransformShapesWhatIsStoredAndReported) {
  client().create(resources::configmaps(), "default", config_map("listed", "1"));
  InformerOptions options = config_maps();
  options.transform = [](json& object) { object.erase("data"); };
  Informer informer(client(), options);
  std::atomic<int> adds_with_data{0};
  informer.add_handlers({.on_add = [&](const json& o) { adds_with_data += o.contains("data"); }});
  RunningInformer running(informer);
  client().create(resources::configmaps(), "default", config_map("watched", "1"));
  ASSERT_TRUE(wait_until([&] { return informer.size() == 2; }));
  EXPECT_FALSE(informer.get("default/listed")->contains("data"));
  EXPECT_FALSE(informer.get("default/watched")->contains("data"));
  EXPECT_EQ(adds_with_data, 0);

  json with_fields = {{"metadata", {{"name", "x"}, {"managedFields", json::array({{}})}}}};
  strip_managed_fields(with_fields);
  EXPECT_EQ(with_fields, (json{{"metadata", {{"name", "x"}}}}));
}

TEST_F(InformerTest, PaginatedListCachesEveryPage) {
  for (int i = 0; i < 7; ++i)
    client().create(resources::configmaps(), "default", config_map(fmt::format("cm-{}", i), "1"));
  InformerOptions options = config_maps();
  options.page_size = 3;
  Informer informer(client(), options);
  RunningInformer running(informer);
  EXPECT_EQ(informer.size(), 7u);
}

TEST_F(InformerTest, ResumesFromTheLastResourceVersionWithoutRelisting) {
  sandbox::Faults faults;
  faults.drop_watches_after = std::chrono::seconds(1);
  set_faults(faults);
  client().create(resources::configmaps(), "default", config_map("a", "1"));
  Client informer_client(sandbox().admin_config());
  Informer informer(informer_client, config_maps());
  EventLog log;
  informer.add_handlers(log.handlers());
  RunningInformer running(informer);
  // LIST, the first WATCH, and a second WATCH once the server ended the first.
  ASSERT_TRUE(wait_until([&] { return informer_client.requests_sent() >= 3; }));
  client().create(resources::configmaps(), "default", config_map("b", "1"));
  ASSERT_TRUE(wait_until([&] { return log.events().size() == 2; }));  // stored, then heard of
  EXPECT_EQ(informer.list_count(), 1u);
  EXPECT_THAT(log.events(), ::testing::ElementsAre("add default/a", "add default/b"))
      << "a resumed watch neither repeats nor misses events";
}

TEST_F(InformerTest, RelistsAfterGoneAndReportsTheDifference) {
  for (const char* name : {"a", "b", "c"})
    client().create(resources::configmaps(), "default", config_map(name, "1"));
  sandbox::Faults faults;
  faults.drop_watches_after = std::chrono::seconds(1);  // set before the informer's first watch
  set_faults(faults);
  Client informer_client(sandbox().admin_config());
  Informer informer(informer_client, config_maps());
  EventLog log;
  informer.add_handlers(log.handlers());
  RunningInformer running(informer);
  log.clear();

  // Take the watch down (every request fails once the current one ends), change objects behind
  // the API server's back where no watch sees them, then make the resume point expire.
  faults.error_rate = 1;
  set_faults(faults);
  const auto sent = informer_client.requests_sent();
  ASSERT_TRUE(wait_until([&] { return informer_client.requests_sent() > sent; }));
  sandbox().store().create("configmaps", config_map("d", "1"));
  sandbox().store().modify("configmaps", "default", "a", sandbox::WritePart::Main,
                           [](json& o) { o["data"]["value"] = "2"; });
  sandbox().store().remove("configmaps", "default", "b");
  set_faults({.gone_on_watch_resume = true});
  ASSERT_TRUE(wait_until([&] { return informer.list_count() >= 2; }));
  set_faults({});

  ASSERT_TRUE(wait_until([&] { return log.events().size() >= 3; }));
  EXPECT_THAT(log.events(),
              UnorderedElementsAre("add default/d", "update default/a 1->2", "delete default/b"))
      << "unchanged objects are not reported again";
  EXPECT_EQ(informer.size(), 3u);
  // Still current afterwards.
  client().create(resources::configmaps(), "default", config_map("e", "1"));
  ASSERT_TRUE(wait_until([&] { return informer.get("default/e").has_value(); }));
}

/// What an informer said about losing its server and recovering.
struct LossLog {
  explicit LossLog(InformerOptions& options) {
    options.on_error = [this](const Error& e) {
      if (is_too_large_resource_version(e))
        ++too_large;
    };
    options.on_lost = [this](const Error& e) {
      std::lock_guard lock(mu);
      lost.push_back(e);
    };
    options.on_recovered = [this](std::size_t count, std::chrono::steady_clock::duration) {
      std::lock_guard lock(mu);
      recovered.push_back(count);
    };
  }
  std::vector<Error> losses() {
    std::lock_guard lock(mu);
    return lost;
  }
  std::vector<std::size_t> recoveries() {
    std::lock_guard lock(mu);
    return recovered;
  }

  std::mutex mu;
  std::vector<Error> lost;
  std::vector<std::size_t> recovered;
  std::atomic<int> too_large{0};
};

TEST_F(InformerTest, RecoversWhenTheServerRestartsWithoutItsDataAndReportsTheDifference) {
  // Take the first server's resourceVersion well past where the restarted one will be.
  client().create(resources::configmaps(), "default", config_map("kept", "1"));
  client().create(resources::configmaps(), "default", config_map("gone", "1"));
  json churn = client().create(resources::configmaps(), "default", config_map("churn", "0"));
  for (int i = 1; i <= 300; ++i) {
    churn["data"]["value"] = std::to_string(i);
    churn = client().update(resources::configmaps(), "default", churn);
  }
  client().remove(resources::configmaps(), "default", "churn");
  Client informer_client(sandbox().admin_config());
  InformerOptions options = config_maps();
  LossLog losses(options);
  Informer informer(informer_client, options);
  EventLog log;
  informer.add_handlers(log.handlers());
  RunningInformer running(informer);
  EXPECT_TRUE(informer.in_sync());
  log.clear();
  const std::uint64_t before = std::stoull(informer.last_resource_version());

  local_.restart([&] {
    EXPECT_TRUE(wait_until([&] { return !informer.in_sync(); }))
        << "the broken watch is a loss of the server";
    EXPECT_TRUE(informer.has_synced()) << "has_synced() still means: the first LIST is done";
  });
  // What the restarted server holds: "kept" again (a new object), something new, not "gone".
  client().create(resources::configmaps(), "default", config_map("kept", "2"));
  client().create(resources::configmaps(), "default", config_map("new", "1"));
  ASSERT_LT(std::stoull(client()
                            .list(resources::configmaps(), "default")["metadata"]["resourceVersion"]
                            .get<std::string>()),
            before);

  ASSERT_TRUE(wait_until([&] { return informer.in_sync(); }, std::chrono::seconds(20)));
  EXPECT_THAT(log.events(), UnorderedElementsAre("update default/kept 1->2", "add default/new",
                                                 "delete default/gone"));
  EXPECT_EQ(informer.size(), 2u);
  EXPECT_GE(losses.too_large.load(), 1)
      << "the list at the old version was refused: 504 Too large resource version";
  ASSERT_EQ(losses.losses().size(), 1u) << "one loss, reported once";
  EXPECT_EQ(losses.losses()[0].kind(), ErrorKind::Connection) << losses.losses()[0].what();
  EXPECT_EQ(losses.recoveries(), std::vector<std::size_t>{2});
  // And it follows the new server.
  client().create(resources::configmaps(), "default", config_map("later", "1"));
  ASSERT_TRUE(wait_until([&] { return informer.get("default/later").has_value(); }));
}

TEST_F(InformerTest, ListsFromScratchAfterRepeatedWatchFailures) {
  client().create(resources::configmaps(), "default", config_map("a", "1"));
  InformerOptions options = config_maps();
  LossLog losses(options);
  sandbox::Faults faults = end_watches_after_a_second();
  Informer informer(client(), options);
  RunningInformer running(informer);
  // Every watch from now on fails with a 500: a reachable server, so the informer keeps its
  // version for kMaxWatchFailures tries before it gives up on it.
  faults.error_rate = 1;
  set_faults(faults);
  ASSERT_TRUE(wait_until([&] { return !informer.in_sync(); }));
  ASSERT_EQ(losses.losses().size(), 1u);
  EXPECT_EQ(losses.losses()[0].http_code(), 500);
  EXPECT_THAT(losses.losses()[0].message(), ::testing::HasSubstr("injected fault"));
  set_faults({});
  ASSERT_TRUE(wait_until([&] { return informer.in_sync(); }, std::chrono::seconds(20)));
  EXPECT_EQ(informer.list_count(), 2u);
  EXPECT_EQ(losses.recoveries(), std::vector<std::size_t>{1});
}

TEST_F(InformerTest, ThrottledWatchesAreWaitedOutWithoutRelisting) {
  InformerOptions options = config_maps();
  LossLog losses(options);
  sandbox::Faults faults = end_watches_after_a_second();
  Client informer_client(sandbox().admin_config());
  Informer informer(informer_client, options);
  RunningInformer running(informer);
  // 429 asks for patience, not for a relist, however often it comes.
  faults.throttle_rate = 1;
  set_faults(faults);
  const auto sent = informer_client.requests_sent();
  ASSERT_TRUE(
      wait_until([&] { return informer_client.requests_sent() >= sent + kMaxWatchFailures + 2; }));
  EXPECT_TRUE(informer.in_sync());
  EXPECT_EQ(informer.list_count(), 1u);
  EXPECT_TRUE(losses.losses().empty());
}

TEST_F(InformerTest, IndexesObjectsByControllerOwner) {
  const json owner = client().create(resources::configmaps(), "default", config_map("owner", "1"));
  const std::string uid = owner["metadata"]["uid"];
  auto owned = [&](const std::string& name, bool controller) {
    json cm = config_map(name, "1");
    cm["metadata"]["ownerReferences"] = {{{"apiVersion", "v1"},
                                          {"kind", "ConfigMap"},
                                          {"name", "owner"},
                                          {"uid", uid},
                                          {"controller", controller}}};
    return client().create(resources::configmaps(), "default", cm);
  };
  owned("controlled-1", true);
  owned("referenced", false);
  Informer informer(client(), config_maps());
  informer.add_index(std::string(by_controller_uid), controller_uid_index());
  // A second index, filed before the first (indexes are kept by name).
  informer.add_index("by-name",
                     [](const json& o) { return std::vector<std::string>{trainctl::name_of(o)}; });
  RunningInformer running(informer);
  owned("controlled-2", true);

  auto names = [&] {
    std::set<std::string> out;
    for (const auto& o : informer.by_index(by_controller_uid, uid))
      out.insert(o["metadata"]["name"].get<std::string>());
    return out;
  };
  ASSERT_TRUE(wait_until([&] { return names().size() == 2; }));
  EXPECT_EQ(names(), (std::set<std::string>{"controlled-1", "controlled-2"}));
  client().remove(resources::configmaps(), "default", "controlled-1");
  ASSERT_TRUE(wait_until([&] { return names().size() == 1; }));
  EXPECT_TRUE(informer.by_index("by-name", "controlled-1").empty());
  // An update that drops the controller reference takes the object out of that value only.
  json released = client().get(resources::configmaps(), "default", "controlled-2");
  released["metadata"]["ownerReferences"][0]["controller"] = false;
  client().update(resources::configmaps(), "default", released);
  ASSERT_TRUE(wait_until([&] { return names().empty(); }));
  EXPECT_EQ(informer.by_index("by-name", "controlled-2").size(), 1u);
  EXPECT_TRUE(informer.by_index(by_controller_uid, "no-such-uid").empty());
  const Error e = testing::expect_error([&] { informer.by_index("by-node", "x"); });
  EXPECT_EQ(e.kind(), ErrorKind::Usage);
  EXPECT_THAT(e.message(), ::testing::HasSubstr("no index \"by-node\""));
}

// by_index with members: each object has those top-level members only, decoded as they are,
// however deeply the others nest (they are skipped while decoding).
TEST_F(InformerTest, ByIndexWithMembersHandsOutThoseAlone) {
  client().create(resources::services(), "default",
                  {{"metadata", {{"name", "projected"}, {"labels", {{"app", "x"}}}}},
                   {"spec",
                    {{"ports",
                      {{{"name", "http"}, {"port", 80}, {"targetPort", 8080}},
                       {{"name", "grpc"}, {"port", 81}}}},
                     {"selector", {{"app", "x"}}}}}});
  Informer informer(client(), {.resource = resources::services(), .namespace_ = "default"});
  informer.add_index("by-name",
                     [](const json& o) { return std::vector<std::string>{trainctl::name_of(o)}; });
  RunningInformer running(informer);
  ASSERT_TRUE(wait_until([&] { return !informer.by_index("by-name", "projected").empty(); }));
  const json whole = informer.by_index("by-name", "projected").at(0);
  ASSERT_TRUE(whole.contains("spec") && whole.contains("status")) << whole.dump();

  constexpr std::array<std::string_view, 1> metadata = {"metadata"};
  const json only_metadata = informer.by_index("by-name", "projected", metadata).at(0);
  EXPECT_EQ(only_metadata, json({{"metadata", whole["metadata"]}}));

  // Members kept after skipped ones (spec comes before status), in any order asked.
  constexpr std::array<std::string_view, 3> some = {"status", "kind", "metadata"};
  const json three = informer.by_index("by-name", "projected", some).at(0);
  EXPECT_EQ(three, json({{"kind", whole["kind"]},
                         {"metadata", whole["metadata"]},
                         {"status", whole["status"]}}));

  constexpr std::array<std::string_view, 1> spec = {"spec"};
  EXPECT_EQ(informer.by_index("by-name", "projected", spec).at(0), json({{"spec", whole["spec"]}}));
  constexpr std::array<std::string_view, 1> none = {"nothing"};
  EXPECT_EQ(informer.by_index("by-name", "projected", none).at(0), json::object());
}

TEST_F(InformerTest, StopsPromptly) {
  Informer informer(client(), config_maps());
  RunningInformer running(informer);
  const auto start_time = std::chrono::steady_clock::now();
  running.stop();
  EXPECT_LT(std::chrono::steady_clock::now() - start_time, std::chrono::seconds(2));
}

/// One replica in a leader election: its elector on a thread, and what its callbacks saw.
class Candidate {
 public:
  Candidate(Client& client, const std::string& identity, milliseconds lease_duration,
            milliseconds renew_deadline, bool release_on_cancel = true)
      : elector_(client, {.namespace_ = "kube-system",
                          .name = "trainctl-controller",
                          .identity = identity,
                          .lease_duration = lease_duration,
                          .renew_deadline = renew_deadline,
                          .retry_period = milliseconds(100),
                          .release_on_cancel = release_on_cancel}) {
    thread_ = std::jthread([this](std::stop_token stop) {
      elector_.run(stop, {.on_started_leading =
                              [this](std::stop_token leading) {
                                ++started_;
                                std::mutex mu;
                                std::condition_variable_any cv;
                                std::unique_lock lock(mu);
                                cv.wait(lock, leading, [] { return false; });
                                leading_work_ended_ = true;
                              },
                          .on_stopped_leading = [this] { ++stopped_; },
                          .on_error =
                              [this](const Error& e) {
                                if (e.kind() == ErrorKind::Conflict)
                                  ++conflicts_;
                              }});
      returned_ = true;
    });
  }
  /// Stops the elector and waits until run() returned.
  void stop() {
    thread_.request_stop();
    thread_.join();
  }

  LeaderElector& elector() { return elector_; }
  int started() const { return started_; }
  int stopped() const { return stopped_; }
  int conflicts() const { return conflicts_; }
  bool leading_work_ended() const { return leading_work_ended_; }
  bool returned() const { return returned_; }

 private:
  LeaderElector elector_;
  std::atomic<int> started_{0}, stopped_{0}, conflicts_{0};
  std::atomic<bool> leading_work_ended_{false}, returned_{false};
  std::jthread thread_;  // last: joined before the rest goes
};

class LeaderElectionTest : public testing::SandboxTest {
 protected:
  json lease() { return client().get(resources::leases(), "kube-system", "trainctl-controller"); }
};

TEST_F(LeaderElectionTest, ExactlyOneOfTwoLeadsAndRecordsTheLease) {
  Candidate a(client(), "replica-a", milliseconds(1000), milliseconds(700));
  Candidate b(client(), "replica-b", milliseconds(1000), milliseconds(700));
  ASSERT_TRUE(wait_until([&] { return a.elector().is_leader() || b.elector().is_leader(); }));
  bool both = false;
  // Several renewals (every 100 ms): the follower never takes over from a live leader.
  wait_until(
      [&] {
        both = both || (a.elector().is_leader() && b.elector().is_leader());
        return false;
      },
      milliseconds(600));
  EXPECT_FALSE(both);
  Candidate& leader = a.elector().is_leader() ? a : b;
  Candidate& follower = a.elector().is_leader() ? b : a;
  EXPECT_EQ(leader.started(), 1);
  EXPECT_EQ(follower.started(), 0);
  EXPECT_EQ(follower.elector().leader(), leader.elector().leader());

  const json spec = lease()["spec"];
  EXPECT_EQ(spec["holderIdentity"], leader.elector().leader());
  EXPECT_EQ(spec["leaseDurationSeconds"], 1);
  EXPECT_EQ(spec["leaseTransitions"], 0);
  EXPECT_THAT(spec["renewTime"].get<std::string>(),
              ::testing::MatchesRegex(
                  R"([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z)"));
  EXPECT_NE(spec["renewTime"], spec["acquireTime"]) << "renewed since it was acquired";
}

TEST_F(LeaderElectionTest, ReleaseOnStopHandsOverWithoutWaitingForExpiry) {
  // A long lease: only a release lets the follower in within a second.
  auto a =
      std::make_unique<Candidate>(client(), "replica-a", milliseconds(10'000), milliseconds(5'000));
  ASSERT_TRUE(wait_until([&] { return a->elector().is_leader(); }));
  Candidate b(client(), "replica-b", milliseconds(10'000), milliseconds(5'000));
  ASSERT_TRUE(wait_until([&] { return b.elector().leader() == "replica-a"; }));

  const auto stopped_at = std::chrono::steady_clock::now();
  a->stop();
  EXPECT_TRUE(a->leading_work_ended());
  EXPECT_EQ(a->stopped(), 1);
  EXPECT_FALSE(a->elector().is_leader());
  ASSERT_TRUE(wait_until([&] { return b.elector().is_leader(); }, milliseconds(2000)));
  EXPECT_LT(std::chrono::steady_clock::now() - stopped_at, milliseconds(2000));
  const json spec = lease()["spec"];
  EXPECT_EQ(spec["holderIdentity"], "replica-b");
  EXPECT_EQ(spec["leaseTransitions"], 1);
}

TEST_F(LeaderElectionTest, AKilledLeaderIsReplacedAfterTheLeaseDuration) {
  Candidate a(client(), "replica-a", milliseconds(1000), milliseconds(700),
              /*release_on_cancel=*/false);
  ASSERT_TRUE(wait_until([&] { return a.elector().is_leader(); }));
  Candidate b(client(), "replica-b", milliseconds(1000), milliseconds(700));
  ASSERT_TRUE(wait_until([&] { return b.elector().leader() == "replica-a"; }));

  const auto stopped_at = std::chrono::steady_clock::now();
  a.stop();  // no release: as if the process had been killed
  EXPECT_EQ(lease()["spec"]["holderIdentity"], "replica-a");
  ASSERT_TRUE(wait_until([&] { return b.elector().is_leader(); }, milliseconds(3000)));
  const auto waited = std::chrono::steady_clock::now() - stopped_at;
  EXPECT_GE(waited, milliseconds(500)) << "took over before the lease could have expired";
  EXPECT_EQ(lease()["spec"]["holderIdentity"], "replica-b");
}

TEST_F(LeaderElectionTest, ALeaderThatCannotRenewGivesUpAfterTheRenewDeadline) {
  Candidate a(client(), "replica-a", milliseconds(1000), milliseconds(700));
  ASSERT_TRUE(wait_until([&] { return a.elector().is_leader(); }));
  sandbox().api().set_faults({.conflict_on_update = true});
  ASSERT_TRUE(wait_until([&] { return a.returned(); }, milliseconds(3000)));
  EXPECT_FALSE(a.elector().is_leader());
  EXPECT_TRUE(a.leading_work_ended());
  EXPECT_EQ(a.stopped(), 1);
  EXPECT_GT(a.conflicts(), 0) << "renewals were refused with Conflict";
}

}  // namespace
}  // namespace trainctl::kube::cache
