// Flags -> template values for `submit KIND` and `render KIND`, and the render -> validate ->
// annotate pipeline both verbs share.
#include "job_values.h"

#include <fmt/format.h>

#include "api/manifest.h"
#include "api/names.h"
#include "api/validation.h"
#include "api/well_known.h"
#include "docs.h"
#include "duration.h"
#include "error.h"
#include "render/render.h"
#include "render/value_schema.h"
#include "render/values.h"
#include "sha256.h"
#include "text.h"
#include "trainctl/version.h"

#ifndef TRAINCTL_TEMPLATE_DIR
#define TRAINCTL_TEMPLATE_DIR ""
#endif
#ifndef TRAINCTL_SOURCE_TEMPLATE_DIR
#define TRAINCTL_SOURCE_TEMPLATE_DIR ""
#endif

namespace trainctl::cli {
namespace {

using nlohmann::json;

/// The values a one-of value takes, for the flag's completion and man page.
std::vector<std::string> allowed_values(api::JobKind kind, std::string_view key) {
  const render::ValueSpec* spec = render::builtin_schema(kind).find(key);
  return spec == nullptr ? std::vector<std::string>()
                         : std::vector<std::string>(spec->allowed.begin(), spec->allowed.end());
}

/// Splits `K=V` at the first '='; the key must not be empty.
std::pair<std::string, std::string> key_value(std::string_view flag, const std::string& text) {
  const auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw Error(ErrorKind::Usage, fmt::format("{}: expected KEY=VALUE, got \"{}\"", flag, text));
  }
  return {text.substr(0, eq), text.substr(eq + 1)};
}

/// What a `K=V` flag may hold: its key is a qualified name (label, annotation and nodeSelector
/// keys alike), its value a label value where it becomes one.
enum class KeyValueRule { AnyValue, LabelValue };

/// The `K=V` items of `flag` as a map, each refused here, naming the flag and the item, where the
/// server would refuse it (once: not again in every pod template it is copied into).
json key_value_map(std::string_view flag, const std::vector<std::string>& items,
                   KeyValueRule rule) {
  json out = json::object();
  for (const auto& item : items) {
    auto [k, v] = key_value(flag, item);
    std::vector<std::string> problems = api::names::qualified_name(k);
    for (std::string& p : problems)
      p = fmt::format("key {}: {}", api::names::go_quote(k), p);
    if (rule == KeyValueRule::LabelValue) {
      for (const std::string& p : api::names::label_value(v))
        problems.push_back(fmt::format("value {}: {}", api::names::go_quote(v), p));
    }
    if (!problems.empty())
      throw Error(ErrorKind::Usage, fmt::format("{} {}: {}", flag, api::names::go_quote(item),
                                                fmt::join(problems, "; ")));
    out[k] = v;
  }
  return out;
}

int parse_int(std::string_view flag, const std::string& text) {
  try {
    std::size_t used = 0;
    const int n = std::stoi(text, &used);
    if (used == text.size())
      return n;
  } catch (const std::exception&) {
  }
  throw Error(ErrorKind::Usage, fmt::format("{}: \"{}\" is not an integer", flag, text));
}

/// `key=value:Effect`, `key:Effect`, `key=value` or `key` -> a Kubernetes toleration.
json parse_toleration(const std::string& text) {
  json t = json::object();
  std::string rest = text;
  if (const auto colon = rest.rfind(':'); colon != std::string::npos) {
    const std::string effect = rest.substr(colon + 1);
    if (effect != "NoSchedule" && effect != "PreferNoSchedule" && effect != "NoExecute") {
      throw Error(ErrorKind::Usage,
                  fmt::format("--toleration: effect \"{}\" in \"{}\" is not one of NoSchedule, "
                              "PreferNoSchedule, NoExecute",
                              effect, text));
    }
    t["effect"] = effect;
    rest.resize(colon);
  }
  if (rest.empty())
    throw Error(ErrorKind::Usage, fmt::format("--toleration: no key in \"{}\"", text));
  if (const auto eq = rest.find('='); eq != std::string::npos) {
    t["key"] = rest.substr(0, eq);
    t["operator"] = "Equal";
    t["value"] = rest.substr(eq + 1);
  } else {
    t["key"] = rest;
    t["operator"] = "Exists";
  }
  return t;
}

/// --volume PVC:PATH[:ro|:rw] -> {pvc, mount, readOnly}.
json parse_volume_flag(const std::string& text) {
  try {
    return render::parse_volume(text);
  } catch (const Error& e) {
    throw Error(ErrorKind::Usage, fmt::format("--volume: {}", e.message()));
  }
}

void put_string(json& v, const char* key, const std::string& value) {
  if (!value.empty())
    v[key] = value;
}

/// Turns a duration ("2h", "90s"; a bare number is seconds) into whole seconds, rounded up, for
/// the options that set a *Seconds field.
CLI::Validator whole_seconds() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        const auto d = parse_duration(value);
        if (!d)
          return fmt::format(
              "{:?} is not a duration such as 90s, 30m or 2h, nor a whole "
              "number of seconds",
              value);
        value = std::to_string(std::chrono::ceil<std::chrono::seconds>(*d).count());
        return "";
      },
      "", "whole-seconds");
}

}  // namespace

