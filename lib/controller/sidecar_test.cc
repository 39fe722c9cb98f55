#include "controller/sidecar.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "api/well_known.h"

namespace trainctl::controller {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

json running() {
  return {{"running", {{"startedAt", "2024-05-01T12:00:00Z"}}}};
}
json terminated(int code) {
  return {{"terminated", {{"exitCode", code}}}};
}

/// A Running training pod with containers `tensorflow` and `istio-proxy` in the given states.
json meshed_pod(const std::string& name, json app_state, json proxy_state) {
  return {{"metadata", {{"name", name}, {"namespace", "team-a"}}},
          {"spec",
           {{"containers",
             {{{"name", "tensorflow"}, {"image", "tf:2"}},
              {{"name", "istio-proxy"}, {"image", "istio/proxyv2:1.22"}}}}}},
          {"status",
           {{"phase", "Running"},
            {"containerStatuses",
             {{{"name", "tensorflow"}, {"state", std::move(app_state)}},
              {{"name", "istio-proxy"}, {"state", std::move(proxy_state)}}}}}}};
}

TEST(SidecarTest, StopsTheProxyOnceTheTrainingContainersHaveTerminated) {
  EXPECT_THAT(
      sidecars_to_stop({meshed_pod("w-0", terminated(0), running()),
                        meshed_pod("w-1", terminated(1), running())}),
      ElementsAre(
          SidecarStop{
              "team-a", "w-0", "istio-proxy", {"pilot-agent", "request", "POST", "quitquitquit"}},
          SidecarStop{
              "team-a", "w-1", "istio-proxy", {"pilot-agent", "request", "POST", "quitquitquit"}}));
}

TEST(SidecarTest, LeavesPodsWhoseTrainingStillRuns) {
  json two_apps = meshed_pod("w-0", terminated(0), running());
  two_apps["spec"]["containers"].push_back({{"name", "logger"}});
  two_apps["status"]["containerStatuses"].push_back({{"name", "logger"}, {"state", running()}});
  json not_reported = meshed_pod("w-1", terminated(0), running());
  not_reported["spec"]["containers"].push_back({{"name", "logger"}});
  EXPECT_THAT(sidecars_to_stop({meshed_pod("w-2", running(), running()), two_apps, not_reported}),
              IsEmpty());
}

TEST(SidecarTest, SkipsPodsAlreadyAskedStoppedOrGone) {
  json asked = meshed_pod("asked", terminated(0), running());
  asked["metadata"]["annotations"][std::string(api::annotations::sidecar_stop_requested)] = "true";
  json deleting = meshed_pod("deleting", terminated(0), running());
  deleting["metadata"]["deletionTimestamp"] = "2024-05-01T12:00:00Z";
  json finished = meshed_pod("finished", terminated(0), running());
  finished["status"]["phase"] = "Succeeded";
  EXPECT_THAT(sidecars_to_stop(
                  {asked, deleting, finished, meshed_pod("stopped", terminated(0), terminated(0))}),
              IsEmpty());
}

TEST(SidecarTest, NativeSidecarsAndProxyOnlyPodsAreLeftAlone) {
  // Istio's native sidecar mode: istio-proxy is an init container with restartPolicy Always.
  json native = {{"metadata", {{"name", "native"}, {"namespace", "team-a"}}},
                 {"spec",
                  {{"initContainers", {{{"name", "istio-proxy"}, {"restartPolicy", "Always"}}}},
                   {"containers", {{{"name", "tensorflow"}}}}}},
                 {"status",
                  {{"phase", "Running"},
                   {"initContainerStatuses", {{{"name", "istio-proxy"}, {"state", running()}}}},
                   {"containerStatuses", {{{"name", "tensorflow"}, {"state", terminated(0)}}}}}}};
  json proxy_only = meshed_pod("proxy-only", terminated(0), running());
  proxy_only["spec"]["containers"].erase(0);
  EXPECT_THAT(sidecars_to_stop({native, proxy_only}), IsEmpty());
}

}  // namespace
}  // namespace trainctl::controller
