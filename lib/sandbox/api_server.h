#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "sandbox/cluster.h"
#include "sandbox/http_server.h"
#include "sandbox/served_resources.h"
#include "sandbox/store.h"

namespace trainctl::sandbox {

/// Fault injection for reliability tests; everything off by default. Also settable at runtime
/// through PUT /sandbox/faults.
struct Faults {
  std::chrono::milliseconds latency{0};        // added to every request
  double error_rate = 0;                       // fraction of requests answered 500
  double throttle_rate = 0;                    // fraction answered 429 with Retry-After: 1
  std::chrono::seconds drop_watches_after{0};  // end every watch after this long; 0 = never
  bool gone_on_watch_resume = false;           // a watch from a resourceVersion gets 410
  bool conflict_on_update = false;             // every PUT and PATCH gets 409
  bool forbid_exec = false;  // pods/exec gets 403, as RBAC without pods/exec create answers
  /// Every watch lags the store by this long, as one served from a watch cache that lags etcd:
  /// each event (the initial ADDED burst and bookmarks too) leaves the server no sooner than
  /// this after the write (or the watch's start) that made it, in order, without holding up
  /// writers or other watches. Lists and gets stay current. A change applies to open watches.
  std::chrono::milliseconds watch_delay{0};

  nlohmann::json to_json() const;
  static Faults from_json(const nlohmann::json& doc);  // throws Error(BadRequest)
};

/// What the authorizer sees of one resource request (kube-apiserver's RequestInfo and
/// authorizer.Attributes): who asked, the verb as RBAC names it (get, list, watch, create, update,
/// patch, delete, deletecollection), and what was addressed.
struct RequestAttributes {
  std::string user;
  std::vector<std::string> groups;
  std::string verb;
  std::string api_group;  // "" for the core group
  std::string resource;
  std::string subresource;
  std::string ns;
  std::string name;
};

struct ApiServerOptions {
  /// Bearer tokens that authenticate (kube-apiserver's --token-auth-file).
  std::map<std::string, UserInfo> tokens;
  /// The server's own address, for discovery's serverAddressByClientCIDRs.
  std::string advertise_address = "127.0.0.1:6443";
  Faults faults;
  /// Receives what went wrong inside a request that the client only sees as an error status
  /// (an exception that is no API error); may be called from any thread. Empty = dropped.
  std::function<void(std::string_view)> error_log;
  /// Sees every authenticated resource request before it is served, as kube-apiserver's audit
  /// log does; may be called from any thread. Empty = none.
  std::function<void(const RequestAttributes&)> audit;
};

/// The Kubernetes REST API over a Store: discovery, the verbs on every served resource (each
/// resource's behaviour is its ResourceStrategy's), CustomResourceDefinitions that start (and
/// stop) serving their resources, errors as Status objects, watches, pods/log and pods/exec,
/// authentication and fault injection.
class ApiServer {
 public:
  ApiServer(Store& store, ApiServerOptions options);

  /// The handler to give HttpsServer.
  void handle(const Request& request, ResponseWriter& response);

  /// The kubelets behind pods/log and pods/exec; without them those answer 503.
  void set_cluster(SimulatedCluster* cluster) { cluster_ = cluster; }
  /// The address discovery advertises (known once the HTTPS server has bound its port).
  void set_advertise_address(std::string address);
  void set_faults(const Faults& faults);
  Faults faults() const;

  /// Loads kube-apiserver's token file format: `token,user,uid,"group1,group2"` per line.
  static std::map<std::string, UserInfo> parse_token_file(const std::string& text);

 private:
  struct Route;
  struct GroupVersion;

  void serve(const Request& request, ResponseWriter& response, const UserInfo& user);
  bool serve_discovery(const Request& request, ResponseWriter& response);
  void serve_resource(const Request& request, ResponseWriter& response, Route& route);
  void serve_list(const Request& request, ResponseWriter& response, const Route& route);
  void serve_watch(const Request& request, ResponseWriter& response, const Route& route);
  void serve_create(const Request& request, ResponseWriter& response, const Route& route);
  /// A create's body, checked to be an object of the route's apiVersion and kind (absent ones
  /// are taken as the route's).
  static nlohmann::json received_object(const Request& request, const Route& route);
  void serve_update(const Request& request, ResponseWriter& response, const Route& route);
  void serve_patch(const Request& request, ResponseWriter& response, const Route& route);
  void serve_delete(const Request& request, ResponseWriter& response, const Route& route);
  void serve_delete_collection(const Request& request, ResponseWriter& response,
                               const Route& route);
  void serve_logs(const Request& request, ResponseWriter& response, const Route& route);
  void serve_exec(const Request& request, ResponseWriter& response, const Route& route);
  void serve_binding(const Request& request, ResponseWriter& response, const Route& route);
  /// A custom resource's scale subresource (autoscaling/v1 Scale), as the apiextensions server
  /// maps it onto the CRD's specReplicasPath, statusReplicasPath and labelSelectorPath.
  void serve_scale(const Request& request, ResponseWriter& response, const Route& route);

  std::optional<UserInfo> authenticate(const Request& request) const;
  /// Hands what failed inside a request to ApiServerOptions::error_log.
  void log_failure(const Request& request, std::string_view what) const;
  bool inject_fault(ResponseWriter& response);
  std::optional<Route> route(const std::string& path) const;
  /// Answers with `body`, or with it printed as a Table when the client asked for one.
  void respond_objects(const Request& request, ResponseWriter& response, const Route& route,
                       nlohmann::json body);
  /// What admission needs from the server (the ClusterIP allocator).
  AdmissionContext admission_context();

  Store& store_;
  ApiServerOptions options_;
  SimulatedCluster* cluster_ = nullptr;
  ServedResources served_;
  mutable std::mutex mu_;
  std::mt19937_64 rng_{std::random_device{}()};
  std::uint32_t next_cluster_ip_ = 2;  // 10.96.0.1 is the `kubernetes` Service's
};

/// What the API server does to a pod it is asked to create: the defaults of v1 (SetDefaults_Pod,
/// SetDefaults_PodSpec) and its admission plugins ServiceAccount, Priority and
/// DefaultTolerationSeconds, which read `store` (and refuse with 403 as kube-apiserver's do). The
/// checks of ValidatePodSpec are the pod strategy's validate, which the store runs after the
/// metadata's. The sandbox's own controllers run it on the pods they create, as the real ones go
/// through the API.
void admit_pod(nlohmann::json& pod, const Store& store);

/// Registers the built-in resources the sandbox serves and creates the initial namespaces.
void install_builtin_resources(Store& store);

/// The `default/kubernetes` Service every cluster has, as kube-apiserver keeps it: 10.96.0.1,
/// port https 443 to the API server's own port `port`, labels component=apiserver and
/// provider=kubernetes. Made or brought up to date (the port may differ at each start).
void publish_kubernetes_service(Store& store, int port);

/// The built-in resource types (core, coordination, scheduling, batch, apiextensions, events) in
/// their storage versions.
const std::vector<ResourceInfo>& builtin_resources();

}  // namespace trainctl::sandbox