bool JobFlags::was_given(const std::string& option) const {
  const auto it = given.find(option);
  return it != given.end() && it->second != nullptr && it->second->count() > 0;
}

std::string misplaced_command_word(std::string_view word) {
  return fmt::format(
      "unexpected argument {:?} before \"--\": the job's command comes after \"--\" alone (a "
      "job is named with --name)",
      word);
}

void JobFlags::require_separator(std::size_t words_after_separator) const {
  if (command.size() > words_after_separator)
    throw Error(ErrorKind::Usage, misplaced_command_word(command.front()));
}

json JobFlags::flag_values() const {
  json v = json::object();
  put_string(v, "name", name);
  put_string(v, "image", image);
  put_string(v, "cpu", cpu);
  put_string(v, "memory", memory);
  put_string(v, "nprocPerNode", nproc_per_node);
  put_string(v, "mpiImplementation", mpi_implementation);
  put_string(v, "queue", queue);
  put_string(v, "priorityClass", priority_class);
  put_string(v, "restartPolicy", restart_policy);
  put_string(v, "cleanPodPolicy", clean_pod_policy);
  put_string(v, "workingDir", working_dir);
  const std::pair<const char*, int> numbers[] = {{"workers", workers},
                                                 {"ps", ps},
                                                 {"chief", chief},
                                                 {"evaluator", evaluator},
                                                 {"gpus", gpus},
                                                 {"slotsPerWorker", slots_per_worker},
                                                 {"minAvailable", min_available},
                                                 {"backoffLimit", backoff_limit},
                                                 {"activeDeadlineSeconds", active_deadline},
                                                 {"ttlSecondsAfterFinished", ttl}};
  for (const auto& [key, value] : numbers) {
    if (was_given(key))
      v[key] = value;
  }
  if (was_given("hostNetwork"))
    v["hostNetwork"] = host_network;
  if (!command.empty())
    v["command"] = command;
  if (!env.empty()) {
    json list = json::array();
    for (const auto& item : env) {
      auto [k, val] = key_value("--env", item);
      list.push_back({{"name", k}, {"value", val}});
    }
    v["env"] = list;
  }
  if (!labels.empty())
    v["labels"] = key_value_map("--label", labels, KeyValueRule::LabelValue);
  if (!annotations.empty())
    v["annotations"] = key_value_map("--annotation", annotations, KeyValueRule::AnyValue);
  if (!node_selectors.empty())
    v["nodeSelector"] = key_value_map("--node-selector", node_selectors, KeyValueRule::LabelValue);
  for (const auto& t : tolerations)
    v["tolerations"].push_back(parse_toleration(t));
  for (const auto& vol : volumes)
    v["volumes"].push_back(parse_volume_flag(vol));
  if (!image_pull_secrets.empty())
    v["imagePullSecrets"] = image_pull_secrets;
  // Per-role overrides; a role that is also a count (ps, chief, evaluator) becomes
  // {replicas: N, <key>: ...} as the templates expect.
  for (const auto& [path, value] : role_overrides) {
    const auto dot = path.find('.');
    const std::string role = path.substr(0, dot);
    const std::string key = path.substr(dot + 1);
    json& section = v[role];
    if (section.is_number())
      section = json{{"replicas", section}};
    section[key] = key == "gpus" ? json(parse_int("--" + role + "-gpus", value)) : json(value);
  }
  render::check_values(v, render::builtin_schema(kind), {.flags = true});
  return v;
}

