#pragma once

// How the sandbox serves and stores each resource, after k8s.io/apiserver's registry/rest
// strategies: one ResourceStrategy per resource holds everything that differs between types
// (admission defaults and checks, PrepareForCreate/PrepareForUpdate with the status split, name
// rules, generation, delete behaviour, served versions and their conversion, Table columns,
// subresources, short names). The store and the API server ask the strategy instead of comparing
// resource names; adding a built-in resource is one file under strategies/ and one line in
// strategies/registry.cc.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sandbox/field_errors.h"
#include "sandbox/go_types.h"
#include "sandbox/store.h"

namespace trainctl::sandbox {

using TablePrintTime = std::chrono::system_clock::time_point;

/// One column of a resource's server-side Table (a meta.k8s.io/v1 TableColumnDefinition) and how
/// its cell is printed for one object.
struct PrintColumn {
  std::string name;
  std::string type = "string";
  std::string description;
  int priority = 0;  // 1 = only with -o wide
  std::function<nlohmann::json(const nlohmann::json& object, TablePrintTime now)> cell;
};

/// A subresource served besides status and scale (pods/log, pods/exec, pods/binding): its name,
/// the kind discovery lists and the verbs it allows.
struct Subresource {
  std::string name;
  std::string kind;
  std::vector<std::string> verbs;
};

/// What admission may need from the server it runs in.
struct AdmissionContext {
  /// The next free ClusterIP ("10.96.x.y"), as the service IP allocator hands it out.
  std::function<std::string()> allocate_cluster_ip;
  /// What admission plugins look up (a pod's ServiceAccount and PriorityClass).
  const Store* store = nullptr;
};

class ServedResources;

/// An authenticated caller, as the API server's authenticators name one.
struct UserInfo {
  std::string name;
  std::string uid;
  std::vector<std::string> groups;
};

/// The API verb that wrote an object.
enum class WriteVerb { Create, Update, Patch, Delete };

/// How deleting an object of the type proceeds.
enum class DeleteFlow {
  Finalizers,          // the registry's Delete: orphan/foreground finalizers, then removal
  NamespaceLifecycle,  // marks Terminating and deletes everything in the namespace first
};

/// The registry strategy of one resource. The defaults are those of a plain built-in type that
/// has no strategy of its own, or of a custom resource (a group no built-in one): see custom().
class ResourceStrategy {
 public:
  explicit ResourceStrategy(ResourceInfo info, std::vector<std::string> short_names = {},
                            std::vector<std::string> categories = {});
  virtual ~ResourceStrategy() = default;
  ResourceStrategy(const ResourceStrategy&) = delete;
  ResourceStrategy& operator=(const ResourceStrategy&) = delete;

  /// The type as the store files it (its storage version).
  const ResourceInfo& info() const { return info_; }
  /// kubectl's short names (discovery's shortNames).
  const std::vector<std::string>& short_names() const { return short_names_; }
  /// The categories it belongs to (discovery's categories: `kubectl get all` lists those in
  /// "all").
  const std::vector<std::string>& categories() const { return categories_; }
  /// Served from a CustomResourceDefinition: its group is not one kube-apiserver serves.
  bool custom() const;

  // --- Versions ---------------------------------------------------------------------------------

  /// The versions the type is served in, most preferred first (the storage version by default).
  virtual std::vector<std::string> served_versions() const;
  /// The stored object as `version` of the API shows it (apiVersion set to it); the default
  /// converts nothing else, as a CRD's "None" conversion.
  virtual nlohmann::json to_version(nlohmann::json stored, const std::string& version) const;
  /// An object a client sent in `version`, converted to the storage version.
  virtual nlohmann::json from_version(nlohmann::json object, const std::string& version) const;

  // --- Decoding and admission (the API server, before the store) ------------------------------

  /// What decoding a body (or a patch's result) into the Go type does.
  struct Decoded {
    /// The decoder's error ("json: cannot unmarshal ..."): the server answers 400 BadRequest for
    /// such a create or update body, 422 on `patch` for such a patch result.
    std::optional<std::string> error;
    /// Unknown fields dropped ("spec.foo"), which the request's fieldValidation warns about or
    /// refuses.
    std::vector<std::string> unknown_fields;
  };

  /// Decodes an object a client sent in `version`, normalizing what the decoder changes (a null
  /// string becomes ""); a custom resource is pruned against the version's structural schema and
  /// defaulted. The default decodes anything unchanged.
  virtual Decoded decode(nlohmann::json& object, const std::string& version) const;
  /// The Go struct a built-in type is decoded into, as far as the sandbox declares it
  /// (go_types.h): the default declares its metadata. The default decode refuses what
  /// json.Unmarshal into it refuses.
  virtual const GoStruct& go_type() const;

  /// Fills in what the real server defaults and throws ApiError(422 Invalid) for what its
  /// validation rejects, for a create through the API.
  virtual void admit(nlohmann::json& object, const AdmissionContext& context) const;

  // --- Storage (the store) ---------------------------------------------------------------------

