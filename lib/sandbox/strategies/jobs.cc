// batch/v1 jobs as v1.26's server keeps them (pkg/registry/batch/job/strategy.go and
// pkg/apis/batch): SetDefaults_Job and ValidateJob, the selector and template labels generated
// from the uid, pods orphaned by default, and kubectl's columns.

#include <fmt/format.h>

#include "api/status.h"
#include "api/well_known.h"
#include "json_access.h"
#include "sandbox/selector.h"
#include "sandbox/strategies/builtin.h"
#include "sandbox/table.h"

namespace trainctl::sandbox {

using nlohmann::json;

namespace {

/// Whether `obj` has `key` set to something other than null.
bool has_field(const json& obj, const char* key) {
  return !member(obj, key).is_null();
}

/// `field` (name or image) of each container of the job's pod template, comma-separated, as
/// kubectl's layoutContainerCells writes them.
std::string template_containers(const json& job, const char* field) {
  std::vector<std::string> cells;
  const json& pod_spec =
      object_member(object_member(object_member(job, "spec"), "template"), "spec");
  for (const json& c : array_member(pod_spec, "containers"))
    cells.push_back(string_member(c, field));
  return fmt::format("{}", fmt::join(cells, ","));
}

/// A map[string]string as Go's %#v prints it: keys sorted, `"k":"v"` pairs.
std::string go_string_map(const json& map) {
  std::string pairs;
  for (const auto& [key, value] : map.items()) {
    pairs += fmt::format("{}{}:{}", pairs.empty() ? "" : ", ", api::names::go_quote(key),
                         api::names::go_quote(value.is_string() ? value.get<std::string>() : ""));
  }
  return "map[string]string{" + pairs + "}";
}

/// How field.Invalid prints the Go value of a job's spec.<field>: numbers as they are,
/// strings quoted, absent ones as null, a label selector with %#v. A pod template is printed
/// with %#v too, every field of core.PodTemplateSpec, which the sandbox shortens to its type.
std::string spec_field_value(const std::string& field, const json& value) {
  if (value.is_null())
    return "null";
  if (value.is_string())
    return api::names::go_quote(value.get<std::string>());
  if (field == "template")
    return "core.PodTemplateSpec{...}";
  if (field != "selector")
    return value.dump();
  return fmt::format(
      "v1.LabelSelector{{MatchLabels:{}, MatchExpressions:[]v1.LabelSelectorRequirement{}}}",
      go_string_map(object_member(value, "matchLabels")),
      array_member(value, "matchExpressions").empty() ? "(nil)" : "{...}");
}

/// ValidateImmutableField for spec.<field>.
void check_immutable(const json& value, const json& old, const std::string& field,
                     std::vector<FieldError>& errs) {
  if (value != old)
    errs.push_back(immutable("spec." + field, spec_field_value(field, value)));
}

/// validatePodTemplateUpdate's exception for a suspended job that never started: the old
/// template takes the new one's labels, annotations, node selector, tolerations and node affinity
/// before the two are compared.
void take_scheduling_directives(json& old_template, const json& next_template) {
  json& old_meta = ensure_object(old_template, "metadata");
  json& old_spec = ensure_object(old_template, "spec");
  const json& next_meta = object_member(next_template, "metadata");
  const json& next_spec = object_member(next_template, "spec");
  auto take = [](json& into, const json& from, const char* key) {
    if (from.contains(key))
      into[key] = from[key];
    else
      into.erase(key);
  };
  take(old_meta, next_meta, "labels");
  take(old_meta, next_meta, "annotations");
  take(old_spec, next_spec, "nodeSelector");
  take(old_spec, next_spec, "tolerations");
  const json& next_affinity = member(next_spec, "affinity");
  if (next_affinity.is_object())
    take(ensure_object(old_spec, "affinity"), next_affinity, "nodeAffinity");
  else if (old_spec.contains("affinity") && old_spec["affinity"].is_object()) {
    old_spec["affinity"].erase("nodeAffinity");
    if (old_spec["affinity"].empty())
      old_spec.erase("affinity");
  }
}

class JobStrategy final : public ResourceStrategy {
 public:
  JobStrategy() : ResourceStrategy({"batch", "v1", "jobs", "Job", true, true}, {}, {"all"}) {}