bool JobFlags::uses_builtin_template() const {
  return render::find_template(template_search(template_file), template_name(kind)).shipped();
}

json JobFlags::values(const std::string& namespace_) const {
  const auto sources = render::discover_value_sources(std::filesystem::current_path(),
                                                      render::process_environment());
  render::LayerCheck check;
  if (uses_builtin_template()) {
    check = [this](const json& layer, const render::ValueOrigin& origin) {
      render::check_values(layer, render::builtin_schema(kind), origin);
    };
  }
  json flags = flag_values();
  if (!namespace_.empty())
    flags["namespace"] = namespace_;
  json values = render::layered_values({.sources = sources,
                                        .values_files = values_files,
                                        .flags = std::move(flags),
                                        .sets = sets,
                                        .set_strings = set_strings},
                                       check);
  render::require_printable(values);
  return values;
}

std::string job_example(api::JobKind kind, std::string_view more_flags) {
  const std::string_view flags = more_flags.empty() ? "" : " ";
  switch (kind) {
    case api::JobKind::TFJob:
      return fmt::format(
          "tfjob --name mnist --image reg/tf:1 --ps 1 --workers 2{}{} -- python "
          "train.py",
          flags, more_flags);
    case api::JobKind::PyTorchJob:
      return fmt::format(
          "pytorchjob --name bert --image reg/pt:1 --workers 3 --gpus 1{}{} -- "
          "torchrun train.py",
          flags, more_flags);
    default:
      return fmt::format(
          "mpijob --name pi --image reg/hvd:1 --workers 2{}{} -- mpirun python "
          "train.py",
          flags, more_flags);
  }
}

