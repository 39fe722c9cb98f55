// core/v1 services: the type, port and ClusterIP defaults, port validation, DNS-1035 names,
// create on PUT, the historical etcd prefix and kubectl's columns.

#include <fmt/format.h>

#include <set>

#include "json_access.h"
#include "sandbox/go_types.h"
#include "sandbox/selector.h"
#include "sandbox/strategies/builtin.h"
#include "sandbox/table.h"

namespace trainctl::sandbox {

using nlohmann::json;

namespace {

/// `kubectl get svc`'s PORT(S): "80/TCP", "80:30080/TCP" with a node port, comma-separated
/// (the server's makePortString).
std::string service_ports(const json& spec) {
  std::string ports;
  for (const auto& p : array_member(spec, "ports")) {
    std::string protocol = string_member(p, "protocol");
    if (protocol.empty())
      protocol = "TCP";
    const std::int64_t node_port = integer_member(p, "nodePort");
    ports += ports.empty() ? "" : ",";
    ports += node_port > 0 ? fmt::format("{}:{}/{}", integer_member(p, "port"), node_port, protocol)
                           : fmt::format("{}/{}", integer_member(p, "port"), protocol);
  }
  return ports;
}

std::string join_strings(const json& values) {
  std::string out;
  for (const auto& v : values) {
    if (v.is_string())
      out += (out.empty() ? "" : ",") + v.get<std::string>();
  }
  return out;
}

/// `kubectl get svc`'s EXTERNAL-IP (the server's getServiceExternalIP, printed wide).
std::string service_external_ip(const json& service) {
  const json& spec = object_member(service, "spec");
  const std::string type = string_member(spec, "type");
  const std::string external_ips = join_strings(array_member(spec, "externalIPs"));
  if (type == "ClusterIP" || type == "NodePort")
    return or_none(external_ips);
  if (type == "ExternalName")
    return string_member(spec, "externalName");
  if (type != "LoadBalancer")
    return "<unknown>";
  // loadBalancerStatusStringer: each ingress point's IP, else its hostname; sorted, unique.
  std::set<std::string> points;
  const json& lb = object_member(object_member(service, "status"), "loadBalancer");
  for (const auto& i : array_member(lb, "ingress")) {
    const std::string ip = string_member(i, "ip");
    const std::string point = ip.empty() ? string_member(i, "hostname") : ip;
    if (!point.empty())
      points.insert(point);
  }
  std::string ingress;
  for (const auto& p : points)
    ingress += (ingress.empty() ? "" : ",") + p;
  if (!external_ips.empty())
    return ingress.empty() ? external_ips : ingress + "," + external_ips;
  return ingress.empty() ? "<pending>" : ingress;
}

/// validateServicePort: a name is required when there are several ports, and is a DNS-1123
/// label no other port has; the port, protocol and targetPort (a number or an IANA service name)
/// are valid.
void validate_port(const json& port, const std::string& path, bool name_required,
                   std::set<std::string>& names, std::vector<FieldError>& errs) {
  const std::string name = string_member(port, "name");
  if (name_required && name.empty()) {
    errs.push_back(required_value(path + ".name", ""));
  } else if (!name.empty()) {
    for (const auto& message : api::names::dns1123_label(name))
      errs.push_back(invalid_value(path + ".name", api::names::go_quote(name), message));
    if (!names.insert(name).second)
      errs.push_back(duplicate(path + ".name", api::names::go_quote(name)));
  }
  const std::int64_t number = integer_member(port, "port");
  for (const auto& message : api::names::port_number(number))
    errs.push_back(invalid_value(path + ".port", std::to_string(number), message));
  const std::string protocol = string_member(port, "protocol");
  if (!protocol.empty() && protocol != "SCTP" && protocol != "TCP" && protocol != "UDP") {
    errs.push_back(
        not_supported(path + ".protocol", api::names::go_quote(protocol), {"SCTP", "TCP", "UDP"}));
  }
  const json& target = member(port, "targetPort");
  if (target.is_string()) {
    const std::string target_name = target.get<std::string>();
    for (const auto& message : api::names::port_name(target_name))
      errs.push_back(
          invalid_value(path + ".targetPort", api::names::go_quote(target_name), message));
  } else {
    const std::int64_t target_number =
        target.is_number_integer() ? target.get<std::int64_t>() : number;
    for (const auto& message : api::names::port_number(target_number))
      errs.push_back(invalid_value(path + ".targetPort", std::to_string(target_number), message));
  }
}

/// A label map as labels.FormatLabels prints it: "a=1,b=2" (sorted), "<none>" when empty.
std::string format_labels(const json& labels) {
  std::string out;
  for (const auto& [k, v] : labels.items())
    out += (out.empty() ? "" : ",") + k + "=" + cell_text(v);
  return or_none(out);
}

/// A headless Service without a selector: its endpoints are written by hand, of either family,
/// so even a single-stack cluster gives it both (as kube-apiserver 1.26 does).
bool headless_without_selector(const json& spec) {
  return member(spec, "clusterIP") == "None" && object_member(spec, "selector").empty();
}

/// ValidateServiceClusterIPsRelatedFields' IP family checks (the family names, no family twice,
/// the policy's name, several families only with a dual-stack policy), then, when those pass,
/// the REST storage's for a single-stack IPv4 cluster: dual stack and IPv6 only for a headless
/// Service without a selector. In kube-apiserver 1.26's order and words.
void validate_ip_families(const json& spec, std::vector<FieldError>& errs) {
  const std::size_t before = errs.size();
  const json& families = array_member(spec, "ipFamilies");
  std::set<std::string> seen;
  for (std::size_t i = 0; i < families.size(); ++i) {
    const std::string family = families[i].is_string() ? families[i].get<std::string>() : "";
    const std::string field = fmt::format("spec.ipFamilies[{}]", i);
    if (family != "IPv4" && family != "IPv6")
      errs.push_back(not_supported(field, api::names::go_quote(family), {"IPv4", "IPv6"}));
    else if (!seen.insert(family).second)
      errs.push_back(duplicate(field, api::names::go_quote(family)));
  }
  const bool families_valid = errs.size() == before;
  const std::string policy = string_member(spec, "ipFamilyPolicy");
  if (!policy.empty() && policy != "SingleStack" && policy != "PreferDualStack" &&
      policy != "RequireDualStack") {
    errs.push_back(not_supported("spec.ipFamilyPolicy", api::names::go_quote(policy),
                                 {"PreferDualStack", "RequireDualStack", "SingleStack"}));
  }
  if (families_valid && policy == "SingleStack" && families.size() > 1) {
    errs.push_back(invalid_value("spec.ipFamilyPolicy", api::names::go_quote(policy),
                                 "must be 'RequireDualStack' or 'PreferDualStack' when multiple IP "
                                 "families are specified"));
  }
  if (errs.size() != before || headless_without_selector(spec))
    return;
  if (policy == "RequireDualStack") {
    errs.push_back(invalid_value("spec.ipFamilyPolicy", api::names::go_quote(policy),
                                 "this cluster is not configured for dual-stack services"));
  }
  for (std::size_t i = 0; i < families.size(); ++i) {
    if (families[i] == "IPv6")
      errs.push_back(invalid_value(fmt::format("spec.ipFamilies[{}]", i), R"("IPv6")",
                                   "not configured on this cluster"));
  }
}

class ServiceStrategy final : public ResourceStrategy {
 public:
  ServiceStrategy()
      : ResourceStrategy({"", "v1", "services", "Service", true, true}, {"svc"}, {"all"}) {}

