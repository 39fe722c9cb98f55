// trainctl submit tfjob|pytorchjob|mpijob [flags] -- COMMAND... | submit -f FILE|-: renders or
// reads jobs, validates every one before any request, then creates (or skips/replaces) them.
//
// A job given no name gets `metadata.generateName: <kind>-` and the server picks the suffix.
// Values: .trainctl.yaml < user config < TRAINCTL_* < --values < flags < --set < --set-string.
// --wait follows the created jobs to their end (submit_wait.h).
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <iterator>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>

#include "api/manifest.h"
#include "api/status.h"
#include "api/validation.h"
#include "commands.h"
#include "docs.h"
#include "duration.h"
#include "error.h"
#include "job_lookup.h"
#include "job_values.h"
#include "job_watch.h"
#include "json_access.h"
#include "parallel.h"
#include "printer.h"
#include "queue_fit.h"
#include "submit_wait.h"

namespace trainctl::cli {
namespace {

using nlohmann::json;

std::string read_input(const std::string& file) {
  if (file == "-") {
    return {std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>()};
  }
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    throw Error(ErrorKind::Usage,
                fmt::format("{}: cannot read the file: {}", file, std::strerror(errno)));
  }
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

/// The files -f names, a directory as kubectl reads one: its .json, .yaml and .yml files (not
/// its subdirectories), by name.
std::vector<std::string> input_files(const std::vector<std::string>& named) {
  std::vector<std::string> files;
  for (const std::string& name : named) {
    std::error_code error;
    if (name == "-" || !std::filesystem::is_directory(name, error)) {
      files.push_back(name);
      continue;
    }
    std::vector<std::string> inside;
    for (const auto& entry : std::filesystem::directory_iterator(name, error)) {
      const std::string extension = entry.path().extension().string();
      if (entry.is_regular_file(error) &&
          (extension == ".json" || extension == ".yaml" || extension == ".yml"))
        inside.push_back(entry.path().string());
    }
    if (error)
      throw Error(ErrorKind::Usage,
                  fmt::format("{}: cannot read the directory: {}", name, error.message()));
    std::sort(inside.begin(), inside.end());
    files.insert(files.end(), inside.begin(), inside.end());
  }
  return files;
}

/// Reads and validates every document of every file (the items of a List as documents); throws
/// one Error(Validation) listing every problem of every document, so nothing is sent when any
/// document is bad. Two documents of one job (kind, namespace and name) are a problem: created
/// concurrently, which one the server kept would be chance. A resourceVersion (`get -o yaml`
/// output) is dropped, as kubectl create does: the server refuses a create that carries one.
std::vector<json> read_jobs(const std::vector<std::string>& files) {
  std::vector<json> jobs;
  std::vector<std::string> problems;
  std::map<std::string, std::string> written_at;  // kind/namespace/name -> file:line
  const auto take = [&](api::Manifest& m) {
    // string_member: `kind:` left empty (null) or a number must be this error, not a throw.
    const std::string kind = string_member(m.object, "kind");
    if (!api::job_kind_from_name(kind)) {
      problems.push_back(fmt::format("{}:{}: kind: \"{}\" is not a TFJob, PyTorchJob or MPIJob",
                                     m.source.file, m.source.line_of("kind"), kind));
      return;
    }
    try {
      api::validate_job(m);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::Validation)
        throw;
      problems.push_back(e.message());
      return;
    }
    const json& metadata = object_member(m.object, "metadata");
    const std::string name = string_member(metadata, "name");
    const std::string at = fmt::format("{}:{}", m.source.file, m.source.line_of("metadata.name"));
    if (!name.empty()) {
      const auto [first, fresh] = written_at.try_emplace(
          fmt::format("{}/{}/{}", kind, string_member(metadata, "namespace"), name), at);
      if (!fresh) {
        problems.push_back(fmt::format("{}: {} \"{}\" is also at {}: each job once", at, kind, name,
                                       first->second));
        return;
      }
    }
    if (json& md = m.object["metadata"]; md.is_object())
      md.erase("resourceVersion");
    annotate_job(m.object, "");
    jobs.push_back(std::move(m.object));
  };
  for (const auto& file : input_files(files)) {
    for (auto& m : api::parse_manifests(read_input(file), file)) {
      if (!api::is_list(m.object)) {
        take(m);
        continue;
      }
      for (auto& item : api::list_items(std::move(m)))
        take(item);
    }
  }
  if (!problems.empty()) {
    std::string message = problems[0];
    for (std::size_t i = 1; i < problems.size(); ++i)
      message += "\n" + problems[i];
    throw Error(ErrorKind::Validation, message);
  }
  if (jobs.empty())
    throw Error(ErrorKind::Usage, "no job in the input");
  return jobs;
}

/// The kind of a validated job document.
api::JobKind kind_of(const json& job) {
  return *api::job_kind_from_name(job.value("kind", ""));
}

std::string metadata_string(const json& job, const char* key) {
  const json& md = job.contains("metadata") ? job["metadata"] : json();
  if (!md.is_object())
    return "";
  const json value = md.value(key, json());
  return value.is_string() ? value.get<std::string>() : "";
}

/// At most this many jobs are written at once: a 100-job file goes at the speed of the API
/// server, while one command never holds more than a handful of its connections.
constexpr std::size_t kWritesInFlight = 16;
/// Up to this many jobs are written over HTTP/1.1 connections of the command's own (one per write
/// in flight); more go as HTTP/2 streams of one connection, for which libcurl is loaded. Against
/// a local kube-apiserver (--dry-run=server, median of 20): 8 jobs 54.6 ms through libcurl, 55.0
/// over connections of its own; 16 jobs 60.9 and 75.3 (16 TLS handshakes); 32 jobs 91.0 and 100.6.
constexpr std::size_t kMostJobsOverOwnConnections = 8;

/// What writing one job gave: the lines to print for it, the job as the server has it, or why
/// it failed.
struct JobWrite {
  std::string lines;
  json result;
  std::optional<Error> failure;
};

/// Prints each job's lines in input order while the jobs are written concurrently: a job's
/// lines go out once every job before it has ended.
class InOrderOutput {
 public:
  explicit InOrderOutput(std::size_t count) : ready_(count) {}