void add_job_flags(CLI::App& cmd, JobFlags& f) {
  using api::JobKind;
  const JobKind kind = f.kind;
  auto given = [&f](const char* key, CLI::Option* opt) { f.given[key] = opt; };
  cmd.footer(fmt::format(
      "Values come from .trainctl.yaml < ~/.config/trainctl/config.yaml < TRAINCTL_* < --values < "
      "flags < --set < --set-string. Each layer is checked against the values the built-in {0} "
      "template reads (`trainctl template show {0}`) before anything is rendered, as the typed "
      "flags are: a value of the wrong type or out of range, or an unknown key, exits 2 naming "
      "the flag, or the file, variable or --set and the key. .trainctl.yaml, the user's "
      "config.yaml and TRAINCTL_* may also hold values of the other kinds' templates. A template "
      "of your own (--template, $TRAINCTL_TEMPLATE_PATH, ~/.config/trainctl/templates) takes any "
      "key.",
      template_name(kind)));
  const char* job = "Job";
  cmd.add_option("--name", f.name, "Job name (default: metadata.generateName <kind>-)")->group(job);
  cmd.add_option("--image", f.image, "Container image of every replica")->group(job);
  const char* workers_help =
      kind == JobKind::PyTorchJob
          ? "Replicas in all: 1 Master + (N-1) Workers (default 1)"
          : (kind == JobKind::MPIJob ? "Worker replicas; the Launcher is always 1 (default 1)"
                                     : "Worker replicas (default 1)");
  given("workers", cmd.add_option("--workers", f.workers, workers_help)->group(job));
  if (kind == JobKind::TFJob) {
    given("ps", cmd.add_option("--ps", f.ps, "Parameter server replicas")->group(job));
    given("chief", cmd.add_option("--chief", f.chief, "Chief replicas (0 or 1)")->group(job));
    given("evaluator",
          cmd.add_option("--evaluator", f.evaluator, "Evaluator replicas")->group(job));
  }
  if (kind == JobKind::PyTorchJob) {
    cmd.add_option("--nproc-per-node", f.nproc_per_node,
                   "Processes per pod: auto, cpu, gpu or a positive integer")
        ->group(job);
  }
  if (kind == JobKind::MPIJob) {
    given("slotsPerWorker", cmd.add_option("--slots-per-worker", f.slots_per_worker,
                                           "MPI slots per worker (default: --gpus, else 1)")
                                ->group(job));
    cmd.add_option("--mpi-implementation", f.mpi_implementation, "OpenMPI, Intel or MPICH")
        ->group(job)
        ->check(one_of(allowed_values(kind, "mpiImplementation")));
  }
  const char* res = "Resources (every replica; per role with --<role>-<key>)";
  given("gpus", cmd.add_option("--gpus", f.gpus, "nvidia.com/gpu limit per replica")->group(res));
  cmd.add_option("--cpu", f.cpu, "CPU request and limit per replica, e.g. 4 or 500m")->group(res);
  cmd.add_option("--memory", f.memory, "Memory request and limit per replica, e.g. 16Gi")
      ->group(res);
  const render::ValueSchema& schema = render::builtin_schema(kind);
  for (const auto& role : schema.roles) {
    for (const auto& value : schema.role_values) {
      if (value.flag.empty())
        continue;
      const std::string flag = fmt::format("--{}-{}", role.name, value.flag);
      const std::string path = fmt::format("{}.{}", role.name, value.key);
      cmd.add_option_function<std::string>(
             flag, [&f, path](const std::string& v) { f.role_overrides[path] = v; },
             fmt::format("{} of the {} replicas", value.key, role.name))
          ->group(res);
    }
  }
  const char* pod = "Pods";
  cmd.add_option("--env", f.env, "Environment variable K=V (repeatable)")->group(pod);
  cmd.add_option("--label", f.labels, "Label k=v on the job and its pods (repeatable)")->group(pod);
  cmd.add_option("--annotation", f.annotations, "Annotation k=v on the job and its pods")
      ->group(pod);
  cmd.add_option("--volume", f.volumes,
                 "PVC mount PVC:PATH[:ro|:rw] (repeatable; read-write unless :ro)")
      ->group(pod);
  cmd.add_option("--node-selector", f.node_selectors, "Node selector k=v (repeatable)")->group(pod);
  cmd.add_option("--toleration", f.tolerations,
                 "Toleration key[=value][:Effect] (repeatable; no value = operator Exists)")
      ->group(pod);
  given("hostNetwork",
        cmd.add_flag("--host-network", f.host_network, "Use the host's network")->group(pod));
  cmd.add_option("--image-pull-secret", f.image_pull_secrets, "Image pull secret (repeatable)")
      ->group(pod);
  cmd.add_option("--working-dir", f.working_dir, "Working directory of the containers")->group(pod);
  cmd.add_option("--restart-policy", f.restart_policy, "Always, OnFailure, Never or ExitCode")
      ->group(pod)
      ->check(one_of(allowed_values(kind, "restartPolicy")));
  const char* run = "Run policy";
  cmd.add_option("--queue", f.queue, "Queue (schedulingPolicy.queue)")
      ->group(run)
      ->check(completes(ValueSource::Queues));
  cmd.add_option("--priority-class", f.priority_class, "schedulingPolicy.priorityClass")
      ->group(run);
  given("minAvailable",
        cmd.add_option("--min-available", f.min_available, "schedulingPolicy.minAvailable")
            ->group(run));
  given("backoffLimit",
        cmd.add_option("--backoff-limit", f.backoff_limit, "Retries before the job fails")
            ->group(run));
  given("activeDeadlineSeconds",
        cmd.add_option("--active-deadline", f.active_deadline,
                       "activeDeadlineSeconds: how long the job may run, e.g. 2h or 7200")
            ->group(run)
            ->transform(whole_seconds())
            ->type_name("DURATION"));
  given("ttlSecondsAfterFinished",
        cmd.add_option("--ttl", f.ttl,
                       "ttlSecondsAfterFinished: how long a finished job is kept, e.g. 10m or 600")
            ->group(run)
            ->transform(whole_seconds())
            ->type_name("DURATION"));
  cmd.add_option("--clean-pod-policy", f.clean_pod_policy, "None, Running or All")
      ->group(run)
      ->check(one_of(allowed_values(kind, "cleanPodPolicy")));
  const char* tpl = "Template and values";
  cmd.add_option("--template", f.template_file, "Render this template file instead")->group(tpl);
  cmd.add_option("--values", f.values_files,
                 "YAML values file (repeatable, later wins); checked like --set")
      ->group(tpl);
  cmd.add_option("--set", f.sets,
                 "Set a value: a.b=c (repeatable; typed as YAML). The built-in template's values "
                 "are checked as the flags are: a wrong type or an unknown key is an error; a "
                 "--template of your own takes any key")
      ->group(tpl);
  cmd.add_option("--set-string", f.set_strings, "Set a value as a string: a.b=c")->group(tpl);
  cmd.add_option("command", f.command, "-- COMMAND [ARGS...] run by the job's containers");
}

