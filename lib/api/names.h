#pragma once

// Kubernetes' syntax rules for names, label keys and values and annotations
// (k8s.io/apimachinery/pkg/util/validation and ValidateLabels/ValidateAnnotations), worded as
// kube-apiserver words them: the CLI checks a job with them before sending it, the sandbox
// refuses what the real server refuses.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace trainctl::api::names {

/// Each returns the server's messages, empty when the value is valid, so callers can build
/// `field: Invalid value: "x": <message>` errors.
std::vector<std::string> dns1123_subdomain(std::string_view value);
std::vector<std::string> dns1123_label(std::string_view value);
std::vector<std::string> dns1035_label(std::string_view value);
/// Whether `value` has a DNS-1035 label's syntax, [a-z]([-a-z0-9]*[a-z0-9])?, whatever its length
/// (for a caller that words the length limit itself).
bool has_dns1035_label_syntax(std::string_view value);
/// Label and annotation keys, finalizer names: `[prefix/]name`.
std::vector<std::string> qualified_name(std::string_view value);
std::vector<std::string> label_value(std::string_view value);
/// IsValidPortName: an IANA service name (a container port's name, a named targetPort): at most
/// 15 characters of a-z, 0-9 and '-', a letter among them, no "--", no '-' at either end.
std::vector<std::string> port_name(std::string_view value);
/// IsValidPortNum: 1 to 65535.
std::vector<std::string> port_number(std::int64_t value);
/// `value` quoted as Go's %q does, as the server prints bad values.
std::string go_quote(std::string_view value);

/// One entry of the server's field.ErrorList for an object's metadata.labels or
/// metadata.annotations.
struct MetadataError {
  std::string key;     // the label or annotation at fault; "" for the annotations' total size
  std::string reason;  // FieldValueInvalid or FieldValueTooLong
  std::string body;    // `Invalid value: "b=c": a valid label must be ...`
};

/// What kube-apiserver refuses in a labels map: keys that are not qualified names, string values
/// that are not label values (one of another JSON type is refused by its decoder, before any of
/// this). Empty for anything but an object.
std::vector<MetadataError> label_errors(const nlohmann::json& labels);
/// What kube-apiserver refuses in an annotations map: keys that are not qualified names (case
/// ignored) and more than 256 KiB of keys and values together. Empty for anything but an object.
std::vector<MetadataError> annotation_errors(const nlohmann::json& annotations);

}  // namespace trainctl::api::names
