#include "install_manifests.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>

#include "api/manifest.h"
#include "error.h"
#include "json_access.h"
#include "text.h"

namespace trainctl::cli {
namespace {

using nlohmann::json;

/// The kinds the packaging uses, in apply order, with their resources.
const std::array<kube::Resource, 9>& packaged_kinds() {
  static const std::array<kube::Resource, 9> kinds = {{
      kube::resources::custom_resource_definitions(),
      kube::resources::namespaces(),
      {"", "v1", "serviceaccounts", true, "ServiceAccount"},
      {"rbac.authorization.k8s.io", "v1", "clusterroles", false, "ClusterRole"},
      {"rbac.authorization.k8s.io", "v1", "clusterrolebindings", false, "ClusterRoleBinding"},
      {"rbac.authorization.k8s.io", "v1", "roles", true, "Role"},
      {"rbac.authorization.k8s.io", "v1", "rolebindings", true, "RoleBinding"},
      kube::resources::services(),
      {"apps", "v1", "deployments", true, "Deployment"},
  }};
  return kinds;
}

/// The position of the object's kind in packaged_kinds().
std::size_t apply_rank(const json& object) {
  const auto& kinds = packaged_kinds();
  const std::string kind = object.value("kind", "");
  const auto it = std::find_if(kinds.begin(), kinds.end(),
                               [&](const kube::Resource& r) { return r.kind == kind; });
  if (it == kinds.end()) {
    throw Error(ErrorKind::Validation,
                fmt::format("packaging: {} {:?} is of a kind trainctl install does not know", kind,
                            name_of(object)));
  }
  return static_cast<std::size_t>(it - kinds.begin());
}

/// Moves an object from the packaged namespace to `ns`: its own namespace, the Namespace
/// itself, binding subjects and the controller's --leader-elect-namespace flag.
void retarget_namespace(json& object, const std::string& ns) {
  json& meta = object["metadata"];
  if (object.value("kind", "") == "Namespace")
    meta["name"] = ns;
  if (meta.value("namespace", "") == kPackagedNamespace)
    meta["namespace"] = ns;
  if (!object.contains("subjects"))
    return;
  for (json& subject : object["subjects"]) {
    if (subject.value("namespace", "") == kPackagedNamespace)
      subject["namespace"] = ns;
  }
}

void retarget_controller(json& object, const InstallSettings& settings) {
  if (object.value("kind", "") != "Deployment")
    return;
  const std::string packaged_flag = fmt::format("--leader-elect-namespace={}", kPackagedNamespace);
  for (json& container : object["spec"]["template"]["spec"]["containers"]) {
    if (!settings.image.empty())
      container["image"] = settings.image;
    if (!container.contains("command"))
      continue;
    for (json& arg : container["command"]) {
      if (arg == packaged_flag)
        arg = fmt::format("--leader-elect-namespace={}", settings.ns);
    }
  }
}

}  // namespace

std::vector<json> install_objects(const InstallSettings& settings) {
  std::vector<json> objects;
  for (const auto& file : embedded_manifests()) {
    if (settings.crds_only && !file.path.starts_with("crds/"))
      continue;
    for (auto& manifest : api::parse_manifests(file.text, "packaging/" + std::string(file.path)))
      objects.push_back(std::move(manifest.object));
  }
  for (json& object : objects) {
    retarget_namespace(object, settings.ns);
    retarget_controller(object, settings);
  }
  std::stable_sort(objects.begin(), objects.end(),
                   [](const json& a, const json& b) { return apply_rank(a) < apply_rank(b); });
  return objects;
}

std::string image_notice(const std::vector<json>& objects, const InstallSettings& settings) {
  const auto deployment = std::find_if(objects.begin(), objects.end(), [](const json& o) {
    return o.value("kind", "") == "Deployment";
  });
  if (deployment == objects.end())
    return "";
  const std::string image =
      (*deployment)["spec"]["template"]["spec"]["containers"][0].value("image", "");
  const std::string where = fmt::format("deployment {}/{}", settings.ns, name_of(*deployment));
  // The tag, when the reference ends in one (not a digest, not a registry's port).
  const std::size_t colon = image.rfind(':');
  const bool tagged = image.find('@') == std::string::npos && colon != std::string::npos &&
                      image.find('/', colon) == std::string::npos;
  const std::string tag = tagged ? image.substr(colon + 1) : "";
  if (!settings.image.empty()) {
    std::string notice =
        fmt::format("{} runs image {}: every node must be able to pull it", where, image);
    if (tagged) {
      notice += fmt::format(
          " (build it with packaging/image --tag {0}, push it with: skopeo copy "
          "oci:build/image/oci:{1} docker://{0})",
          image, tag);
    }
    return notice + "\n";
  }
  return fmt::format(
      "{} runs image {}, the packaged default, which no public registry serves: its pods cannot "
      "start until every node has it. Build the image with packaging/image (no Docker needed), "
      "push it with\n  skopeo copy oci:build/image/oci:{} docker://REGISTRY/trainctl:{}\nand "
      "install with\n  trainctl install --image REGISTRY/trainctl:{}\n(or import "
      "build/image/trainctl-image.tar into every node's runtime: ctr -n k8s.io image import)\n",
      where, image, tag, tag, tag);
}

bool is_crd(const json& object) {
  return object.value("kind", "") == "CustomResourceDefinition";
}

kube::Resource defined_resource(const json& crd) {
  const json& spec = crd.at("spec");
  const json& names = spec.at("names");
  std::string version;
  for (const auto& v : spec.at("versions")) {
    if (v.value("storage", false))
      version = v.value("name", "");
  }
  return {spec.value("group", ""), version, names.value("plural", ""),
          spec.value("scope", "Namespaced") == "Namespaced", names.value("kind", "")};
}

kube::Resource resource_of(const json& object) {
  return packaged_kinds()[apply_rank(object)];
}

std::string display_name(const json& object) {
  const kube::Resource r = resource_of(object);
  const std::string kind = to_lower(object.value("kind", ""));
  return r.group.empty() ? fmt::format("{}/{}", kind, name_of(object))
                         : fmt::format("{}.{}/{}", kind, r.group, name_of(object));
}

}  // namespace trainctl::cli