std::string template_name(api::JobKind kind) {
  return to_lower(api::job_kind_info(kind).name);
}

render::TemplateSearchPath template_search(const std::filesystem::path& explicit_file) {
  return render::template_search_path(render::process_environment(), TRAINCTL_TEMPLATE_DIR,
                                      explicit_file, TRAINCTL_SOURCE_TEMPLATE_DIR);
}

std::string spec_hash(const json& spec) {
  return sha256_hex(spec.dump(-1, ' ', false, json::error_handler_t::replace));
}

void annotate_job(json& object, const std::string& template_name) {
  json& metadata = object["metadata"];
  if (!metadata.is_object())
    metadata = json::object();
  json& annotations = metadata["annotations"];
  if (!annotations.is_object())
    annotations = json::object();
  if (!template_name.empty())
    annotations[std::string(api::annotations::template_name)] = template_name;
  annotations[std::string(api::annotations::spec_hash)] =
      spec_hash(object.value("spec", json::object()));
  annotations[std::string(api::annotations::version)] = kVersion;
}

RenderedJob render_job(const JobFlags& flags, const json& values) {
  const auto info =
      render::find_template(template_search(flags.template_file), template_name(flags.kind));
  if (info.shipped())
    render::require_image(values, render::builtin_schema(flags.kind));
  const std::string recorded =
      info.source == render::TemplateSource::Explicit ? info.path.filename().string() : info.name;
  const std::string yaml = render::render_template(render::read_template(info), values, recorded);
  auto manifests = api::parse_manifests(yaml, recorded + " (rendered)");
  if (manifests.size() != 1) {
    throw Error(ErrorKind::Validation,
                fmt::format("{} (rendered): expected one job, the template produced {} documents",
                            recorded, manifests.size()));
  }
  api::Manifest& m = manifests[0];
  json& metadata = m.object["metadata"];
  if (metadata.is_object()) {
    const json name = metadata.value("name", json());
    if ((!name.is_string() || name.get_ref<const std::string&>().empty()) &&
        !metadata.contains("generateName")) {
      metadata.erase("name");
      metadata["generateName"] = template_name(flags.kind) + "-";
    }
  }
  api::validate_job(m);
  annotate_job(m.object, recorded);
  return {std::move(m.object), recorded};
}

}  // namespace trainctl::cli
