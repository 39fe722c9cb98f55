// Types the real server never stores but answers a create of at once: authorization.k8s.io/v1's
// access reviews (`kubectl auth can-i`, `--list`) and authentication.k8s.io/v1's self review
// (`kubectl auth whoami`). The sandbox authorizes every authenticated request (kube-apiserver's
// AlwaysAllow), so every review allows; what the real server refuses as invalid, it refuses
// alike, in the same words.

#include <fmt/format.h>

#include "json_access.h"
#include "sandbox/strategies/builtin.h"

namespace trainctl::sandbox {

namespace {

using nlohmann::json;

constexpr const char* kAuthorization = "authorization.k8s.io";

/// Which of an access review's checks apply.
enum class Subject {
  Self,   // SelfSubjectAccessReview: the caller
  Named,  // SubjectAccessReview: spec.user or spec.groups
  Local,  // LocalSubjectAccessReview: the same, in the request's namespace
};

class AccessReviewStrategy final : public ResourceStrategy {
 public:
  AccessReviewStrategy(std::string plural, std::string kind, Subject subject)
      : ResourceStrategy({kAuthorization, "v1", std::move(plural), std::move(kind),
                          subject == Subject::Local, false}),
        subject_(subject) {}

  bool stored() const override { return false; }

  json answer(json review, const UserInfo&, const std::string& ns) const override {
    const json& spec = object_member(review, "spec");
    const json& resource = member(spec, "resourceAttributes");
    const json& non_resource = member(spec, "nonResourceAttributes");
    std::vector<FieldError> errs;
    if (subject_ != Subject::Self && string_member(spec, "user").empty() &&
        array_empty(member(spec, "groups")))
      errs.push_back(
          invalid_value("spec.user", "\"\"", "at least one of user or group must be specified"));
    if (subject_ == Subject::Local) {
      if (!non_resource.is_null())
        errs.push_back(invalid_value("spec.nonResourceAttributes", go_value(non_resource),
                                     "disallowed on this kind of request"));
      else if (string_member(resource, "namespace") != ns)
        errs.push_back(invalid_value("spec.resourceAttributes.namespace",
                                     fmt::format("{:?}", string_member(resource, "namespace")),
                                     "must match metadata.namespace"));
    } else if (resource.is_null() == non_resource.is_null()) {
      errs.push_back(resource.is_null()
                         ? invalid_value("spec.resourceAttributes", "\"null\"",
                                         "exactly one of nonResourceAttributes or "
                                         "resourceAttributes must be specified")
                         : invalid_value("spec.nonResourceAttributes", go_value(non_resource),
                                         "cannot be specified in combination with "
                                         "resourceAttributes"));
    }
    if (!errs.empty())
      throw invalid(kAuthorization, "", "", errs);  // the internal type's empty kind and name
    review["status"] = {{"allowed", true}};
    return review;
  }

 private:
  static bool array_empty(const json& value) { return !value.is_array() || value.empty(); }
  /// How the real server's message prints NonResourceAttributes (Go's %#v of the struct).
  static std::string go_value(const json& attributes) {
    return fmt::format("authorization.NonResourceAttributes{{Path:{:?}, Verb:{:?}}}",
                       string_member(attributes, "path"), string_member(attributes, "verb"));
  }

  Subject subject_;
};

/// SelfSubjectRulesReview: what the caller may do in spec.namespace; AlwaysAllow's rules.
class RulesReviewStrategy final : public ResourceStrategy {
 public:
  RulesReviewStrategy()
      : ResourceStrategy({kAuthorization, "v1", "selfsubjectrulesreviews", "SelfSubjectRulesReview",
                          false, false}) {}

  bool stored() const override { return false; }

  json answer(json review, const UserInfo&, const std::string&) const override {
    if (string_member(object_member(review, "spec"), "namespace").empty())
      throw ApiError(ErrorKind::BadRequest, 400, "BadRequest", "no namespace on request");
    const json everything = json::array({"*"});
    review["status"] = {
        {"resourceRules",
         {{{"verbs", everything}, {"apiGroups", everything}, {"resources", everything}}}},
        {"nonResourceRules", {{{"verbs", everything}, {"nonResourceURLs", everything}}}},
        {"incomplete", false}};
    return review;
  }
};

/// authentication.k8s.io/v1 SelfSubjectReview: who the caller is, every authenticated caller in
/// system:authenticated as the real authenticators add.
class SelfReviewStrategy final : public ResourceStrategy {
 public:
  SelfReviewStrategy()
      : ResourceStrategy({"authentication.k8s.io", "v1", "selfsubjectreviews", "SelfSubjectReview",
                          false, false}) {}

  bool stored() const override { return false; }

  json answer(json review, const UserInfo& caller, const std::string&) const override {
    std::vector<std::string> groups = caller.groups;
    if (std::find(groups.begin(), groups.end(), "system:authenticated") == groups.end())
      groups.push_back("system:authenticated");
    json user = {{"username", caller.name}, {"groups", groups}};
    if (!caller.uid.empty())
      user["uid"] = caller.uid;
    review["status"] = {{"userInfo", std::move(user)}};
    return review;
  }
};

}  // namespace

std::vector<StrategyPtr> review_strategies() {
  static const std::vector<StrategyPtr> list = {
      std::make_shared<AccessReviewStrategy>("localsubjectaccessreviews",
                                             "LocalSubjectAccessReview", Subject::Local),
      std::make_shared<AccessReviewStrategy>("selfsubjectaccessreviews", "SelfSubjectAccessReview",
                                             Subject::Self),
      std::make_shared<RulesReviewStrategy>(),
      std::make_shared<AccessReviewStrategy>("subjectaccessreviews", "SubjectAccessReview",
                                             Subject::Named),
      std::make_shared<SelfReviewStrategy>()};
  return list;
}

}  // namespace trainctl::sandbox