  void done(std::size_t index, std::string lines) {
    std::lock_guard lock(mu_);
    ready_[index] = std::move(lines);
    for (; next_ < ready_.size() && ready_[next_]; ++next_)
      std::cout << *ready_[next_];
    std::cout << std::flush;
  }

 private:
  std::mutex mu_;
  std::vector<std::optional<std::string>> ready_;
  std::size_t next_ = 0;
};

/// The error of a submit some of whose jobs failed: the one failure as it is, or every failure
/// in input order under a count; the first decides the exit code.
Error failed_writes(const std::vector<Error>& failures, std::size_t jobs) {
  if (failures.size() == 1)
    return failures[0];
  std::string message = fmt::format("{} of {} jobs failed:", failures.size(), jobs);
  for (const auto& f : failures)
    message += "\n  " + f.message();
  return Error(failures[0].kind(), message, failures[0].http_code());
}

/// When --if-exists replace gives up waiting for replaced jobs to go: one deadline for the
/// whole submit.
struct ReplaceDeadline {
  std::chrono::milliseconds limit{0};
  std::chrono::steady_clock::time_point at;
};

/// What to do when a job of the same name exists.
enum class IfExists { Fail, Skip, Replace };

/// How long --if-exists replace waits for a replaced job to be deleted without --timeout:
/// kubectl replace --force's default.
constexpr std::chrono::minutes kReplaceTimeout{5};

/// --dry-run, -o and --if-exists: how jobs are written and what is printed.
struct WriteFlags {
  std::string dry_run = "none";
  std::string output;
  std::string if_exists = "fail";
  /// How long --if-exists replace waits for the old jobs to go: --timeout when given.
  std::string replace_timeout;

  IfExists if_exists_mode() const {
    if (if_exists == "fail")
      return IfExists::Fail;
    if (if_exists == "skip")
      return IfExists::Skip;
    if (if_exists == "replace")
      return IfExists::Replace;
    throw Error(ErrorKind::Usage,
                fmt::format("--if-exists: \"{}\" is not one of fail, skip, replace", if_exists));
  }

