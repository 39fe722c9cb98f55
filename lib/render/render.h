#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace trainctl::render {

/// The context a template sees: `values` plus two computed, reserved keys (any user value under
/// these names is replaced).
///
/// `roles.<r>` for r in chief, master, ps, worker, evaluator, launcher: the settings of that
/// replica role, each of image, imagePullPolicy, command, args, env, gpus, cpu, memory,
/// workingDir, restartPolicy taken from `<r>.<key>` when set, else from the top-level `<key>`
/// (the launcher does not inherit `gpus`). Computed per role:
///   env          -> a list of {name, value} with string values (an object {K: V} is accepted and
///                   sorted by name);
///   resources    -> {limits: {cpu, memory, nvidia.com/gpu}, requests: {cpu, memory}}, only the
///                   parts set (gpus go to limits only);
///   volumeMounts -> [{name: vol-<i>, mountPath, readOnly?}] for each entry of `volumes`.
/// `nprocPerNode` given as a number (`--set nprocPerNode=4`) is replaced by its text ("4"), as
/// the API spells it.
/// `derived`:
///   workers        -> `workers`, else `worker.replicas`, default 1;
///   chiefReplicas, psReplicas, evaluatorReplicas -> `<role>` when it is a number, else
///                     `<role>.replicas` (so a role can carry both a count and overrides:
///                     `ps: {replicas: 2, cpu: 4}`), default 0;
///   masterReplicas -> PyTorch: 1, or 0 with `elasticPolicy` (elastic jobs are all Workers);
///   pytorchWorkers -> PyTorch: workers - 1 (the Master is one of the N), or N with elasticPolicy;
///   volumes        -> [{name: vol-<i>, persistentVolumeClaim: {claimName, readOnly?}}];
///                     `volumes` entries are {pvc, mount, readOnly} or "PVC:PATH[:ro|:rw]"
///                     strings (render/value_schema.h parse_volume);
///   imagePullSecrets -> [{name}] from a list of names (or {name} objects);
///   slotsPerWorker -> `slotsPerWorker`, else `gpus` when > 0, else unset;
///   hasRunPolicy / hasSchedulingPolicy -> whether any runPolicy / schedulingPolicy field is set.
nlohmann::json render_context(const nlohmann::json& values);

/// Renders a mustache template (mustache.h) against `render_context(values)` and returns the YAML
/// text; the caller parses and validates it. Same inputs give the same bytes.
///
/// YAML safety: values reach the template already spelled as YAML.
///   {{key}}       a string renders JSON-quoted ("foo: #1" -> "\"foo: #1\""), a number as
///                 itself; true/false/null render nothing. Never wrap it in quotes, and do not
///                 paste it inside a longer scalar. {{{key}}} is the same (no HTML escaping).
///   {{json:key}}  any member (object, list, scalar, even 0/false/"") as inline JSON flow
///                 text, which is valid YAML: `labels: {{json:labels}}`. Present whenever the key
///                 is set and not null, so `{{#json:key}}` means "key is set". The prefix goes on
///                 the last name segment: `{{derived.json:volumes}}`.
///   {{#key}}      false for null, false, 0, "", [] and {}; a list iterates (its scalar items
///                 render JSON-spelled as {{.}}); an object becomes the context.
/// Template errors are Error(Validation) "template NAME:LINE: message".
std::string render_template(std::string_view template_text, const nlohmann::json& values,
                            std::string_view template_name);

}  // namespace trainctl::render