  const GoStruct& go_type() const override {
    using enum GoKind;
    static const GoStruct spec{
        "JobSpec",
        {{"parallelism", "int32", Int32},
         {"completions", "int32", Int32},
         {"activeDeadlineSeconds", "int64", Int64},
         {"backoffLimit", "int32", Int32},
         {"manualSelector", "bool", Bool},
         {"template", "v1.PodTemplateSpec", Struct, &pod_template_spec_type()},
         {"ttlSecondsAfterFinished", "int32", Int32},
         {"completionMode", "v1.CompletionMode", String},
         {"suspend", "bool", Bool}}};
    static const GoStruct type{"Job",
                               {{"metadata", "v1.ObjectMeta", Struct, &object_meta_type()},
                                {"spec", "v1.JobSpec", Struct, &spec}}};
    return type;
  }

  /// Defaults only: the checks are validate's, which the store runs after the metadata's, so a
  /// 422 lists both as ValidateJob does.
  void admit(json& job, const AdmissionContext&) const override { default_and_validate(job); }

  /// ValidateJobSpec's checks of the defaulted job (on an update prepare_for_update has made
  /// them already and refused what they found); a status write's are ValidateJobUpdateStatus's,
  /// of the status alone.
  void validate(const json& job, WritePart part, std::vector<FieldError>& errs) const override {
    if (part == WritePart::Status)
      return;
    json defaulted = job;
    const std::vector<FieldError> spec_errs = default_and_validate(defaulted);
    errs.insert(errs.end(), spec_errs.begin(), spec_errs.end());
  }

  /// jobStrategy.ValidateUpdate (v1.26): ValidateJob (ValidateGeneratedSelector, then
  /// ValidateJobSpec) and ValidateJobUpdate, whose ValidateJobSpecUpdate runs ValidateJobSpec
  /// again (so its errors are listed twice among the causes, once in the message) before
  /// completions, selector, template and completionMode must stay as they are. A suspended job
  /// that never started may change its template's labels, annotations, node selector,
  /// tolerations and node affinity (validatePodTemplateUpdate). Both sides are defaulted: the
  /// server defaults what it reads from storage too.
  void prepare_for_update(const json& old, json& next, WritePart part) const override {
    ResourceStrategy::prepare_for_update(old, next, part);
    if (part != WritePart::Main)
      return;
    const std::vector<FieldError> spec_errs = job_spec_errors(next);
    std::vector<FieldError> errs = generated_selector_errors(next);
    for (int pass = 0; pass < 2; ++pass)
      errs.insert(errs.end(), spec_errs.begin(), spec_errs.end());
    json stored = old;
    default_and_validate(stored);
    const json& spec = object_member(next, "spec");
    const json& old_spec = object_member(stored, "spec");
    for (const char* field : {"completions", "selector"})
      check_immutable(member(spec, field), member(old_spec, field), field, errs);
    json old_template = object_member(old_spec, "template");
    if (member(old_spec, "suspend") == json(true) &&
        member(object_member(stored, "status"), "startTime").is_null())
      take_scheduling_directives(old_template, object_member(spec, "template"));
    check_immutable(member(spec, "template"), old_template, "template", errs);
    check_immutable(member(spec, "completionMode"), member(old_spec, "completionMode"),
                    "completionMode", errs);
    if (!errs.empty())
      throw invalid(info().group, info().kind, name_of(next), errs);
  }

  bool tracks_generation() const override { return true; }
  // batch/v1 Jobs orphan their pods unless told otherwise, for backwards compatibility.
  bool orphans_dependents_by_default() const override { return true; }