  void Validate() const {
    if (dry_run != "none" && dry_run != "client" && dry_run != "server") {
      throw Error(ErrorKind::Usage,
                  fmt::format("--dry-run: \"{}\" is not one of none, client, server", dry_run));
    }
    if_exists_mode();
    if (!output.empty()) {
      const OutputFormat f = parse_output_format(output);
      if (f != OutputFormat::Json && f != OutputFormat::Yaml && f != OutputFormat::Name)
        throw Error(ErrorKind::Usage, "submit prints -o yaml, json or name");
    }
  }

  /// Prints the jobs as -o asks (dry runs default to yaml); several jobs print as a YAML stream
  /// or a JSON List.
  void print(const std::vector<json>& jobs) const {
    const OutputFormat format = output.empty() ? OutputFormat::Yaml : parse_output_format(output);
    if (format == OutputFormat::Name) {
      for (const auto& job : jobs)
        print_name(std::cout, job, api::kind_resource_name(kind_of(job)));
      return;
    }
    print_documents(std::cout, jobs, format);
  }

  /// --if-exists replace, as `kubectl replace --force` does: deletes the existing job (the one
  /// looked at: a uid precondition) with Foreground propagation, then waits until it and its pods
  /// are gone, so the job created next is a fresh run with new pods, not a finished job updated
  /// in place. Appends what it did to `lines`.
  void delete_replaced(kube::Client& client, api::JobKind kind, const json& live,
                       const ReplaceDeadline& deadline, std::string& lines) const {
    const kube::Resource r = kube::resources::job(kind);
    try {
      client.remove(r, namespace_of(live), name_of(live),
                    {.propagation_policy = "Foreground", .precondition_uid = uid_of(live)});
      if (output.empty())
        lines += fmt::format("{} \"{}\" deleted\n", api::kind_resource_name(kind), name_of(live));
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::NotFound)
        throw;  // else gone meanwhile: nothing to delete
    }
    if (!wait_until_deleted(client, r, namespace_of(live), name_of(live), uid_of(live),
                            deadline.at)) {
      throw Error(
          ErrorKind::WaitTimeout,
          fmt::format("--if-exists replace: timed out after {} waiting for the existing "
                      "{} \"{}\" and its pods to be deleted; it was not created again",
                      api::human_duration(std::chrono::ceil<std::chrono::seconds>(deadline.limit)),
                      api::kind_resource_name(kind), name_of(live)));
    }
  }