  /// What json.Unmarshal into v1.Service refuses (a 400 before anything else): a port given as
  /// a string, an IP family as a number. targetPort (an IntOrString) is not declared.
  const GoStruct& go_type() const override {
    using enum GoKind;
    static const GoStruct port{"ServicePort",
                               {{"name", "string", String},
                                {"protocol", "v1.Protocol", String},
                                {"port", "int32", Int32},
                                {"nodePort", "int32", Int32}}};
    static const GoStruct spec{
        "ServiceSpec",
        {{"ports", "[]v1.ServicePort", StructList, &port},
         {"selector", "map[string]string", StringMap},
         {"clusterIP", "string", String},
         {"clusterIPs", "[]string", StringList},
         {"type", "v1.ServiceType", String},
         {"externalIPs", "[]string", StringList},
         {"sessionAffinity", "v1.ServiceAffinity", String},
         {"externalName", "string", String},
         {"ipFamilies", "[]v1.IPFamily", StringList},
         {"ipFamilyPolicy", "v1.IPFamilyPolicy", String},
         {"internalTrafficPolicy", "v1.ServiceInternalTrafficPolicy", String}}};
    static const GoStruct type{"Service",
                               {{"metadata", "v1.ObjectMeta", Struct, &object_meta_type()},
                                {"spec", "v1.ServiceSpec", Struct, &spec}}};
    return type;
  }

