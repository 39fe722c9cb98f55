// ValidatePodSpec (pkg/apis/core/validation, v1.26) for a pod's spec and a pod template's: what
// kube-apiserver refuses with 422 Invalid, in its order and words. The spec it sees is defaulted
// (default_pod_spec, in pods.cc).

#include <fmt/format.h>

#include <map>
#include <set>

#include "api/quantity.h"
#include "api/resources.h"
#include "error.h"
#include "json_access.h"
#include "sandbox/strategies/builtin.h"
#include "sandbox/table.h"

namespace trainctl::sandbox {

using nlohmann::json;

namespace {

/// A quantity as the server prints a bad value: as written.
std::string written(const json& v) {
  return v.is_string() ? api::names::go_quote(v.get_ref<const std::string&>())
                       : api::names::go_quote(v.dump());
}

/// validateEnv's name rule.
void validate_env(const json& container, const std::string& path, std::vector<FieldError>& errs) {
  const json& env = member(container, "env");
  for (std::size_t i = 0; env.is_array() && i < env.size(); ++i) {
    const std::string name = string_member(env[i], "name");
    const std::string field = fmt::format("{}.env[{}].name", path, i);
    if (name.empty())
      errs.push_back(required_value(field, ""));
    else if (!api::is_env_var_name(name))
      errs.push_back(invalid_value(
          field, api::names::go_quote(name),
          "a valid environment variable name must consist of alphabetic characters, digits, "
          "'_', '-', or '.', and must not start with a digit (e.g. 'my.env-name',  or "
          "'MY_ENV.NAME',  or 'MyEnvName1', regex used for validation is "
          "'[-._a-zA-Z][-._a-zA-Z0-9]*')"));
  }
}

/// ValidateResourceRequirements: quantities not negative, extended resources whole, a request
/// at most its limit, and for resources that cannot be overcommitted (GPUs, every extended
/// resource, hugepages) equal to a limit that must be set. The server prints a bad whole-number
/// quantity as Go's struct dump; the sandbox as written.
void validate_resources(const json& container, const std::string& path,
                        std::vector<FieldError>& errs) {
  const json& resources = member(container, "resources");
  const json& limits = member(resources, "limits");
  const json& requests = member(resources, "requests");
  const auto quantities = [&](const json& list, const std::string& list_path) {
    std::map<std::string, std::int64_t> parsed;
    if (!list.is_object())
      return parsed;
    for (const auto& [name, value] : list.items()) {
      const std::string field = fmt::format("{}[{}]", list_path, name);
      std::int64_t milli = 0;
      try {
        milli = api::quantity_milli(value);
      } catch (const Error&) {
        continue;  // the real server's decoder refuses it (400); the sandbox does not decode pods
      }
      if (milli < 0)
        errs.push_back(invalid_value(field, written(value), "must be greater than or equal to 0"));
      else if (api::is_extended_resource(name) && milli % 1000 != 0)
        errs.push_back(invalid_value(field, written(value), "must be an integer"));
      else
        parsed[name] = milli;
    }
    return parsed;
  };
  const std::string limits_path = path + ".resources.limits";
  const std::string requests_path = path + ".resources.requests";
  const auto limit = quantities(limits, limits_path);
  const auto request = quantities(requests, requests_path);
  for (const auto& [name, milli] : request) {
    const auto it = limit.find(name);
    if (it == limit.end()) {
      if (!api::overcommit_allowed(name) && !limits.contains(name))
        errs.push_back(
            required_value(limits_path, "Limit must be set for non overcommitable resources"));
    } else if (milli != it->second && !api::overcommit_allowed(name)) {
      errs.push_back(invalid_value(requests_path, written(requests[name]),
                                   fmt::format("must be equal to {} limit", name)));
    } else if (milli > it->second) {
      errs.push_back(invalid_value(requests_path, written(requests[name]),
                                   fmt::format("must be less than or equal to {} limit", name)));
    }
  }
}

/// validateContainerPorts: a name is an IANA service name, unique in the container (checked only
/// when valid); containerPort is required, it and a hostPort are port numbers; the protocol is
/// one the server supports (empty is defaulted to TCP before validation).
void validate_ports(const json& container, const std::string& path, std::vector<FieldError>& errs) {
  std::set<std::string> names;
  const json& ports = array_member(container, "ports");
  for (std::size_t i = 0; i < ports.size(); ++i) {
    const json& port = ports[i];
    const std::string field = fmt::format("{}.ports[{}]", path, i);
    const std::string name = string_member(port, "name");
    if (!name.empty()) {
      const auto messages = api::names::port_name(name);
      for (const auto& message : messages)
        errs.push_back(invalid_value(field + ".name", api::names::go_quote(name), message));
      if (messages.empty() && !names.insert(name).second)
        errs.push_back(duplicate(field + ".name", api::names::go_quote(name)));
    }
    if (const std::int64_t number = integer_member(port, "containerPort"); number == 0) {
      errs.push_back(required_value(field + ".containerPort", ""));
    } else {
      for (const auto& message : api::names::port_number(number))
        errs.push_back(invalid_value(field + ".containerPort", std::to_string(number), message));
    }
    if (const std::int64_t host = integer_member(port, "hostPort"); host != 0) {
      for (const auto& message : api::names::port_number(host))
        errs.push_back(invalid_value(field + ".hostPort", std::to_string(host), message));
    }
    const std::string protocol = string_member(port, "protocol");
    if (!protocol.empty() && protocol != "SCTP" && protocol != "TCP" && protocol != "UDP") {
      errs.push_back(not_supported(field + ".protocol", api::names::go_quote(protocol),
                                   {"SCTP", "TCP", "UDP"}));
    }
  }
}

/// ValidateVolumeMounts: each mount names a volume of the pod and a path no earlier mount of the
/// container has.
void validate_volume_mounts(const json& container, const std::string& path,
                            const std::set<std::string>& volumes, std::vector<FieldError>& errs) {
  std::set<std::string> mount_paths;
  const json& mounts = array_member(container, "volumeMounts");
  for (std::size_t i = 0; i < mounts.size(); ++i) {
    const std::string field = fmt::format("{}.volumeMounts[{}]", path, i);
    const std::string name = string_member(mounts[i], "name");
    if (name.empty())
      errs.push_back(required_value(field + ".name", ""));
    if (!volumes.contains(name))
      errs.push_back(not_found(field + ".name", api::names::go_quote(name)));
    const std::string mount_path = string_member(mounts[i], "mountPath");
    if (mount_path.empty())
      errs.push_back(required_value(field + ".mountPath", ""));
    if (!mount_paths.insert(mount_path).second)
      errs.push_back(
          invalid_value(field + ".mountPath", api::names::go_quote(mount_path), "must be unique"));
  }
}

/// validateContainerCommon: what every container, app or init, is checked for.
void validate_container(const json& container, const std::string& path,
                        const std::set<std::string>& volumes, std::vector<FieldError>& errs) {
  const std::string name = string_member(container, "name");
  if (name.empty()) {
    errs.push_back(required_value(path + ".name", ""));
  } else {
    for (const auto& message : api::names::dns1123_label(name))
      errs.push_back(invalid_value(path + ".name", api::names::go_quote(name), message));
  }
  if (string_member(container, "image").empty())
    errs.push_back(required_value(path + ".image", ""));
  validate_ports(container, path, errs);
  validate_env(container, path, errs);
  validate_volume_mounts(container, path, volumes, errs);
  validate_resources(container, path, errs);
}

/// validateContainers and validateInitContainers: each container's own checks, then its name
/// must not be taken yet in `names` (the app containers' names, for init containers). An init
/// container without a name takes none.
void validate_containers(const json& containers, const std::string& path,
                         const std::set<std::string>& volumes, bool init,
                         std::set<std::string>& names, std::vector<FieldError>& errs) {
  for (std::size_t i = 0; i < containers.size(); ++i) {
    const std::string field = fmt::format("{}[{}]", path, i);
    validate_container(containers[i], field, volumes, errs);
    const std::string name = string_member(containers[i], "name");
    if (names.contains(name))
      errs.push_back(duplicate(field + ".name", api::names::go_quote(name)));
    else if (!init || !name.empty())
      names.insert(name);
  }
}

/// core.Toleration as Go's %#v prints it, the value the server shows for an Exists toleration
/// with a value. Go prints a set tolerationSeconds as the pointer's address, which the sandbox
/// cannot know: it prints one of the same shape.
std::string go_toleration(const json& toleration) {
  const auto text = [&](const char* key) {
    return api::names::go_quote(string_member(toleration, key));
  };
  return fmt::format(
      "core.Toleration{{Key:{}, Operator:{}, Value:{}, Effect:{}, TolerationSeconds:{}}}",
      text("key"), text("operator"), text("value"), text("effect"),
      member(toleration, "tolerationSeconds").is_null() ? "(*int64)(nil)"
                                                        : "(*int64)(0xc000000000)");
}

/// ValidateTolerations.
void validate_tolerations(const json& tolerations, const std::string& path,
                          std::vector<FieldError>& errs) {
  for (std::size_t i = 0; i < tolerations.size(); ++i) {
    const json& t = tolerations[i];
    const std::string field = fmt::format("{}[{}]", path, i);
    const std::string key = string_member(t, "key");
    const std::string op = string_member(t, "operator");
    const std::string value = string_member(t, "value");
    const std::string effect = string_member(t, "effect");
    if (!key.empty()) {
      for (const auto& message : api::names::qualified_name(key))
        errs.push_back(invalid_value(field + ".key", api::names::go_quote(key), message));
    }
    if (key.empty() && op != "Exists") {
      errs.push_back(invalid_value(field + ".operator", api::names::go_quote(op),
                                   "operator must be Exists when `key` is empty, which means "
                                   "\"match all values and all keys\""));
    }
    if (!member(t, "tolerationSeconds").is_null() && effect != "NoExecute") {
      errs.push_back(invalid_value(field + ".effect", api::names::go_quote(effect),
                                   "effect must be 'NoExecute' when `tolerationSeconds` is set"));
    }
    if (op.empty() || op == "Equal") {
      if (const auto messages = api::names::label_value(value); !messages.empty()) {
        errs.push_back(invalid_value(field + ".operator", api::names::go_quote(value),
                                     fmt::format("{}", fmt::join(messages, ";"))));
      }
    } else if (op == "Exists") {
      if (!value.empty()) {
        errs.push_back(invalid_value(field + ".operator", go_toleration(t),
                                     "value must be empty when `operator` is 'Exists'"));
      }
    } else {
      errs.push_back(
          not_supported(field + ".operator", api::names::go_quote(op), {"Equal", "Exists"}));
    }
    if (!effect.empty() && effect != "NoSchedule" && effect != "PreferNoSchedule" &&
        effect != "NoExecute") {
      errs.push_back(not_supported(field + ".effect", api::names::go_quote(effect),
                                   {"NoSchedule", "PreferNoSchedule", "NoExecute"}));
    }
  }
}

}  // namespace

void validate_pod_spec(const json& spec, const std::string& path, std::vector<FieldError>& errs) {
  std::set<std::string> volumes;
  for (const json& volume : array_member(spec, "volumes")) {
    if (const std::string name = string_member(volume, "name"); !name.empty())
      volumes.insert(name);
  }
  std::set<std::string> names;
  const json& containers = array_member(spec, "containers");
  if (containers.empty())
    errs.push_back(required_value(path + ".containers", ""));
  validate_containers(containers, path + ".containers", volumes, false, names, errs);
  validate_containers(array_member(spec, "initContainers"), path + ".initContainers", volumes, true,
                      names, errs);
  const json& restart_policy = member(spec, "restartPolicy");
  const std::string restart =
      restart_policy.is_string() ? restart_policy.get<std::string>() : "Always";
  if (restart != "Always" && restart != "OnFailure" && restart != "Never") {
    errs.push_back(not_supported(path + ".restartPolicy", api::names::go_quote(restart),
                                 {"Always", "OnFailure", "Never"}));
  }
  for (const auto& e : api::names::label_errors(member(spec, "nodeSelector")))
    errs.push_back({e.reason, path + ".nodeSelector", e.body});
  validate_tolerations(array_member(spec, "tolerations"), path + ".tolerations", errs);
}

}  // namespace trainctl::sandbox