  /// Writes one job with one request, its create; only when the server answers AlreadyExists
  /// does --if-exists decide what follows. Fills `write` as it goes, so what was done before a
  /// failure is still printed.
  void write_job(kube::Client& client, json job, const ReplaceDeadline& deadline,
                 JobWrite& write) const {
    const api::JobKind kind = kind_of(job);
    const kube::Resource r = kube::resources::job(kind);
    const std::string ns = metadata_string(job, "namespace");
    const std::string name = metadata_string(job, "name");
    const bool server_dry_run = dry_run == "server";
    const kube::WriteOptions options{.dry_run = server_dry_run, .field_manager = "trainctl"};
    const auto done = [&](json result, std::string_view verb) {
      if (output.empty() && !server_dry_run) {
        write.lines += fmt::format("{}/{} {}\n", api::kind_resource_name(kind),
                                   metadata_string(result, "name"), verb);
      }
      write.result = std::move(result);
    };
    try {
      done(client.create(r, ns, job, options), "created");
      return;
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::NotFound)
        client.require_served(r);  // says "run `trainctl install`" when that is why
      if (e.kind() != ErrorKind::AlreadyExists || name.empty())
        throw;
    }
    const IfExists mode = if_exists_mode();
    if (mode == IfExists::Fail) {
      throw Error(ErrorKind::AlreadyExists,
                  fmt::format("{} \"{}\" already exists in namespace {} (use --if-exists skip or "
                              "replace)",
                              r.display_name(), name, ns),
                  409);
    }
    const json live = client.get(r, ns, name);
    if (mode == IfExists::Skip) {
      // Not "unchanged" (kubectl apply's word for a live object equal to the file): the existing
      // job is kept as it is, never compared with the one given.
      done(live, "skipped (already exists; kept as it is, not compared)");
    } else if (server_dry_run) {
      // Nothing is deleted in a dry run: the server checks the new job as an update instead.
      job["metadata"]["resourceVersion"] = live["metadata"]["resourceVersion"];
      done(client.update(r, ns, job, options), "created");
    } else {
      delete_replaced(client, kind, live, deadline, write.lines);
      done(client.create(r, ns, job, options), "replaced");
    }
  }

  /// Creates (or skips/replaces) the jobs, kWritesInFlight at a time, prints what happened to
  /// each in input order and returns them as the server has them; `ns_flag` is -n/--namespace
  /// as given. Every job is tried; when any failed, the error names each that did.
  std::vector<json> Run(Connection& connection, const std::string& ns_flag,
                        std::vector<json> jobs) const {
    if (dry_run == "client") {
      for (auto& job : jobs) {
        if (!ns_flag.empty() && metadata_string(job, "namespace").empty())
          job["metadata"]["namespace"] = ns_flag;
      }
      print(jobs);
      return jobs;
    }
    if (jobs.size() > kMostJobsOverOwnConnections)
      connection.multiplex();
    kube::Client& client = connection.client();
    std::string default_ns = connection.namespace_();
    if (default_ns.empty())
      default_ns = "default";
    for (auto& job : jobs) {
      const std::string ns = metadata_string(job, "namespace");
      if (!ns.empty() && !ns_flag.empty() && ns != ns_flag) {
        throw Error(ErrorKind::Usage,
                    fmt::format("the namespace of job \"{}\" ({}) does not match --namespace {}",
                                metadata_string(job, "name"), ns, ns_flag));
      }
      if (ns.empty())
        job["metadata"]["namespace"] = default_ns;
    }
    ReplaceDeadline deadline;
    deadline.limit = replace_timeout.empty() ? std::chrono::milliseconds(kReplaceTimeout)
                                             : parse_duration_flag("--timeout", replace_timeout);
    deadline.at = std::chrono::steady_clock::now() + deadline.limit;
    // The queues, for the too-small warning after the writes, are read while the jobs are
    // written: a one-job submit then takes one round trip, not two.
    auto queues = std::async(std::launch::async, [&] { return read_queues(client, jobs); });
    std::vector<JobWrite> writes(jobs.size());
    InOrderOutput out(jobs.size());
    for_each_bounded(jobs.size(), kWritesInFlight, [&](std::size_t i) {
      try {
        write_job(client, jobs[i], deadline, writes[i]);
      } catch (const Error& e) {
        writes[i].failure = e;
      }
      out.done(i, writes[i].lines);
    });
    std::vector<json> written;
    std::vector<Error> failures;
    for (auto& w : writes) {
      if (w.failure)
        failures.push_back(std::move(*w.failure));
      else
        written.push_back(std::move(w.result));
    }
    warn_about_queues_too_small(queues.get(), written);
    if (!output.empty() || dry_run == "server")
      print(written);
    if (!failures.empty())
      throw failed_writes(failures, jobs.size());
    return written;
  }
};

void add_write_flags(CLI::App& cmd, WriteFlags& w) {
  cmd.add_option(
         "--dry-run", w.dry_run,
         "client: print the job, send nothing; server: let the server check it (dryRun=All)")
      ->expected(0, 1)
      ->default_str("client")
      ->check(one_of({"client", "server"}));
  cmd.add_option("-o,--output", w.output, "yaml, json or name (dry runs default to yaml)")
      ->check(one_of({"yaml", "json", "name"}));
  cmd.add_option("--if-exists", w.if_exists,
                 "When a job of that name exists: fail (default), skip (keep the existing job "
                 "as it is, without comparing it; printed as skipped), or replace: "
                 "delete it and its pods (waiting up to 5m, or --timeout) and create the job "
                 "anew, a fresh run")
      ->check(one_of({"fail", "skip", "replace"}));
}