  /// SetDefaults_Service: the type, each port's protocol (TCP) and targetPort (the port, for a
  /// missing, 0 or "" one), internalTrafficPolicy Cluster; then the cluster IP and the IP
  /// families kube-apiserver's REST storage gives a single-stack IPv4 cluster: IPv4
  /// SingleStack, but a headless Service without a selector both families, RequireDualStack (as
  /// kube-apiserver 1.26 answers). IP families the storage refuses are a 422 of their own, before
  /// any other check (validate_ip_families). An ExternalName Service gets none of those.
  void admit(json& service, const AdmissionContext& context) const override {
    json& spec = service["spec"];
    if (!spec.is_object())
      spec = json::object();
    if (!spec.contains("type"))
      spec["type"] = "ClusterIP";
    if (json& ports = spec["ports"]; ports.is_array()) {
      for (json& p : ports) {
        if (!p.is_object())
          continue;
        if (string_member(p, "protocol").empty())
          p["protocol"] = "TCP";
        const json& target = member(p, "targetPort");
        if (target.is_null() || target == json(0) || target == json(""))
          p["targetPort"] = member(p, "port").is_number_integer() ? p["port"] : json(0);
      }
    }
    erase_empty_members(spec, {"ports"});  // omitempty
    if (!spec.contains("sessionAffinity"))
      spec["sessionAffinity"] = "None";
    service["status"] = {{"loadBalancer", json::object()}};
    if (string_member(spec, "type") == "ExternalName")
      return;
    // The REST storage checks the IP families before it allocates anything, and reports what is
    // wrong with them alone (a bad name or port comes later, once they pass).
    std::vector<FieldError> family_errors;
    validate_ip_families(spec, family_errors);
    if (!family_errors.empty())
      throw invalid("", "Service", name_of(service), family_errors);
    if (!spec.contains("internalTrafficPolicy"))
      spec["internalTrafficPolicy"] = "Cluster";
    if (!spec.contains("clusterIP"))
      spec["clusterIP"] = context.allocate_cluster_ip();
    spec["clusterIPs"] = json::array({spec["clusterIP"]});
    const bool dual_stack = headless_without_selector(spec);
    if (!spec.contains("ipFamilyPolicy"))
      spec["ipFamilyPolicy"] = dual_stack ? "RequireDualStack" : "SingleStack";
    json& families = spec["ipFamilies"];
    if (!families.is_array() || families.empty())
      families = json::array({"IPv4"});
    // A headless Service without a selector gets the other family too unless it is SingleStack
    // (ipFamilies [IPv6] reads back [IPv6, IPv4]).
    if (dual_stack && spec["ipFamilyPolicy"] != "SingleStack" && families.size() == 1 &&
        (families[0] == "IPv4" || families[0] == "IPv6"))
      families.push_back(families[0] == "IPv4" ? "IPv6" : "IPv4");
  }

  /// ValidateService's port checks, on create and update: the store lists them after the
  /// metadata's. Not on a status write: ValidateServiceStatusUpdate checks the status alone.
  void validate(const json& service, WritePart part, std::vector<FieldError>& errs) const override {
    if (part == WritePart::Status)
      return;
    const json& spec = object_member(service, "spec");
    const json& ports = array_member(spec, "ports");
    if (ports.empty() && string_member(spec, "clusterIP") != "None" &&
        string_member(spec, "type") != "ExternalName")
      errs.push_back(required_value("spec.ports", ""));
    std::set<std::string> names;
    for (std::size_t i = 0; i < ports.size(); ++i)
      validate_port(ports[i], fmt::format("spec.ports[{}]", i), ports.size() > 1, names, errs);
  }

  /// An update's IP families, checked as a create's (admit): before anything else, and reported
  /// alone, as kube-apiserver's REST storage does on both.
  void prepare_for_update(const json& old, json& next, WritePart part) const override {
    ResourceStrategy::prepare_for_update(old, next, part);
    const json& spec = object_member(next, "spec");
    if (part != WritePart::Main || string_member(spec, "type") == "ExternalName")
      return;
    std::vector<FieldError> family_errors;
    validate_ip_families(spec, family_errors);
    if (!family_errors.empty())
      throw invalid("", "Service", name_of(old), family_errors);
  }

  std::vector<std::string> name_errors(std::string_view name) const override {
    return api::names::dns1035_label(name);
  }
  bool allows_create_on_update() const override { return true; }
  std::string storage_prefix() const override { return "services/specs"; }

  void prepare_for_create(json& service) const override {
    service["status"] = {{"loadBalancer", json::object()}};
  }

  std::vector<std::string> field_labels() const override {
    return {"metadata.namespace", "metadata.name", "spec.clusterIP", "spec.type"};
  }

  std::vector<PrintColumn> columns(const std::string&) const override {
    auto spec_string = [](const char* key) {
      return [key](const json& svc, TablePrintTime) {
        return json(string_member(object_member(svc, "spec"), key));
      };
    };
    return {name_column(),
            {"Type", "string", "The type of the service.", 0, spec_string("type")},
            {"Cluster-IP", "string", "The cluster IP of the service.", 0,
             [](const json& svc, TablePrintTime) {
               // printService: the first of spec.clusterIPs ("None" for a headless service).
               const json& ips = array_member(object_member(svc, "spec"), "clusterIPs");
               return json(or_none(ips.empty() ? "" : cell_text(ips[0])));
             }},
            {"External-IP", "string", "The external IP of the service.", 0,
             [](const json& svc, TablePrintTime) { return json(service_external_ip(svc)); }},
            {"Port(s)", "string", "The ports of the service.", 0,
             [](const json& svc, TablePrintTime) {
               return json(or_none(service_ports(object_member(svc, "spec"))));
             }},
            age_column(),
            {"Selector", "string", "The label selector of the service.", 1,
             [](const json& svc, TablePrintTime) {
               return json(format_labels(object_member(object_member(svc, "spec"), "selector")));
             }}};
  }
};

}  // namespace

StrategyPtr service_strategy() {
  static const StrategyPtr strategy = std::make_shared<ServiceStrategy>();
  return strategy;
}

}  // namespace trainctl::sandbox
