#pragma once

// The values the built-in templates (tfjob, pytorchjob, mpijob) read, described once: each key,
// its type and bounds, and the flag that sets it. The typed flags, --set, --values, the
// configuration files and TRAINCTL_* are all checked against it before anything is rendered, so
// a bad value is an error naming the flag or key instead of a different job. A template of the
// user's own (--template, $TRAINCTL_TEMPLATE_PATH, ~/.config/trainctl/templates) has no schema
// and takes any key.

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "api/job.h"

namespace trainctl::render {

/// What a value holds. Any value may also be null, which leaves it unset.
enum class ValueType {
  String,        // text
  OneOf,         // one of ValueSpec::allowed
  Integer,       // a whole number within [min, max]
  Boolean,       // true or false
  Quantity,      // a Kubernetes quantity, e.g. "500m", "16Gi", or a plain number
  StringList,    // a list of strings (command, args)
  StringMap,     // {key: string} (labels, annotations, nodeSelector)
  EnvList,       // [{name, value | valueFrom}], or {NAME: scalar}
  Volumes,       // [{pvc, mount, readOnly}] or ["PVC:PATH[:ro|:rw]"]
  Tolerations,   // a list of Kubernetes tolerations (objects)
  PullSecrets,   // a list of secret names, or of {name} objects
  NprocPerNode,  // "auto", "cpu", "gpu" or a positive integer
  Object,        // any object, passed through (elasticPolicy)
};

/// One value a built-in template reads.
struct ValueSpec {
  std::string_view key;
  ValueType type;
  /// The flag that sets it ("--workers"); for a replica role's keys the part after the role
  /// (`image` for --worker-image); empty when only --set and --values do.
  std::string_view flag;
  std::int64_t min = 0;  // Integer
  std::int64_t max = std::numeric_limits<std::int64_t>::max();
  std::span<const std::string_view> allowed = {};  // OneOf
};

/// A replica role whose settings can be given apart (`worker.image`, `ps: {replicas: 2}`).
struct RoleSpec {
  std::string_view name;  // "worker"
  /// The role's replica count: `<role>.replicas`, or (with `count_flag`) the role itself as a
  /// number, as `--ps 2` gives it.
  bool has_replicas = false;
  std::string_view count_flag;  // "--ps"; empty when the count is not a top-level number
  std::int64_t min_replicas = 0;
  std::int64_t max_replicas = std::numeric_limits<std::int64_t>::max();
};

/// The values one built-in template reads.
struct ValueSchema {
  api::JobKind kind;
  std::string_view template_name;  // "pytorchjob"
  std::vector<ValueSpec> values;   // top-level keys other than the roles
  std::vector<RoleSpec> roles;
  std::span<const ValueSpec> role_values;  // the keys of every role's section (not `replicas`)

  const ValueSpec* find(std::string_view key) const;
  const RoleSpec* find_role(std::string_view name) const;
  const ValueSpec* find_role_value(std::string_view key) const;
};

/// The schema of the template shipped for `kind`.
const ValueSchema& builtin_schema(api::JobKind kind);

/// Where a layer of values came from, to name it in errors.
struct ValueOrigin {
  /// "--set workers=abc", "values.yaml", "TRAINCTL_WORKERS"; ignored for flags.
  std::string label;
  /// The typed flags (--workers, --gpus, ...): errors name the flag.
  bool flags = false;
  /// Defaults shared by every template (.trainctl.yaml, the user's config.yaml, TRAINCTL_*):
  /// values another built-in template reads are let through, so one file can hold them all.
  bool shared = false;
};

/// Checks one layer of values against `schema`. Throws Error(Usage) listing every problem, each
/// naming the flag (for flags) or the origin and key path, with a "did you mean" for an unknown
/// key.
void check_values(const nlohmann::json& layer, const ValueSchema& schema,
                  const ValueOrigin& origin);

/// Checks that every replica the values make has an image (`image`, or `<role>.image` for each
/// role that has replicas); Error(Usage) "--image is required ..." otherwise.
void require_image(const nlohmann::json& values, const ValueSchema& schema);

/// Parses a volume as --volume and `volumes` entries spell it, `PVC:PATH[:ro|:rw]`, into
/// {pvc, mount, readOnly}; the mode is read-write unless `:ro`. Throws Error(Usage) whose
/// message says what is wrong without naming the flag or key (the caller prefixes it).
nlohmann::json parse_volume(std::string_view text);

}  // namespace trainctl::render