  // PrepareForCreate marks the job as tracked with pod finalizers; Validate generates the
  // selector from the uid unless spec.manualSelector, labelling the pod template controller-uid
  // and job-name (v1.26's unprefixed labels only; the batch.kubernetes.io/ ones came in 1.27). A
  // job without labels takes its template's (SetDefaults_Job, which the server applies again as
  // it decodes what it stored: so they include the two generated labels).
  void prepare_for_create(json& job) const override {
    json& md = ensure_object(job, "metadata");
    ensure_object(md, "annotations")[std::string(api::finalizers::job_tracking)] = "";
    json& spec = ensure_object(job, "spec");
    json& template_meta = ensure_object(ensure_object(spec, "template"), "metadata");
    if (member(spec, "manualSelector") != json(true)) {
      json& template_labels = ensure_object(template_meta, "labels");
      if (!template_labels.contains("job-name"))
        template_labels["job-name"] = name_of(job);
      if (!template_labels.contains("controller-uid"))
        template_labels["controller-uid"] = uid_of(job);
      json& match_labels = ensure_object(ensure_object(spec, "selector"), "matchLabels");
      if (!match_labels.contains("controller-uid"))
        match_labels["controller-uid"] = uid_of(job);
    }
    const json& labels = member(md, "labels");
    const json& template_labels = member(template_meta, "labels");
    if ((!labels.is_object() || labels.empty()) && template_labels.is_object() &&
        !template_labels.empty())
      md["labels"] = template_labels;
    ResourceStrategy::prepare_for_create(job);
  }

  std::vector<std::string> field_labels() const override {
    return {"metadata.name", "metadata.namespace", "status.successful"};
  }

  std::vector<PrintColumn> columns(const std::string&) const override {
    return {
        name_column(),
        {"Status", "string", "Status of the job.", 0,
         [](const json& job, TablePrintTime) {
           std::string state = "Running";
           for (const auto& c : array_member(object_member(job, "status"), "conditions")) {
             const std::string type = string_member(c, "type");
             if (string_member(c, "status") == "True" && (type == "Complete" || type == "Failed"))
               state = type;
           }
           return json(state);
         }},
        {"Completions", "string", "The completion status of the job.", 0,
         [](const json& job, TablePrintTime) {
           const json& spec = object_member(job, "spec");
           const json& completions = member(spec, "completions");
           const std::int64_t succeeded = integer_member(object_member(job, "status"), "succeeded");
           if (completions.is_number_integer())
             return json(fmt::format("{}/{}", succeeded, completions.get<std::int64_t>()));
           // A work queue: done at its first success, of `parallelism` pods at once.
           const std::int64_t parallelism = integer_member(spec, "parallelism");
           return json(parallelism > 1 ? fmt::format("{}/1 of {}", succeeded, parallelism)
                                       : fmt::format("{}/1", succeeded));
         }},
        {"Duration", "string", "Time required to complete the job.", 0,
         [](const json& job, TablePrintTime now) {
           const auto took = api::job_duration(job, now);
           return json(took ? api::human_duration(*took) : "");
         }},
        age_column(),
        {"Containers", "string", "Names of each container in the template.", 1,
         [](const json& job, TablePrintTime) { return json(template_containers(job, "name")); }},
        {"Images", "string", "Images referenced by each container in the template.", 1,
         [](const json& job, TablePrintTime) { return json(template_containers(job, "image")); }},
        {"Selector", "string",
         "A label query over pods that should match the pod count. Normally, the system sets "
         "this field for you. More info: "
         "https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/"
         "#label-selectors",
         1, [](const json& job, TablePrintTime) {
           // metav1.FormatLabelSelector: a selector that selects nothing prints as <none>.
           const auto selector =
               LabelSelector::from_api(member(object_member(job, "spec"), "selector"));
           return json(or_none(selector ? selector->to_string() : ""));
         }}};
  }

 private:
  /// ValidateJobSpec on a defaulted job: default_and_validate's checks, then the selector is
  /// required and must match the template's labels.
  static std::vector<FieldError> job_spec_errors(json& job) {
    std::vector<FieldError> errs = default_and_validate(job);
    const json& spec = object_member(job, "spec");
    if (!has_field(spec, "selector") && member(spec, "manualSelector") != json(true))
      errs.push_back(required_value("spec.selector", ""));
    const json& template_meta = object_member(object_member(spec, "template"), "metadata");
    const auto selector = LabelSelector::from_api(member(spec, "selector"));
    if (selector && !selector->matches(member(template_meta, "labels"))) {
      errs.push_back(invalid_value("spec.template.metadata.labels",
                                   go_string_map(object_member(template_meta, "labels")),
                                   "`selector` does not match template `labels`"));
    }
    return errs;
  }