struct SubmitOptions {
  std::array<JobFlags, 3> kinds;  // one per `submit KIND` subcommand
  std::array<CLI::App*, 3> kind_commands{};
  std::vector<std::string> files;
  WriteFlags write;
  SubmitWaitFlags follow;

  Connection connection;
  std::string ns_flag;              // -n/--namespace as given
  std::optional<std::size_t> kind;  // the `submit KIND` given, an index into `kinds`

  void Complete(const GlobalFlags& flags) {
    connection = Connection(flags);
    ns_flag = flags.overrides.namespace_;
    write.replace_timeout = follow.timeout;
    for (std::size_t i = 0; i < kinds.size(); ++i) {
      if (kind_commands[i]->parsed()) {
        kind = i;
        kinds[i].require_separator(flags.words_after_separator);
      }
    }
  }

  void Validate() const {
    write.Validate();
    if (follow.wait && write.dry_run != "none")
      throw Error(ErrorKind::Usage, "submit: --wait cannot be combined with --dry-run");
    if (!follow.timeout.empty())
      parse_duration_flag("--timeout",
                          follow.timeout);  // reject a bad value before creating anything
    if (kind && !files.empty())
      throw Error(ErrorKind::Usage, "submit: give either a job kind or -f, not both");
    if (!kind && files.empty())
      throw Error(ErrorKind::Usage, "submit: give a job kind (tfjob, pytorchjob, mpijob) or -f");
  }

  void Run() {
    const std::vector<json> jobs =
        kind ? std::vector<json>{render_job(kinds[*kind], kinds[*kind].values(ns_flag)).object}
             : read_jobs(files);
    const std::vector<json> written = write.Run(connection, ns_flag, jobs);
    if (follow.wait)
      wait_for_submitted(connection.client(), follow, written, !write.output.empty());
  }
};

}  // namespace

void add_submit_command(CLI::App& app, const GlobalFlags& flags, std::string_view kind) {
  auto opts = std::make_shared<SubmitOptions>();
  auto* submit = app.add_subcommand(
      "submit", "Create a training job from flags and a template, or from manifests (-f)");
  submit->footer(
      "--if-exists replace starts a fresh run, as `kubectl replace --force` does: the existing "
      "job is deleted with its pods (Foreground), and once it is gone the job is created anew. "
      "--wait follows the jobs this submit created (by uid), never an older job of the same "
      "name.");
  submit->require_subcommand(0, 1);
  submit->add_option(
      "-f,--filename", opts->files,
      "Manifest file, directory (its .yaml, .yml and .json files) or - for stdin (repeatable)");
  add_write_flags(*submit, opts->write);
  add_submit_wait_flags(*submit, opts->follow);
  const api::JobKind kinds[] = {api::JobKind::TFJob, api::JobKind::PyTorchJob,
                                api::JobKind::MPIJob};
  for (std::size_t i = 0; i < 3; ++i) {
    JobFlags& job = opts->kinds[i];
    job.kind = kinds[i];
    auto* cmd = submit->add_subcommand(
        template_name(kinds[i]),
        fmt::format("Submit a {} rendered from the {} template", api::job_kind_info(kinds[i]).name,
                    template_name(kinds[i])));
    opts->kind_commands[i] = cmd;
    if (!kind.empty() && kind != template_name(kinds[i]))
      continue;
    add_job_flags(*cmd, job);
    add_write_flags(*cmd, opts->write);
    add_submit_wait_flags(*cmd, opts->follow);
    add_examples(*cmd, fmt::format(R"(# Run it, follow it with its logs to the end, keep a report
trainctl submit {}
# Or first see what would be sent
trainctl submit {})",
                                   job_example(kinds[i], "--wait --logs --report report.json"),
                                   job_example(kinds[i], "--dry-run=client")));
  }
  add_examples(*submit, R"(# From flags and the built-in template
trainctl submit pytorchjob --name bert --image reg/pt:1 --workers 3 --gpus 1 -- python train.py
# From manifests; in CI, a fresh run each time, waited for
trainctl submit -f job.yaml --if-exists replace --wait --logs --report report.json)");
  run_verb(*submit, opts, flags);
}

}  // namespace trainctl::cli
