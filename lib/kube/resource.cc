#include "kube/resource.h"

#include <fmt/format.h>

#include "error.h"

namespace trainctl::kube {

std::string Resource::api_version() const {
  return group.empty() ? version : group + "/" + version;
}

std::string Resource::display_name() const {
  return group.empty() ? fmt::format("{}/{}", plural, version)
                       : fmt::format("{}.{}/{}", plural, group, version);
}

namespace resources {
Resource pods() {
  return {"", "v1", "pods", true, "Pod"};
}
Resource services() {
  return {"", "v1", "services", true, "Service"};
}
Resource configmaps() {
  return {"", "v1", "configmaps", true, "ConfigMap"};
}
Resource secrets() {
  return {"", "v1", "secrets", true, "Secret"};
}
Resource namespaces() {
  return {"", "v1", "namespaces", false, "Namespace"};
}
Resource nodes() {
  return {"", "v1", "nodes", false, "Node"};
}
Resource events() {
  return {"", "v1", "events", true, "Event"};
}
Resource leases() {
  return {"coordination.k8s.io", "v1", "leases", true, "Lease"};
}
Resource jobs() {
  return {"batch", "v1", "jobs", true, "Job"};
}
Resource horizontalpodautoscalers() {
  return {"autoscaling", "v2", "horizontalpodautoscalers", true, "HorizontalPodAutoscaler"};
}
Resource custom_resource_definitions() {
  return {"apiextensions.k8s.io", "v1", "customresourcedefinitions", false,
          "CustomResourceDefinition"};
}
Resource job(api::JobKind kind) {
  const api::JobKindInfo& info = api::job_kind_info(kind);
  const std::string_view api_version = info.api_version;
  const std::size_t slash = api_version.find('/');
  return {std::string(api_version.substr(0, slash)), std::string(api_version.substr(slash + 1)),
          std::string(info.plural), true, std::string(info.name)};
}
Resource podgroups() {
  return {"scheduling.volcano.sh", "v1beta1", "podgroups", true, "PodGroup"};
}
Resource scheduler_plugins_podgroups() {
  return {"scheduling.x-k8s.io", "v1alpha1", "podgroups", true, "PodGroup"};
}
Resource queues() {
  return {"scheduling.volcano.sh", "v1beta1", "queues", false, "Queue"};
}
Resource priority_classes() {
  return {"scheduling.k8s.io", "v1", "priorityclasses", false, "PriorityClass"};
}
}  // namespace resources

std::string url_escape(std::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    const bool unreserved = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                            (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.' || c == '~';
    if (unreserved) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 0xF]);
    }
  }
  return out;
}

Query& Query::add(std::string key, std::string value) {
  params_.emplace_back(std::move(key), std::move(value));
  return *this;
}

Query& Query::add_if(bool cond, std::string key, std::string value) {
  if (cond)
    add(std::move(key), std::move(value));
  return *this;
}

std::string Query::encode() const {
  std::string out;
  for (const auto& [k, v] : params_) {
    out += out.empty() ? '?' : '&';
    out += url_escape(k);
    out += '=';
    out += url_escape(v);
  }
  return out;
}

namespace {

void check_segment(std::string_view what, std::string_view segment) {
  if (segment == "." || segment == ".." || segment.find('/') != std::string_view::npos ||
      segment.find('%') != std::string_view::npos) {
    throw Error(ErrorKind::Usage, fmt::format("invalid {} {:?}: may not be '.' or '..' and may not "
                                              "contain '/' or '%'",
                                              what, segment));
  }
}

}  // namespace

std::string resource_path(const Resource& r, std::string_view ns, std::string_view name,
                          std::string_view subresource) {
  std::string path = r.group.empty() ? "/api/" + r.version : "/apis/" + r.group + "/" + r.version;
  if (r.namespaced && !ns.empty()) {
    check_segment("namespace", ns);
    path += "/namespaces/";
    path += ns;
  }
  path += '/';
  path += r.plural;
  if (!name.empty()) {
    check_segment("name", name);
    path += '/';
    path += name;
  }
  if (!subresource.empty()) {
    path += '/';
    path += subresource;
  }
  return path;
}

}  // namespace trainctl::kube