  /// ValidateGeneratedSelector: unless spec.manualSelector, the template carries controller-uid
  /// and job-name with the job's values and the selector selects exactly those.
  static std::vector<FieldError> generated_selector_errors(const json& job) {
    std::vector<FieldError> errs;
    const json& spec = object_member(job, "spec");
    if (member(spec, "manualSelector") == json(true) || !has_field(spec, "selector"))
      return errs;
    const json& labels =
        object_member(object_member(object_member(spec, "template"), "metadata"), "labels");
    const json expected = {{"controller-uid", uid_of(job)}, {"job-name", name_of(job)}};
    for (const auto& [key, value] : expected.items()) {
      const std::string field = fmt::format("spec.template.metadata.labels[{}]", key);
      const std::string must_be = fmt::format("must be '{}'", value.get<std::string>());
      if (!labels.contains(key))
        errs.push_back(required_value(field, must_be));
      else if (labels[key] != value)
        errs.push_back(invalid_value(field, go_string_map(labels), must_be));
    }
    const auto selector = LabelSelector::from_api(member(spec, "selector"));
    if (selector && !selector->matches(expected)) {
      errs.push_back(invalid_value("spec.selector", spec_field_value("selector", spec["selector"]),
                                   "`selector` not auto-generated"));
    }
    return errs;
  }

  /// SetDefaults_Job (pkg/apis/batch/v1/defaults.go), the template's pod defaults, and
  /// ValidateJob's checks (pkg/apis/batch/validation) in its order. What needs the uid is
  /// prepare_for_create's.
  static std::vector<FieldError> default_and_validate(json& job) {
    json& spec = ensure_object(job, "spec");
    if (!has_field(spec, "completions") && !has_field(spec, "parallelism")) {
      spec["completions"] = 1;
      spec["parallelism"] = 1;
    }
    if (!has_field(spec, "parallelism"))
      spec["parallelism"] = 1;
    if (!has_field(spec, "backoffLimit"))
      spec["backoffLimit"] = 6;
    if (!has_field(spec, "completionMode"))
      spec["completionMode"] = "NonIndexed";
    if (!has_field(spec, "suspend"))
      spec["suspend"] = false;
    json& tmpl = ensure_object(spec, "template");
    json& tmpl_meta = ensure_object(tmpl, "metadata");
    if (!tmpl_meta.contains("creationTimestamp"))
      tmpl_meta["creationTimestamp"] = nullptr;  // a zero metav1.Time, as Go prints it
    json& pod_spec = ensure_object(tmpl, "spec");

    std::vector<FieldError> errs;
    for (const char* field : {"parallelism", "completions", "activeDeadlineSeconds", "backoffLimit",
                              "ttlSecondsAfterFinished"}) {
      const json& value = member(spec, field);
      if (value.is_number() && value.get<double>() < 0) {
        errs.push_back(invalid_value(fmt::format("spec.{}", field), value.dump(),
                                     "must be greater than or equal to 0"));
      }
    }
    const std::string mode = spec.value("completionMode", "");
    if (mode != "NonIndexed" && mode != "Indexed") {
      errs.push_back(not_supported("spec.completionMode", api::names::go_quote(mode),
                                   {"NonIndexed", "Indexed"}));
    }
    if (mode == "Indexed" && !has_field(spec, "completions"))
      errs.push_back(required_value("spec.completions", "when completion mode is Indexed"));
    default_pod_spec(pod_spec);
    validate_pod_spec(pod_spec, "spec.template.spec", errs);
    // The template's restartPolicy was defaulted to Always if missing, which a Job may not use.
    const std::string restart = pod_spec.value("restartPolicy", "");
    if (restart == "Always") {
      errs.push_back(required_value("spec.template.spec.restartPolicy",
                                    "valid values: \"OnFailure\", \"Never\""));
    } else if (restart != "OnFailure" && restart != "Never") {
      errs.push_back(not_supported("spec.template.spec.restartPolicy",
                                   api::names::go_quote(restart), {"OnFailure", "Never"}));
    }
    if (member(spec, "manualSelector") == json(true) && !has_field(spec, "selector"))
      errs.push_back(required_value("spec.selector", ""));
    return errs;
  }
};

}  // namespace

StrategyPtr job_strategy() {
  static const StrategyPtr strategy = std::make_shared<JobStrategy>();
  return strategy;
}

}  // namespace trainctl::sandbox