  /// Whether metadata.generation counts spec changes.
  virtual bool tracks_generation() const;
  /// Whether a PUT of a missing object creates it (AllowCreateOnUpdate).
  virtual bool allows_create_on_update() const;
  /// Whether a PUT without resourceVersion is taken (AllowUnconditionalUpdate): built-ins only.
  virtual bool allows_unconditional_update() const;
  /// Whether a delete without propagation policy orphans the dependents (batch/v1 Jobs).
  virtual bool orphans_dependents_by_default() const;
  /// What is wrong with `name` as the object's metadata.name (ValidateObjectMeta's name check).
  virtual std::vector<std::string> name_errors(std::string_view name) const;
  /// The etcd key prefix the real server files the type under, as its storage errors quote it.
  virtual std::string storage_prefix() const;
  /// PrepareForCreate: what the registry sets or clears on a new object (uid and name known).
  /// The default resets the status of a type with a status subresource (clears it for a custom
  /// resource).
  virtual void prepare_for_create(nlohmann::json& object) const;
  /// After generateName picked a name (the namespace's name label follows it).
  virtual void name_generated(nlohmann::json& object) const;
  /// PrepareForUpdate: `next` is what the write asked for, `old` the stored object. The default
  /// is the status split: a main-resource write keeps the stored status (types with a status
  /// subresource), a status write keeps everything but the status.
  virtual void prepare_for_update(const nlohmann::json& old, nlohmann::json& next,
                                  WritePart part) const;
  /// Validate/ValidateUpdate beyond ObjectMeta, on every create (`part` Main) and update: appends
  /// what is wrong with the object as stored (a custom resource's schema; nothing by default). A
  /// status write (`part` Status) changed only the status, as the built-in types' status
  /// strategies check it: their spec checks need not run again.
  virtual void validate(const nlohmann::json& object, WritePart part,
                        std::vector<FieldError>& errs) const;
  /// Whether delete preconditions are checked in the storage layer's words (the namespace and
  /// CRD registries check them before deleting) rather than rest.BeforeDelete's.
  virtual bool checks_delete_preconditions_in_storage() const;
  /// Throws when the object named `name` may not be deleted at all (the system namespaces).
  virtual void check_deletable(const std::string& name) const;
  virtual DeleteFlow delete_flow() const;
  /// CheckGracefulDelete: the grace period, in seconds, a delete of `object` gives it when
  /// `requested` is DeleteOptions.gracePeriodSeconds (already at least 1 when it was negative);
  /// nullopt for types deleted at once (no RESTGracefulDeleteStrategy, the default).
  virtual std::optional<std::int64_t> graceful_delete_period(
      const nlohmann::json& object, std::optional<std::int64_t> requested) const;

  // --- Serving (the API server) ----------------------------------------------------------------

  /// False for a type that is never stored, whose create the server answers at once
  /// (authorization.k8s.io's access reviews, authentication.k8s.io's self review): see answer().
  virtual bool stored() const;
  /// The verbs discovery lists: every verb of a stored type (the default), "create" for one
  /// that is not.
  virtual std::vector<std::string> verbs() const;
  /// What the server answers `caller`'s create of `object` in `ns` (empty: cluster-scoped) with,
  /// for a type that is not stored: the object with its status. Throws the ApiError the real
  /// server's validation answers.
  virtual nlohmann::json answer(nlohmann::json object, const UserInfo& caller,
                                const std::string& ns) const;

  /// The Table columns of `version`, NAME first (NAME and AGE by default).
  virtual std::vector<PrintColumn> columns(const std::string& version) const;
  /// The fields a field selector may name (its field label conversion); empty for the default,
  /// metadata.name and metadata.namespace.
  virtual std::vector<std::string> field_labels() const;
  /// Subresources beyond status and scale.
  virtual std::vector<Subresource> subresources() const;
  /// The scale subresource of `version` as a CRD's subresources.scale gives it
  /// (specReplicasPath, statusReplicasPath, labelSelectorPath); null when it has none.
  virtual const nlohmann::json* scale(const std::string& version) const;
  /// Called after a write through the API changed an object (not for dry runs), with the object
  /// the response will show, which the hook may refresh: the CRD strategy serves what the
  /// definition now says (and answers a create with the established definition), the namespace
  /// strategy creates the default ServiceAccount of a new namespace.
  virtual void after_write(nlohmann::json& written, WriteVerb verb, ServedResources& served) const;

 private:
  ResourceInfo info_;
  std::vector<std::string> short_names_;
  std::vector<std::string> categories_;
  GoStruct go_type_;  // the object with its metadata
};

using StrategyPtr = std::shared_ptr<const ResourceStrategy>;

/// The built-in resources' strategies, in the order discovery lists them (namespaces first).
const std::vector<StrategyPtr>& builtin_strategies();

/// The strategy for a type the store files: the built-in one for its group_resource, else a
/// default one (custom rules for a custom resource's group).
StrategyPtr strategy_for(const ResourceInfo& info);

/// The built-in strategy for `group_resource`, or null.
StrategyPtr builtin_strategy(std::string_view group_resource);

/// The NAME column every Table starts with and the AGE column most have.
PrintColumn name_column();
PrintColumn age_column();

}  // namespace trainctl::sandbox
