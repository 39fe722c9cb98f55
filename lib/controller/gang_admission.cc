// The builtin admission of gangs (gang.h: admit): what the caches say about groups, queues,
// nodes and pods, then one pass in fair-share and priority order over the Pending groups.

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <charconv>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <stdexcept>
#include <tuple>
#include <unordered_map>

#include "api/job.h"
#include "api/job_view.h"
#include "api/quantity.h"
#include "api/resources.h"
#include "api/status.h"
#include "api/well_known.h"
#include "controller/gang.h"
#include "controller/objects.h"
#include "controller/placement.h"
#include "controller/queue_share.h"
#include "error.h"
#include "json_access.h"
#include "kube/resource.h"
#include "text.h"

namespace trainctl::controller {
namespace {

using api::ResourceList;
using nlohmann::json;
using TimePoint = std::chrono::system_clock::time_point;

constexpr std::string_view kPending = "Pending";
constexpr std::string_view kInqueue = "Inqueue";
constexpr std::string_view kRunning = "Running";
constexpr std::string_view kCompleted = "Completed";
constexpr std::string_view kUnknown = "Unknown";
constexpr std::string_view kUnschedulable = "Unschedulable";
constexpr std::string_view kScheduled = "Scheduled";
/// Volcano's reason on the Scheduled condition.
constexpr std::string_view kGangReady = "tasks in gang are ready to be scheduled";
constexpr std::chrono::seconds kMaxRequeueBackoff{3600};

bool admitted_phase(std::string_view phase) {
  return phase == kInqueue || phase == kRunning || phase == kUnknown;
}

ResourceList max_of(const ResourceList& a, const ResourceList& b) {
  ResourceList result = a;
  for (const auto& [name, value] : b)
    result[name] = std::max(api::amount(result, name), value);
  return result;
}

/// `a - b` per resource of `a`, never below zero.
ResourceList shortfall(const ResourceList& a, const ResourceList& b) {
  ResourceList result = a;
  for (auto& [name, value] : result)
    value = std::max<std::int64_t>(0, value - api::amount(b, name));
  return result;
}

/// `list -= amount`, resource by resource.
void subtract(ResourceList& list, const ResourceList& amount) {
  for (const auto& [name, value] : amount)
    list[name] -= value;
}

ResourceList times(const ResourceList& list, int n) {
  ResourceList result = list;
  for (auto& [name, value] : result)
    value *= n;
  return result;
}

/// A `{name: quantity}` member of an object a user may have written by hand; a quantity that
/// does not parse is reported in `problem` (naming the field) and the list left empty, so one
/// bad object does not stop admission for everyone.
ResourceList read_resources(const json& object, std::string_view field, std::string_view key,
                            std::string& problem) {
  try {
    return api::parse_resource_list(member(object_member(object, field), key));
  } catch (const Error& e) {
    problem = fmt::format("{}.{}: {}", field, key, e.message());
    return {};
  }
}

/// The member `key` of `object` when it is a string, else nullptr; not copied.
const std::string* string_ref(const json& object, std::string_view key) {
  const auto it = object.find(key);
  return it != object.end() && it->is_string() ? &it->get_ref<const std::string&>() : nullptr;
}

/// The same, copied; nullopt when absent or not a string.
std::optional<std::string> string_at(const json& object, std::string_view key) {
  const std::string* value = string_ref(object, key);
  return value != nullptr ? std::optional<std::string>(*value) : std::nullopt;
}

/// The uid and resourceVersion members of `metadata` (null: absent or not a string), found in one
/// walk over its members that compares names' lengths first: a pass reads both of every
/// PodGroup, node and pod, and two lookups by name compared characters at every step.
std::pair<const std::string*, const std::string*> uid_and_version(const json& metadata) {
  std::pair<const std::string*, const std::string*> found;
  if (!metadata.is_object())
    return found;
  constexpr std::string_view kUid = "uid", kVersion = "resourceVersion";
  for (const auto& [key, value] : metadata.get_ref<const json::object_t&>()) {
    if (!value.is_string())
      continue;
    if (std::string_view(key) == kUid)  // string_view's == compares lengths first
      found.first = &value.get_ref<const std::string&>();
    else if (std::string_view(key) == kVersion)
      found.second = &value.get_ref<const std::string&>();
  }
  return found;
}

/// The first condition of one type in a PodGroup's status, as much as `shows` compares.
struct ConditionFacts {
  bool only_written_members = false;  // the five members a pass writes, and no others
  std::optional<std::string> status;
  std::optional<std::string> reason;
  std::optional<std::string> message;
};

/// What a PodGroup's status holds of what a pass writes into it, so that a pass tells whether
/// it would change the status without the object (`shows`).
struct StatusFacts {
  bool is_object = false;
  std::optional<std::string> phase;
  std::optional<double> running, succeeded, failed;  // when numbers
  bool has_conditions = false;                       // status.conditions is an array
  std::optional<ConditionFacts> unschedulable, scheduled;
};

/// The status of `object` as `value("status", json::object())` reads it, without copying it.
const json& status_of(const json& object) {
  static const json kEmpty = json::object();
  const auto it = object.find("status");
  return it == object.end() ? kEmpty : *it;
}

StatusFacts read_status(const json& object) {
  const json& status = status_of(object);
  StatusFacts f{.is_object = status.is_object()};
  if (!f.is_object)
    return f;
  const auto number = [&](const char* key) -> std::optional<double> {
    const auto it = status.find(key);
    return it != status.end() && it->is_number() ? std::optional(it->get<double>()) : std::nullopt;
  };
  f.phase = string_at(status, "phase");
  f.running = number("running");
  f.succeeded = number("succeeded");
  f.failed = number("failed");
  const auto conditions = status.find("conditions");
  f.has_conditions = conditions != status.end() && conditions->is_array();
  if (!f.has_conditions)
    return f;
  for (const json& c : *conditions) {
    const std::string type = string_member(c, "type");
    auto& first = type == kUnschedulable ? f.unschedulable : f.scheduled;
    if ((type != kUnschedulable && type != kScheduled) || first)
      continue;
    first =
        ConditionFacts{.only_written_members = c.size() == 5 && c.contains("lastTransitionTime"),
                       .status = string_at(c, "status"),
                       .reason = string_at(c, "reason"),
                       .message = string_at(c, "message")};
  }
  return f;
}

/// The annotations a pass sets or removes on a PodGroup.
constexpr std::array<std::string_view, 5> kWrittenAnnotations = {
    api::annotations::node_reservations, api::annotations::admitted_at,
    api::annotations::schedule_timeouts, api::annotations::requeue_at,
    api::annotations::preempted_by};

/// What a PodGroup's metadata holds of kWrittenAnnotations (annotations_patch).
struct AnnotationFacts {
  enum class Shape { Absent, NotObject, Object } shape = Shape::Absent;
  /// Those present: their text, nullopt for a value that is not a string.
  std::map<std::string, std::optional<std::string>, std::less<>> values;
};

AnnotationFacts read_annotations(const json& object) {
  AnnotationFacts f;
  const auto meta = object.find("metadata");
  if (meta == object.end() || !meta->is_object())
    return f;
  const auto annotations = meta->find("annotations");
  if (annotations == meta->end())
    return f;
  if (!annotations->is_object()) {
    f.shape = AnnotationFacts::Shape::NotObject;
    return f;
  }
  f.shape = AnnotationFacts::Shape::Object;
  for (const std::string_view key : kWrittenAnnotations) {
    if (const auto it = annotations->find(key); it != annotations->end())
      f.values.emplace(key, it->is_string() ? std::optional(it->get<std::string>()) : std::nullopt);
  }
  return f;
}

/// What a reservation holds on one node; nothing when a quantity does not parse.
using NodeReservations = std::vector<std::pair<std::string, ResourceList>>;

/// The members of `{"name":"value",...}` at `text[at]` as reservation_text writes them: names
/// in increasing order, no escapes or spaces; nullopt for anything else. Moves `at` past it.
std::optional<std::vector<std::pair<std::string_view, std::string_view>>> plain_members(
    std::string_view text, std::size_t& at) {
  const auto eat = [&](char c) {
    if (at >= text.size() || text[at] != c)
      return false;
    ++at;
    return true;
  };
  const auto plain_string = [&]() -> std::optional<std::string_view> {
    if (!eat('"'))
      return std::nullopt;
    const std::size_t start = at;
    while (at < text.size() && text[at] != '"') {
      if (text[at] <= ' ' || text[at] >= 0x7f || text[at] == '\\')
        return std::nullopt;
      ++at;
    }
    if (!eat('"'))
      return std::nullopt;
    return text.substr(start, at - start - 1);
  };
  std::vector<std::pair<std::string_view, std::string_view>> members;
  if (!eat('{'))
    return std::nullopt;
  if (eat('}'))
    return members;
  do {
    const auto name = plain_string();
    if (!name || !eat(':') || (!members.empty() && members.back().first >= *name))
      return std::nullopt;
    const std::size_t value = at;
    if (text.substr(at, 1) == "{") {  // a node's resources: kept as text, read by the caller
      if (!plain_members(text, at))
        return std::nullopt;
      members.emplace_back(*name, text.substr(value, at - value));
    } else if (const auto quantity = plain_string()) {
      members.emplace_back(*name, *quantity);
    } else {
      return std::nullopt;
    }
  } while (eat(','));
  if (!eat('}'))
    return std::nullopt;
  return members;
}

/// The reservation annotation of an admitted group, {node: {resource: quantity}}, node by node in
/// name order. Read directly in the form reservation_text writes (an admitted gang's annotation
/// is read on every pass), with the JSON parser otherwise (by hand, say): the same result. Text
/// that is not an object reserves nothing.
NodeReservations read_reservations(std::string_view text) {
  NodeReservations result;
  std::size_t at = 0;
  if (const auto nodes = plain_members(text, at); nodes && at == text.size()) {
    for (const auto& [node, resources] : *nodes) {
      ResourceList& list = result.emplace_back(std::string(node), ResourceList()).second;
      std::size_t inner = 0;
      try {
        for (const auto& [name, quantity] :
             plain_members(resources, inner)
                 .value_or(std::vector<std::pair<std::string_view, std::string_view>>()))
          list.try_emplace(name, api::parse_quantity_milli(quantity));
      } catch (const Error&) {
        list.clear();
      }
    }
    return result;
  }
  const json reservations = json::parse(text, nullptr, false);
  if (!reservations.is_object())
    return result;
  for (auto it = reservations.begin(); it != reservations.end(); ++it) {
    ResourceList list;
    try {
      list = api::parse_resource_list(it.value());
    } catch (const Error&) {
    }
    result.emplace_back(it.key(), std::move(list));
  }
  return result;
}

struct JobFacts;

/// What an AdmissionCache keeps of one object: what a pass read from it, under which version.
template <class Facts>
struct CacheEntry {
  std::string version;
  std::shared_ptr<const Facts> facts;
  std::uint64_t pass = 0;  // the last pass that used it
  /// Where it came in the input of the last pass that handed it out in input order (Order).
  std::size_t place = std::numeric_limits<std::size_t>::max();
};

/// What one PodGroup object says, read once per resourceVersion (AdmissionCache).
struct GroupFacts {
  ObjectReference reference;  // what its Events name
  std::string name;
  std::string ns;
  std::string key;  // namespace/name
  std::string queue;
  std::string phase;  // status.phase as written (may be empty)
  std::string priority_class;
  int min_member = 0;
  ResourceList min_resources;
  std::string invalid;  // why spec.minResources could not be read
  std::optional<TimePoint> created;
  /// Its trainctl.io annotations: preempted-by, requeue-at, admitted-at, schedule-timeouts, and
  /// node-reservations (nullopt when it has none).
  std::string preempted_by;
  std::optional<TimePoint> requeue_at;
  std::optional<TimePoint> admitted_at;
  std::string schedule_timeouts;
  std::optional<NodeReservations> reservations;
  /// Its controller ownerReference when that names a training job kind.
  StatusFacts status;
  AnnotationFacts annotations;
  struct Owner {
    std::string kind;
    std::string name;
    std::string uid;
  };
  std::optional<Owner> job_owner;
  /// The last lookup of that job by a pass with a cache, while the job caches stay as they were
  /// (AdmissionInput::jobs_version): the cache's entry of the job (null: the job is gone). Valid
  /// for the pass after the one that made or used it only: every pass in between used the entry,
  /// so the cache kept it.
  struct JobLookedUp {
    std::uint64_t jobs_generation = 0;  // AdmissionCache::Impl's, for the jobs_version then
    std::uint64_t pass = 0;
    CacheEntry<JobFacts>* job = nullptr;
  };
  mutable JobLookedUp job_looked_up;
};

/// Reads a PodGroup; each member is looked up once (a pass reads every PodGroup it has not
/// cached).
GroupFacts read_group(const json& object) {
  GroupFacts f{.reference = reference_to(object)};
  const json& metadata = object_member(object, "metadata");
  f.name = string_member(metadata, "name");
  f.ns = string_member(metadata, "namespace");
  f.key = f.ns + "/" + f.name;
  const json& spec = object_member(object, "spec");
  f.queue = string_member(spec, "queue");
  if (f.queue.empty())
    f.queue = default_queue;
  f.phase = string_member(object_member(object, "status"), "phase");
  f.priority_class = string_member(spec, "priorityClassName");
  const json& min_member = member(spec, "minMember");
  f.min_member = min_member.is_number_integer() ? min_member.get<int>() : 0;
  f.min_resources = read_resources(object, "spec", "minResources", f.invalid);
  f.created = api::parse_timestamp(string_member(metadata, "creationTimestamp"));
  if (const json& annotations = object_member(metadata, "annotations"); !annotations.empty()) {
    f.preempted_by = string_member(annotations, api::annotations::preempted_by);
    f.requeue_at = api::parse_timestamp(string_member(annotations, api::annotations::requeue_at));
    f.admitted_at = api::parse_timestamp(string_member(annotations, api::annotations::admitted_at));
    f.schedule_timeouts = string_member(annotations, api::annotations::schedule_timeouts);
    if (const std::string text = string_member(annotations, api::annotations::node_reservations);
        !text.empty())
      f.reservations = read_reservations(text);
  }
  f.status = read_status(object);
  f.annotations = read_annotations(object);
  const json& refs = member(metadata, "ownerReferences");
  if (!refs.is_array())
    return f;
  for (const auto& ref : refs) {
    if (!ref.is_object() || !ref.value("controller", false))
      continue;
    std::string kind = string_member(ref, "kind");
    if (api::job_kind_from_name(kind))
      f.job_owner =
          GroupFacts::Owner{std::move(kind), string_member(ref, "name"), string_member(ref, "uid")};
    break;
  }
  return f;
}

/// What one node object says, read once per resourceVersion (AdmissionCache).
struct NodeRead {
  std::string name;
  std::optional<ResourceList> allocatable;  // nullopt: a quantity in it does not parse
  /// Null for a node admission does not place pods on (not Ready, cordoned, or unreadable).
  std::shared_ptr<const NodeFacts> schedulable;
};

/// Whether two reads of an object tell admission the same. A node's status heartbeats give it a
/// new resourceVersion every few minutes without changing anything admission reads: its read is
/// kept then, and so is the capacity of a node list made of it. A PodGroup's or pod's new
/// version is always taken.
bool reads_alike(const GroupFacts&, const GroupFacts&) {
  return false;
}

bool reads_alike(const NodeRead& a, const NodeRead& b) {
  const auto same_taints = [](const std::vector<api::Taint>& x, const std::vector<api::Taint>& y) {
    return std::equal(x.begin(), x.end(), y.begin(), y.end(), [](const auto& s, const auto& t) {
      return s.key == t.key && s.value == t.value && s.effect == t.effect;
    });
  };
  if (a.name != b.name || a.allocatable != b.allocatable ||
      (a.schedulable == nullptr) != (b.schedulable == nullptr))
    return false;
  return a.schedulable == nullptr || (a.schedulable->name == b.schedulable->name &&
                                      a.schedulable->labels == b.schedulable->labels &&
                                      same_taints(a.schedulable->taints, b.schedulable->taints) &&
                                      a.schedulable->free == b.schedulable->free);
}

NodeRead read_node(const json& node) {
  NodeRead read{.name = name_of(node), .allocatable = allocatable_of(node)};
  if (read.allocatable) {  // an unreadable allocatable offers nothing
    if (auto facts = schedulable_node(node, *read.allocatable))
      read.schedulable = std::make_shared<const NodeFacts>(std::move(*facts));
  }
  return read;
}

/// What a pass reads from a gang's training job, once per resourceVersion (AdmissionCache).
struct JobFacts {
  ObjectReference reference;
  /// Per replica type, in the order of the spec: one pod of it (named `<job>-<type>`, count its
  /// replicas), or, when its template does not read (a quantity that does not parse), why.
  struct Replica {
    PodDemand pods;
    std::exception_ptr unreadable;
  };
  std::vector<Replica> replicas;
  std::optional<std::int64_t> schedule_timeout_seconds;
};

JobFacts read_job(const json& job) {
  JobFacts f{.reference = reference_to(job)};
  const api::JobView view(job);
  for (const api::ReplicaSpecView& replica : view.replica_specs()) {
    JobFacts::Replica r{
        .pods = {.name = fmt::format("{}-{}", f.reference.name, to_lower(replica.type)),
                 .count = replica.replicas}};
    try {
      r.pods = pod_demand(std::move(r.pods.name), 0, replica.replicas,
                          member(object_member(*replica.spec, "template"), "spec"));
    } catch (const Error&) {
      r.unreadable = std::current_exception();
    }
    f.replicas.push_back(std::move(r));
  }
  f.schedule_timeout_seconds = view.run_policy().scheduling.schedule_timeout_seconds;
  return f;
}

bool reads_alike(const JobFacts&, const JobFacts&) {
  return false;
}

struct PodFacts;

/// What the informer caches say about one PodGroup, its job and its pods in this pass: the facts
/// its object gives (by reference, into the cache) and what the pass finds and decides.
struct Queue;

struct Group {
  Group(const json& object, const GroupFacts& facts)
      : object(&object),
        facts(facts),
        name(facts.name),
        key(facts.key),
        queue(facts.queue),
        phase(facts.phase.empty() ? kPending : facts.phase),
        min_member(facts.min_member),
        min_resources(facts.min_resources),
        created(facts.created),
        preempted_by(facts.preempted_by),
        requeue_at(facts.requeue_at) {
    if (!facts.invalid.empty())
      block("InvalidMinResources", facts.invalid);
  }

  /// Its object as the input holds it: whole, or its metadata alone; and its resourceVersion
  /// there (null: none).
  const json* object;
  const std::string* version = nullptr;
  const GroupFacts& facts;
  const std::string& name;
  const std::string& key;  // namespace/name
  const std::string& queue;
  Queue* in_queue = nullptr;  // its queue, when there is one (set by Round::order_queues)
  std::string phase;
  const int min_member;
  const ResourceList& min_resources;
  ResourceList bound;                            // requests of its unfinished pods that have a node
  std::map<std::string, ResourceList> bound_on;  // the same per node, `pods` counted
  /// What its node reservation still holds per node, beyond its bound pods (kept with
  /// preemption only: its victims give it back).
  std::map<std::string, ResourceList> reserved_on;
  bool admitted_now = false;  // admitted in this round: never a victim of it
  std::size_t rank = 0;       // its place among the round's groups in key order (Groups::sort)
  /// Its pods: the object (perhaps its metadata alone: AdmissionCache::has_pod) and its facts.
  std::vector<std::pair<const json*, const PodFacts*>> pods;
  std::set<std::string> bound_names;  // its pods bound and unfinished, or succeeded
  int allocated = 0;                  // bound_names.size()
  int running = 0;
  int succeeded = 0;
  int failed = 0;
  const std::optional<TimePoint>& created;
  /// Its trainctl.io/preempted-by and requeue-at annotations as the cache shows them.
  const std::string& preempted_by;
  const std::optional<TimePoint>& requeue_at;
  std::shared_ptr<const JobFacts> job;  // what the cached training job that controls it says
  Priority priority;
  /// The Unschedulable condition of this round (empty message: nothing blocks the group): texts
  /// that outlive the round, a why-not message mostly shared by many gangs (Round::kept).
  std::string_view blocked;
  std::string_view blocked_reason;
  /// Annotations this round sets (a value) or removes (nullopt).
  std::map<std::string, std::optional<std::string>> annotations;

  /// What the group counts against its queue while admitted.
  ResourceList held() const { return max_of(min_resources, bound); }
  void block(std::string_view reason, std::string_view message) {
    blocked_reason = reason;
    blocked = message;
  }
};

/// A round's groups: made in place in one block (a Group is large to move, and a pass reads
/// thousands), found by key, visited in key order.
class Groups {
 public:
  void reserve(std::size_t n) {
    groups_.reserve(n);
    block_ = groups_.data();
    slots_.assign(std::bit_ceil(2 * n + 1), kEmpty);  // at most half full
    ordered_.reserve(n);
  }
  /// A group made of the object, or null when one of its key is here (the first counts). Never
  /// more than reserved: the index, the order and the queues point into the block.
  Group* add(const json& object, const GroupFacts& facts) {
    if (groups_.size() == groups_.capacity())
      throw std::logic_error("admission: more groups than reserved");
    const std::size_t slot = slot_of(facts.key);
    if (slots_[slot] != kEmpty)
      return nullptr;
    slots_[slot] = static_cast<std::uint32_t>(groups_.size());
    Group* const g = &groups_.emplace_back(object, facts);
    ordered_.push_back(g);
    return g;
  }
  /// Takes back the group add made last.
  void drop_last() {
    slots_[slot_of(groups_.back().key)] = kErased;
    ordered_.pop_back();
    groups_.pop_back();
  }
  /// Puts the groups in key order, once all are added.
  void sort() {
    const auto by_key = [](const Group* a, const Group* b) { return a->key < b->key; };
    if (!std::is_sorted(ordered_.begin(), ordered_.end(), by_key))
      std::sort(ordered_.begin(), ordered_.end(), by_key);
    for (std::size_t i = 0; i < ordered_.size(); ++i)
      ordered_[i]->rank = i;
  }
  Group* find(std::string_view key) const {
    const std::uint32_t at = slots_[slot_of(key)];
    return at == kEmpty ? nullptr : block_ + at;
  }
  std::size_t size() const { return ordered_.size(); }

  /// Visits the groups in key order.
  class Iterator {
   public:
    explicit Iterator(std::vector<Group*>::const_iterator at) : at_(at) {}
    Group& operator*() const { return **at_; }
    Iterator& operator++() {
      ++at_;
      return *this;
    }
    bool operator==(const Iterator&) const = default;

   private:
    std::vector<Group*>::const_iterator at_;
  };
  Iterator begin() const { return Iterator(ordered_.begin()); }
  Iterator end() const { return Iterator(ordered_.end()); }

 private:
  std::vector<Group> groups_;
  /// The index in groups_ of the group of each key, by the key's hash: open addressing with
  /// linear probing, half empty. A node per group in a std::unordered_map was a tenth of reading
  /// the groups (an allocation each, and a cache miss to reach it).
  static constexpr std::uint32_t kEmpty = std::numeric_limits<std::uint32_t>::max();
  static constexpr std::uint32_t kErased = kEmpty - 1;  // taken back: probing goes on past it
  std::vector<std::uint32_t> slots_ = {kEmpty};
  Group* block_ = nullptr;  // groups_.data(), which add never moves (it never grows past reserve)

  /// The slot of `key`'s group, else the empty slot that ends its probe.
  std::size_t slot_of(std::string_view key) const {
    const std::size_t mask = slots_.size() - 1;
    for (std::size_t i = std::hash<std::string_view>{}(key)&mask;; i = (i + 1) & mask) {
      const std::uint32_t at = slots_[i];
      if (at == kEmpty || (at != kErased && groups_[at].key == key))
        return i;
    }
  }
  std::vector<Group*> ordered_;
};

/// A group's creation time as a number, none before any: with its priority and its key's rank,
/// what groups are ordered by, compared as integers (a pass sorts thousands of groups; comparing
/// optional times and keys was most of it).
std::int64_t created_ticks(const Group& g) {
  return g.created ? g.created->time_since_epoch().count()
                   : std::numeric_limits<std::int64_t>::min();
}
using GroupOrder = std::tuple<std::int64_t, std::int64_t, std::size_t>;

struct Queue {
  const json* object = nullptr;
  std::string name;
  std::string state;
  std::int64_t weight = 1;
  ResourceList capability;  // a resource it does not name is unlimited
  ResourceList guarantee;
  bool reclaimable = true;  // Volcano's default when spec.reclaimable is unset
  std::string invalid;      // why spec.capability could not be read
  ResourceList held;
  std::vector<Group*> pending;  // in priority, then creation order
  std::size_t next = 0;         // the first of `pending` not yet decided this round
  ResourceList deserved;
  /// queue_share(held, deserved), made again whenever held changes (hold): the next queue is
  /// chosen by it before every decision.
  double share = 0;
  const Group* head = nullptr;       // its first gang that waits for nodes, this round
  std::map<std::string, int> gangs;  // by phase, as the round leaves them (write)

  /// Adds (sign 1) or takes off (sign -1) what a gang holds.
  void hold(const ResourceList& amount, int sign = 1) {
    if (sign > 0)
      api::add(held, amount);
    else
      subtract(held, amount);
    share = queue_share(held, deserved);
  }
};

bool finished(std::string_view phase) {
  return phase == "Succeeded" || phase == "Failed";
}

/// What the pods bound to one node request, and the gangs (or jobs) they belong to.
struct NodeLoad {
  ResourceList requested;
  std::set<std::string> jobs;
};

/// What one pod tells admission, read once per resourceVersion (AdmissionCache).
struct PodFacts {
  std::string name;
  std::string phase;
  std::string node;  // spec.nodeName
  /// Whether it holds room on its node: bound and not finished.
  bool on_node = false;
  /// What it holds there, `pods` counted (when on_node): its requests, or only its pod slot when
  /// they do not parse (the API server would not have taken it).
  ResourceList requests;
  std::string group_key;  // namespace/name of its PodGroup, "" for none
  std::string job_key;    // namespace/name of its gang, or of its job when it has none
  bool deleting = false;
  /// Its PodScheduled condition's message while it is not bound: what the scheduler last said.
  std::string scheduler_message;
};

PodFacts read_pod(const json& pod) {
  PodFacts f{.name = name_of(pod),
             .phase = string_member(object_member(pod, "status"), "phase"),
             .node = string_member(object_member(pod, "spec"), "nodeName"),
             .deleting = is_deleting(pod)};
  f.on_node = !f.node.empty() && !finished(f.phase);
  if (f.on_node) {
    try {
      f.requests = api::pod_requests(member(pod, "spec"));
    } catch (const Error&) {
      // count it as a pod only
    }
    f.requests[std::string(kPodsResource)] = 1000;
  }
  const std::string ns = namespace_of(pod);
  const std::string group_name = annotation_of(pod, api::annotations::group_name);
  if (!group_name.empty())
    f.group_key = ns + "/" + group_name;
  if (const std::string job =
          group_name.empty() ? label_of(pod, api::labels::job_name) : group_name;
      !job.empty())
    f.job_key = ns + "/" + job;
  if (const json* c = find_condition(object_member(pod, "status"), "PodScheduled"); c != nullptr)
    f.scheduler_message = string_member(*c, "message");
  return f;
}

bool reads_alike(const PodFacts&, const PodFacts&) {
  return false;
}

/// Adds a pod to its group, and its requests to its node's load.
void count_pod(const json& pod, const PodFacts& f, const Groups& groups,
               std::map<std::string, NodeLoad>& loads) {
  if (f.on_node) {
    NodeLoad& load = loads[f.node];
    api::add(load.requested, f.requests);
    if (!f.job_key.empty())
      load.jobs.insert(f.job_key);
  }
  Group* const found = f.group_key.empty() ? nullptr : groups.find(f.group_key);
  if (found == nullptr)
    return;
  Group& g = *found;
  g.pods.emplace_back(&pod, &f);
  // A pod being deleted leaves its gang's counts (its node carries it until it is gone): Volcano
  // does not count releasing tasks as ready either, and a job created again under the same name
  // must not find its predecessor's terminating pods holding its queue (found once the sandbox
  // deleted pods gracefully, as kube-apiserver does).
  if (f.deleting)
    return;
  g.running += f.phase == "Running";
  g.succeeded += f.phase == "Succeeded";
  g.failed += f.phase == "Failed";
  if (f.on_node || f.phase == "Succeeded")
    g.bound_names.insert(f.name);
  g.allocated = static_cast<int>(g.bound_names.size());
  if (!f.on_node)
    return;
  api::add(g.bound_on[f.node], f.requests);  // its pod slot too: the reservation counted it
  for (const auto& [name, value] : f.requests)
    if (name != kPodsResource)
      g.bound[name] += value;
}

/// Calls `visit(demand, count)` for the pods the group still needs placed: the job's first
/// minMember pods in replica-type order less those bound (`count` of each replica's pod
/// demand), or minMember - bound pods of minResources/minMember each without a job.
template <class Visit>
void visit_demands(const Group& g, const Visit& visit) {
  if (!g.job) {
    const int count = g.min_member - g.allocated;
    if (count <= 0 || g.min_member <= 0)
      return;
    PodDemand d{.name = g.name, .first_index = g.allocated, .count = count};
    for (const auto& [name, value] : g.min_resources)
      d.requests[name] = (value + g.min_member - 1) / g.min_member;
    return visit(d, count);
  }
  int left = g.min_member;
  for (const JobFacts::Replica& replica : g.job->replicas) {
    int count = std::min(left, replica.pods.count);
    if (count <= 0)
      break;
    left -= count;
    if (replica.unreadable)
      std::rethrow_exception(replica.unreadable);
    for (int i = 0, first = count; i < first && !g.bound_names.empty(); ++i)
      count -= g.bound_names.contains(fmt::format("{}-{}", replica.pods.name, i));
    visit(replica.pods, count);
  }
}

std::vector<PodDemand> demands_of(const Group& g) {
  std::vector<PodDemand> demands;
  visit_demands(g, [&](const PodDemand& d, int count) {
    demands.push_back(d);
    demands.back().count = count;
  });
  return demands;
}

/// What the pods the group still needs placed request in all (`pods` not counted).
ResourceList demand_total(const Group& g) {
  ResourceList total;
  visit_demands(g, [&](const PodDemand& d, int count) {
    for (const auto& [name, value] : d.requests)
      total[name] += value * count;
  });
  return total;
}

/// What a placed gang takes on each node, `pods` included.
std::map<std::size_t, ResourceList> taken_per_node(const std::vector<PodDemand>& demands,
                                                   const GangPlacement& placement) {
  std::map<std::size_t, ResourceList> result;
  for (std::size_t i = 0; i < demands.size(); ++i) {
    for (const auto& [node, pods] : placement.nodes[i]) {
      ResourceList r = times(demands[i].requests, pods);
      r[std::string(kPodsResource)] = 1000LL * pods;
      api::add(result[node], r);
    }
  }
  return result;
}

/// The reservation annotation of an admitted group, {node: {resource: quantity}}, exactly as
/// json::dump writes that object, without building it: `per_node` comes in the order of node
/// names (NodeCapacity's indices), resources in theirs. Of two nodes of one name the later
/// wins, as it would in a json object. Admission writes one for every gang it admits.
std::string reservation_text(const NodeCapacity& nodes,
                             const std::map<std::size_t, ResourceList>& per_node) {
  std::string text = "{";
  for (auto it = per_node.begin(); it != per_node.end(); ++it) {
    const std::string& name = nodes.name(it->first);
    if (const auto next = std::next(it); next != per_node.end() && nodes.name(next->first) == name)
      continue;
    if (text.size() > 1)
      text += ',';
    append_json_string(text, name);
    text += ":{";
    for (auto r = it->second.begin(); r != it->second.end(); ++r) {
      if (r != it->second.begin())
        text += ',';
      append_json_string(text, r->first);
      text += ':';
      append_json_string(text, api::format_quantity(r->first, r->second));
    }
    text += '}';
  }
  text += '}';
  return text;
}

/// format_quantity's texts, kept for one pass: the why-not messages of its thousands of waiting
/// gangs name a few amounts over and over (what the cluster or a queue has free, of what total,
/// and the sizes gangs come in), and formatting one cost more than finding it here.
class QuantityTexts {
 public:
  const std::string& operator()(const std::string& resource, std::int64_t milli) {
    auto it = std::find_if(by_resource_.begin(), by_resource_.end(),
                           [&](const auto& r) { return r.first == resource; });
    if (it == by_resource_.end())
      it = by_resource_.emplace(by_resource_.end(), resource, Texts{});
    auto [text, added] = it->second.try_emplace(milli);
    if (added)
      text->second = api::format_quantity(resource, milli);
    return text->second;
  }

 private:
  using Texts = std::unordered_map<std::int64_t, std::string>;
  std::vector<std::pair<std::string, Texts>> by_resource_;
};

/// Hashes a resource list for the why-not memo (Round::WhyNots) by its amounts and the lengths of
/// its names: the names of a pass's lists come from a handful, and equal hashes are compared
/// whole.
struct ResourceListHash {
  std::size_t operator()(const ResourceList& list) const {
    std::size_t h = list.size();
    for (const auto& [name, value] : list)
      h = (h * 1'000'003) ^ (static_cast<std::size_t>(value) * 131 + name.size());
    return h;
  }
};

/// `<scope>: <resource> <requested> requested, <free> free of <what> <total>` for each
/// resource of `need` that `free` (less `taken`, when given: a queue's capability less what it
/// holds) does not cover, joined by "; " (empty when it covers them all). With `only_named`,
/// resources `total` does not name are unlimited (a queue's capability); otherwise they count as 0
/// (the cluster). Appended piece by piece: every waiting gang of every pass gets one, and a format
/// string cost three times as much.
std::string shortages(QuantityTexts& texts, std::string_view scope, std::string_view of,
                      const ResourceList& need, const ResourceList& free, const ResourceList& total,
                      bool only_named, const ResourceList* taken = nullptr) {
  std::string result;
  for (const auto& [name, requested] : need) {
    if (requested <= 0 || name == kPodsResource || (only_named && !total.contains(name)))
      continue;
    const std::int64_t available = std::max<std::int64_t>(
        0, api::amount(free, name) - (taken != nullptr ? api::amount(*taken, name) : 0));
    if (requested <= available)
      continue;
    if (!result.empty())
      result += "; ";
    result.append(scope).append(": ").append(name).append(" ");
    result.append(texts(name, requested)).append(" requested, ");
    result.append(texts(name, available)).append(" free of ").append(of);
    result.append(texts(name, api::amount(total, name)));
  }
  return result;
}

/// Whether the status read says Unschedulable is True (condition_true).
bool unschedulable_true(const StatusFacts& status) {
  return status.unschedulable && status.unschedulable->status == "True";
}

/// A condition the round sets on a PodGroup's status.
struct ConditionChange {
  std::string_view type;
  std::string_view status;
  std::string_view reason;
  std::string_view message;
};

/// What the round writes into a PodGroup's status; the rest of the status is kept. Made for every
/// gang of every pass: its texts are views (of the group's, or of `admitted` here, which is why
/// it is neither copied nor moved) and its conditions are not a container of their own.
struct GroupStatusChange {
  std::string_view phase;
  int running = 0;
  int succeeded = 0;
  int failed = 0;
  std::array<ConditionChange, 2> set{};  // set[0, count), in this order
  std::size_t count = 0;
  std::string admitted;  // the message of an Unschedulable condition turned False

  /// What the round writes for `g`.
  explicit GroupStatusChange(const Group& g)
      : phase(g.phase), running(g.running), succeeded(g.succeeded), failed(g.failed) {
    if (!g.blocked.empty()) {
      set[count++] = {kUnschedulable, "True", g.blocked_reason, g.blocked};
    } else if (unschedulable_true(g.facts.status)) {
      admitted = fmt::format("admitted to queue {}", g.queue);
      set[count++] = {kUnschedulable, "False", "Enqueued", admitted};
    }
    if (g.phase == kRunning || g.phase == kCompleted)
      set[count++] = {kScheduled, "True", kGangReady, ""};
  }
  GroupStatusChange(const GroupStatusChange&) = delete;
  GroupStatusChange& operator=(const GroupStatusChange&) = delete;

  std::span<const ConditionChange> conditions() const { return {set.data(), count}; }
};

/// Appends `c` as a condition object (members in key order, as json::dump writes them), with
/// lastTransitionTime `now`, or that of `replaced` (the condition it replaces, if any) when that
/// has the same status.
void append_condition(std::string& out, const ConditionChange& c, const json* replaced,
                      std::string_view now) {
  out += R"({"lastTransitionTime":)";
  const json* since = nullptr;
  if (replaced != nullptr && string_member(*replaced, "status") == c.status) {
    if (const auto it = replaced->find("lastTransitionTime"); it != replaced->end())
      since = &*it;
  }
  if (since != nullptr)
    out += since->dump();
  else
    append_json_string(out, now);
  out += R"(,"message":)";
  append_json_string(out, c.message);
  out += R"(,"reason":)";
  append_json_string(out, c.reason);
  out += R"(,"status":)";
  append_json_string(out, c.status);
  out += R"(,"type":)";
  append_json_string(out, c.type);
  out += '}';
}

/// Appends the conditions array a pass writes: `old` (a group's conditions; anything but an array
/// reads as none), each condition of `set` in place of the first of its type or after them all.
void append_conditions(std::string& out, const json& old, std::span<const ConditionChange> set,
                       std::string_view now) {
  std::array<bool, std::tuple_size_v<decltype(GroupStatusChange::set)>> placed{};
  out += '[';
  bool first = true;
  const auto separate = [&] {
    if (!first)
      out += ',';
    first = false;
  };
  if (old.is_array()) {
    for (const json& c : old) {
      separate();
      const std::string type = string_member(c, "type");
      const auto at = std::find_if(set.begin(), set.end(), [&](const ConditionChange& change) {
        return !placed[&change - set.data()] && change.type == type;
      });
      if (at == set.end()) {
        out += c.dump();
        continue;
      }
      placed[at - set.begin()] = true;
      append_condition(out, *at, &c, now);
    }
  }
  for (std::size_t i = 0; i < set.size(); ++i) {
    if (!placed[i]) {
      separate();
      append_condition(out, set[i], nullptr, now);
    }
  }
  out += ']';
}

/// Whether a status that reads `old` says what `change` would write (its status patch would
/// change nothing), decided without the object: once a gang waits, every pass finds its status as
/// the last one left it.
bool shows(const StatusFacts& old, const GroupStatusChange& change) {
  if (!old.is_object)
    return false;
  const auto same = [](const std::optional<double>& number, int value) {
    return number && *number == value;
  };
  if (old.phase != change.phase || !same(old.running, change.running) ||
      !same(old.succeeded, change.succeeded) || !same(old.failed, change.failed))
    return false;
  if (change.count == 0)
    return true;
  if (!old.has_conditions)
    return false;
  const auto conditions = change.conditions();
  return std::all_of(conditions.begin(), conditions.end(), [&](const auto& want) {
    // The condition append_conditions would replace stays as it is only if it has exactly the
    // members the new one gets and the same status (its lastTransitionTime is carried over).
    const auto& c = want.type == kUnschedulable ? old.unschedulable : old.scheduled;
    return c && c->only_written_members && c->status == want.status && c->reason == want.reason &&
           c->message == want.message;
  });
}

json queue_status(const Queue& q) {
  json status = status_of(*q.object);
  const auto count = [&](std::string_view phase) {
    const auto it = q.gangs.find(std::string(phase));
    return it == q.gangs.end() ? 0 : it->second;
  };
  // As Volcano's queue controller: Closing while any PodGroup names the queue, whatever its phase
  // (a Pending one would wait for ever in a queue deleted once Closed).
  std::string state = q.state;
  if (state == "Closing" &&
      std::all_of(q.gangs.begin(), q.gangs.end(), [](const auto& g) { return g.second == 0; }))
    state = "Closed";
  status["state"] = state;
  status["pending"] = count(kPending);
  status["inqueue"] = count(kInqueue);
  status["running"] = count(kRunning);
  status["completed"] = count(kCompleted);
  status["unknown"] = count(kUnknown);
  status["allocated"] = api::resource_list_json(q.held);
  return status;
}

}  // namespace

/// Facts by uid: an entry is read again when its resourceVersion changes, and dropped by the
/// first pass that ends without having used it.
struct AdmissionCache::Impl {
  template <class Facts>
  using Entry = CacheEntry<Facts>;
  template <class Facts>
  using Entries = std::unordered_map<std::string, Entry<Facts>>;

  /// False for the cache of a single pass (admit without one): nothing is kept by uid.
  bool keeps = true;
  Entries<GroupFacts> groups;
  Entries<NodeRead> nodes;
  Entries<PodFacts> pods;
  Entries<JobFacts> jobs;
  /// The entries of one kind a pass handed out, in the order the input listed the objects, and
  /// the last pass's: an informer lists them in the same order pass after pass, so the entry at
  /// the same place is tried first, before a hash and a bucket (a cache miss each, and a seventh
  /// of a steady pass over 10,000 gangs). Null where an object was not cached.
  template <class Facts>
  struct Order {
    using Item = typename Entries<Facts>::value_type;
    std::vector<Item*> last, now;
    std::size_t next = 0;  // where in `last` the next object's entry is looked for
    std::size_t hits = 0;  // entries found there in this pass
    void begin() {
      last.swap(now);
      now.clear();
      next = hits = 0;
    }
    /// The last pass's entry at the place of the next object, when it is `uid`'s.
    Item* hint(const std::string& uid) {
      const bool hit = next < last.size() && last[next] != nullptr && last[next]->first == uid;
      hits += hit;
      return hit ? last[next] : nullptr;
    }
    /// Records the next object's entry (null: not cached). The object after it is looked for
    /// after the place this one had in the last pass: an object inserted or deleted before it
    /// costs one lookup by uid, not one for every object after it.
    void handed_out(Item* at) {
      if (at != nullptr) {
        const std::size_t was = at->second.place;
        if (was < last.size() && last[was] == at)
          next = was + 1;
        at->second.place = now.size();
      }
      now.push_back(at);
    }
  };
  Order<GroupFacts> group_order;
  Order<NodeRead> node_order;
  Order<PodFacts> pod_order;
  std::uint64_t pass = 0;
  /// The last non-empty AdmissionInput::jobs_version, and a number for it that grows with every
  /// new one (what a GroupFacts' job lookup remembers).
  std::string jobs_version;
  std::uint64_t jobs_generation = 0;
  std::size_t read = 0;  // objects read in this pass
  std::size_t used = 0;  // entries handed out in this pass
  /// What objects without a uid or resourceVersion were read into, kept until the pass ends.
  std::vector<std::shared_ptr<const void>> uncached;
  /// The node list of the last pass, by the facts read, and what it offers before any pod or
  /// reservation is taken off it: the same list again is not indexed again.
  std::vector<std::shared_ptr<const NodeRead>> node_list;
  std::optional<NodeCapacity> capacity;
  ResourceList total;  // allocatable of its schedulable nodes
  bool node_list_reused = false;
  /// A queue's pending gangs in the order the last pass decided them: their keys sorted, and
  /// where the key of each group rank (Groups::sort) stands among them.
  struct PendingOrder {
    static constexpr std::uint32_t kNone = std::numeric_limits<std::uint32_t>::max();
    std::vector<GroupOrder> sorted;
    std::vector<std::uint32_t> at_rank;
  };
  using PendingOrders = std::unordered_map<std::string, PendingOrder>;
  PendingOrders pending_orders;  // by queue name

  void begin() {
    ++pass;
    read = used = 0;
    uncached.clear();
    group_order.begin();
    node_order.begin();
    pod_order.begin();
  }

  /// The input order of entries of `Facts` (PodGroups, nodes, pods).
  template <class Facts>
  Order<Facts>& order() {
    if constexpr (std::is_same_v<Facts, GroupFacts>)
      return group_order;
    else if constexpr (std::is_same_v<Facts, NodeRead>)
      return node_order;
    else
      return pod_order;
  }

  /// The newest facts of an object an informer delivered (AdmissionCache::observe_*), until
  /// take_observed() moves them into the entries.
  template <class Facts>
  struct Seen {
    std::string version;
    std::shared_ptr<const Facts> facts;
  };
  template <class Facts>
  using Inbox = std::unordered_map<std::string, Seen<Facts>>;  // by uid
  struct Observed {
    Inbox<GroupFacts> groups;
    Inbox<NodeRead> nodes;
    Inbox<PodFacts> pods;
    Inbox<JobFacts> jobs;
  };
  std::mutex observed_mutex;
  Observed observed;  // guarded by observed_mutex

  /// Reads `object` into `inbox` (on an informer's thread: the lock is held only to file it).
  template <class Facts, class Read>
  void observe(Inbox<Facts> Observed::*inbox, const json& object, Read read_object) {
    const auto [uid, version] = uid_and_version(object_member(object, "metadata"));
    if (uid == nullptr || version == nullptr || uid->empty() || version->empty())
      return;
    Seen<Facts> seen{.version = *version,
                     .facts = std::make_shared<const Facts>(read_object(object))};
    const std::lock_guard lock(observed_mutex);
    (observed.*inbox).insert_or_assign(*uid, std::move(seen));
  }

  /// Files observed facts as entries, as get() would have read them (an entry of that version
  /// stays; a node read alike keeps its earlier read).
  template <class Facts>
  static void take(Inbox<Facts>& inbox, Entries<Facts>& entries) {
    for (auto& [uid, seen] : inbox) {
      Entry<Facts>& e = entries[uid];
      if (e.facts && e.version == seen.version)
        continue;
      if (!e.facts || !reads_alike(*e.facts, *seen.facts))
        e.facts = std::move(seen.facts);
      e.version = std::move(seen.version);
    }
  }

  void take_observed() {
    Observed taken;
    {
      const std::lock_guard lock(observed_mutex);
      std::swap(taken, observed);
    }
    if (!keeps)
      return;
    take(taken.groups, groups);
    take(taken.nodes, nodes);
    take(taken.pods, pods);
    take(taken.jobs, jobs);
  }

  /// Drops what this pass did not use: objects deleted (or no longer listed) since.
  void end() {
    if (used == groups.size() + nodes.size() + pods.size() + jobs.size())
      return;  // the common case: nothing deleted, no need to look
    std::erase_if(groups, [&](const auto& e) { return e.second.pass != pass; });
    std::erase_if(nodes, [&](const auto& e) { return e.second.pass != pass; });
    std::erase_if(pods, [&](const auto& e) { return e.second.pass != pass; });
    std::erase_if(jobs, [&](const auto& e) { return e.second.pass != pass; });
  }

  /// Whether get() finds an object of this uid and resourceVersion here, without reading it.
  template <class Facts>
  bool has(const Entries<Facts>& entries, const std::string& uid,
           const std::string& version) const {
    if (!keeps || uid.empty() || version.empty())
      return false;
    const auto it = entries.find(uid);
    return it != entries.end() && it->second.facts && it->second.version == version;
  }

  /// The entry of `uid` (null: none).
  template <class Facts>
  static Entry<Facts>* find(Entries<Facts>& entries, const std::string& uid) {
    const auto it = entries.find(uid);
    return it == entries.end() ? nullptr : &it->second;
  }

  /// The facts of `object`: cached under its uid and resourceVersion, else read by `read_object`
  /// (and cached, unless an object of that uid but another version was read in this pass already).
  template <class Facts, class Read>
  std::shared_ptr<const Facts> get(Entries<Facts>& entries, const json& object, Read read_object) {
    const auto [uid, version] = uid_and_version(object_member(object, "metadata"));
    return get<Facts>(
        entries, uid, version, [&] { return read_object(object); }, &order<Facts>());
  }

  /// The same for an object found with its version (its facts read from `object` when not
  /// cached: present unless this cache has that version).
  template <class Facts, class Read>
  std::shared_ptr<const Facts> get(Entries<Facts>& entries, const kube::cache::Versioned& found,
                                   Read read_object) {
    return get<Facts>(entries, &found.uid, &found.resource_version,
                      [&] { return read_object(found.object.value()); });
  }

  /// Marks `e` used by this pass (end() keeps it) and hands out its facts.
  template <class Facts>
  std::shared_ptr<const Facts> use(Entry<Facts>& e) {
    used += e.pass != pass;
    e.pass = pass;
    return e.facts;
  }

  /// The facts of the object of `uid` and `version` (null: it has none), cached, else
  /// `read_facts()`; `order`, when given, is where the object comes in the input.
  template <class Facts, class Read>
  std::shared_ptr<const Facts> get(Entries<Facts>& entries, const std::string* uid,
                                   const std::string* version, Read read_facts,
                                   Order<Facts>* order = nullptr) {
    typename Entries<Facts>::value_type* at = nullptr;
    if (keeps && uid != nullptr && version != nullptr && !uid->empty() && !version->empty()) {
      if (order != nullptr)
        at = order->hint(*uid);
      if (at == nullptr)
        at = &*entries.try_emplace(*uid).first;
    }
    if (order != nullptr)
      order->handed_out(at);
    if (at != nullptr) {
      Entry<Facts>& e = at->second;
      if (e.facts && e.version == *version)
        return use(e);
      if (e.pass != pass) {  // not handed out in this pass: may be replaced
        ++read;
        auto facts = std::make_shared<const Facts>(read_facts());
        if (!e.facts || !reads_alike(*e.facts, *facts))
          e.facts = std::move(facts);
        e.version = *version;
        e.pass = pass;
        ++used;
        return e.facts;
      }
    }
    ++read;
    auto facts = std::make_shared<const Facts>(read_facts());
    uncached.push_back(facts);
    return facts;
  }
};

AdmissionCache::AdmissionCache() : impl_(std::make_unique<Impl>()) {}
AdmissionCache::~AdmissionCache() = default;

AdmissionCache::Stats AdmissionCache::stats() const {
  return {
      .pod_groups = impl_->groups.size(),
      .nodes = impl_->nodes.size(),
      .pods = impl_->pods.size(),
      .jobs = impl_->jobs.size(),
      .read = impl_->read,
      .found_by_place = impl_->group_order.hits + impl_->node_order.hits + impl_->pod_order.hits,
      .node_list_reused = impl_->node_list_reused};
}

kube::cache::Versioned found_job(const json& job, const kube::cache::DecodeFilter& decode) {
  kube::cache::Versioned found{
      .uid = uid_of(job),
      .resource_version = string_member(member(job, "metadata"), "resourceVersion")};
  if (decode(found.uid, found.resource_version))
    found.object = job;
  return found;
}

bool AdmissionCache::has_node(const std::string& uid, const std::string& resource_version) const {
  return impl_->has(impl_->nodes, uid, resource_version);
}

bool AdmissionCache::has_pod(const std::string& uid, const std::string& resource_version) const {
  return impl_->has(impl_->pods, uid, resource_version);
}

bool AdmissionCache::has_pod_group(const std::string& uid,
                                   const std::string& resource_version) const {
  return impl_->has(impl_->groups, uid, resource_version);
}

void AdmissionCache::observe_pod_group(const json& object) {
  impl_->observe(&Impl::Observed::groups, object, read_group);
}

void AdmissionCache::observe_node(const json& object) {
  impl_->observe(&Impl::Observed::nodes, object, read_node);
}

void AdmissionCache::observe_pod(const json& object) {
  impl_->observe(&Impl::Observed::pods, object, read_pod);
}

void AdmissionCache::observe_job(const json& object) {
  impl_->observe(&Impl::Observed::jobs, object, read_job);
}

void AdmissionCache::forget(const json& object) {
  const std::string uid = uid_of(object);
  const std::lock_guard lock(impl_->observed_mutex);
  auto& observed = impl_->observed;
  observed.groups.erase(uid);
  observed.nodes.erase(uid);
  observed.pods.erase(uid);
  observed.jobs.erase(uid);
}

void AdmissionCache::take_observed() {
  impl_->take_observed();
}

namespace {

/// One admission round's state and decisions.
class Round {
 public:
  /// `node_view`: keep what take_view() shows of the nodes besides what the pass decides by.
  Round(const AdmissionInput& input, const AdmissionOptions& options, bool node_view,
        AdmissionCache::Impl& cache)
      : input_(input),
        options_(options),
        node_view_(node_view),
        cache_(cache),
        now_text_(api::format_timestamp(input.now)),
        priorities_(input.priority_classes) {}

  AdmissionResult run() {
    read_groups();
    read_queues();
    for (const auto& pod : input_.pods)
      count_pod(pod, *cache_.get(cache_.pods, pod, read_pod), groups_, loads_);
    for (Group& g : groups_)
      advance_phase(g);
    read_nodes();
    order_queues();
    decide_all();
    return write();
  }

  /// The queues (and, for a round made with node_view, the nodes) as this round leaves them,
  /// once it has written: its counts of gangs per phase and the why-not messages
  /// (`with_pending`) move into the view.
  AdmissionView take_view(bool with_pending) {
    AdmissionView v{.with_nodes = node_view_,
                    .with_pending = with_pending,
                    .schedule_timeouts = timeouts_,
                    .preemptions = preemptions_};
    if (node_view_)
      v.nodes = node_usage();
    for (auto& [name, q] : queues_) {
      QueueUsage u{.name = name,
                   .state = q.state,
                   .weight = q.weight,
                   .reclaimable = q.reclaimable,
                   .capability = q.capability,
                   .deserved = q.deserved,
                   .allocated = q.held,
                   .gangs = std::move(q.gangs)};
      for (Group* g : q.pending) {
        if (with_pending && g->phase == kPending)
          u.pending.push_back(
              {g->key, g->priority.value, std::string(g->blocked_reason), std::string(g->blocked)});
      }
      v.queues.push_back(std::move(u));
    }
    return v;
  }

  /// Each node's allocatable, requests and reservations as this round leaves them, by name.
  std::vector<NodeUsage> node_usage() const {
    std::vector<NodeUsage> nodes;
    nodes.reserve(cache_.node_list.size());
    for (const auto& n : cache_.node_list) {
      NodeUsage u{.name = n->name,
                  .schedulable = n->schedulable != nullptr,
                  .allocatable = n->allocatable.value_or(ResourceList())};
      if (const auto load = loads_.find(u.name); load != loads_.end()) {
        u.requested = load->second.requested;
        u.jobs.assign(load->second.jobs.begin(), load->second.jobs.end());
      }
      if (const auto reserved = reserved_.find(u.name); reserved != reserved_.end())
        u.reserved = reserved->second;
      nodes.push_back(std::move(u));
    }
    const auto by_name = [](const NodeUsage& a, const NodeUsage& b) { return a.name < b.name; };
    if (!std::is_sorted(nodes.begin(), nodes.end(), by_name))  // as an API list returns them
      std::sort(nodes.begin(), nodes.end(), by_name);
    return nodes;
  }

 private:
  void read_groups() {
    if (!input_.jobs_version.empty() && input_.jobs_version != cache_.jobs_version) {
      cache_.jobs_version = input_.jobs_version;
      ++cache_.jobs_generation;  // from 1: a lookup remembered under 0 is never taken
    }
    groups_.reserve(input_.pod_groups.size());
    for (const auto& object : input_.pod_groups) {
      const auto [uid, version] = uid_and_version(object_member(object, "metadata"));
      const GroupFacts& facts = *cache_.get(
          cache_.groups, uid, version, [&] { return read_group(object); },
          &cache_.order<GroupFacts>());
      Group* const g = groups_.add(object, facts);
      if (g == nullptr)
        continue;  // two objects of one key: the first counts
      g->version = version;
      if (!find_job(*g)) {
        groups_.drop_last();
        continue;  // the garbage collector's: it holds nothing
      }
      g->priority = priorities_.resolve(facts.priority_class);
    }
    groups_.sort();
  }

  void read_queues() {
    for (const auto& object : input_.queues) {
      Queue q{.object = &object, .name = name_of(object)};
      q.state = string_member(object_member(object, "status"), "state");
      if (q.state.empty())
        q.state = "Open";
      q.capability = read_resources(object, "spec", "capability", q.invalid);
      const json& weight = member(object_member(object, "spec"), "weight");
      q.weight = weight.is_number_integer() ? weight.get<std::int64_t>() : 1;
      std::string ignored;
      q.guarantee = read_resources(object_member(object, "spec"), "guarantee", "resource", ignored);
      q.reclaimable = object_member(object, "spec").value("reclaimable", true);
      queues_.emplace(q.name, std::move(q));
    }
  }

  /// Whether the group's controller is a training job; sets `g.job` when it is cached under the
  /// uid the ownerReference names. Returns false for a group whose job is gone.
  bool find_job(Group& g) {
    const auto& owner = g.facts.job_owner;
    if (!owner)
      return true;
    auto& looked_up = g.facts.job_looked_up;
    const bool memo = cache_.keeps && !input_.jobs_version.empty();
    if (memo && looked_up.pass + 1 == cache_.pass &&
        looked_up.jobs_generation == cache_.jobs_generation) {
      looked_up.pass = cache_.pass;  // no job changed since the last pass: its answer stands
      if (looked_up.job == nullptr)
        return false;
      g.job = cache_.use(*looked_up.job);
      return true;
    }
    // The cache's entry of the job the lookup finds, looked up once: whether it holds that
    // version decides whether the object is decoded, and it is what the group then uses.
    CacheEntry<JobFacts>* entry = nullptr;
    const auto not_read = [this, &entry](const std::string& uid, const std::string& version) {
      entry = cache_.keeps ? cache_.find(cache_.jobs, uid) : nullptr;
      return entry == nullptr || !entry->facts || entry->version != version;
    };
    std::optional<kube::cache::Versioned> job =
        input_.job ? input_.job(owner->kind, g.facts.ns, owner->name, not_read) : std::nullopt;
    const bool found = job && job->uid == owner->uid;
    const bool known = found && !job->object && entry != nullptr && entry->facts &&
                       entry->version == job->resource_version;
    if (known) {
      g.job = cache_.use(*entry);
    } else if (found) {
      g.job = cache_.get(cache_.jobs, *job, read_job);
      entry = cache_.keeps ? cache_.find(cache_.jobs, job->uid) : nullptr;
    }
    if (memo) {
      const bool kept = !found || (entry != nullptr && entry->facts == g.job);
      looked_up = {.jobs_generation = kept ? cache_.jobs_generation : 0,
                   .pass = cache_.pass,
                   .job = found && kept ? entry : nullptr};
    }
    return found;
  }

  std::chrono::seconds timeout_of(const Group& g) const {
    if (g.job) {
      const auto& seconds = g.job->schedule_timeout_seconds;
      if (seconds && *seconds > 0)
        return std::chrono::seconds(*seconds);
    }
    return options_.schedule_timeout;
  }

  void requeue_in(TimePoint at) {
    const auto delay =
        std::max(std::chrono::duration_cast<std::chrono::milliseconds>(at - input_.now),
                 std::chrono::milliseconds(1000));
    result_.requeue_after = result_.requeue_after ? std::min(*result_.requeue_after, delay) : delay;
  }

  /// Whether `g` was taken back, by a preemption or a schedule timeout, and not admitted since.
  static bool taken_back(const Group& g) { return !g.preempted_by.empty() || g.requeue_at; }

  /// The phase an admitted group moves to from what its pods do (Volcano's jobStatus), and the
  /// schedule timeout of one that is still Inqueue.
  void advance_phase(Group& g) {
    if (!admitted_phase(g.phase))
      return;
    if (g.allocated >= g.min_member && g.allocated > 0) {
      g.phase = g.succeeded == g.allocated ? kCompleted : kRunning;
      g.annotations[std::string(api::annotations::node_reservations)] = std::nullopt;
      g.annotations[std::string(api::annotations::admitted_at)] = std::nullopt;
      return;
    }
    if (g.phase == kRunning) {  // pods evicted or failed: admitted again for what it misses
      g.phase = kPending;
      return;
    }
    g.phase = kInqueue;
    const auto& admitted = g.facts.admitted_at;
    if (!admitted)
      return;
    const TimePoint deadline = *admitted + timeout_of(g);
    if (input_.now < deadline) {
      requeue_in(deadline);
      return;
    }
    take_back(g);
  }

  /// A gang that did not get all its pods bound in time: back to Pending, no new admission before
  /// the back-off ends, and its pods deleted in a later round (delete_taken_back_pods).
  void take_back(Group& g) {
    int timeouts = 0;
    const std::string& previous = g.facts.schedule_timeouts;
    std::from_chars(previous.data(), previous.data() + previous.size(), timeouts);
    ++timeouts;
    const auto backoff = std::min<std::chrono::seconds>(
        kRequeueBackoffBase * (1LL << std::min(timeouts - 1, 16)), kMaxRequeueBackoff);
    const TimePoint retry = input_.now + backoff;
    std::vector<std::string> unbound;
    std::string scheduler_says;
    for (const auto& [pod, facts] : g.pods) {
      if (!g.bound_names.contains(facts->name) && !finished(facts->phase)) {
        unbound.push_back(facts->name);
        if (scheduler_says.empty())
          scheduler_says = facts->scheduler_message;
      }
    }
    std::sort(unbound.begin(), unbound.end());
    const int missing = g.min_member - g.allocated - static_cast<int>(unbound.size());
    std::string message =
        fmt::format("{} of {} pods not bound within {}s", g.min_member - g.allocated, g.min_member,
                    timeout_of(g).count());
    if (!unbound.empty())
      message += fmt::format(": {}", fmt::join(unbound, ", "));
    if (missing > 0)
      message += fmt::format("{} {} not created", unbound.empty() ? ":" : ";", missing);
    if (!scheduler_says.empty())
      message += fmt::format("; scheduler: {}", scheduler_says);
    message += fmt::format("; requeued, next try after {}", api::format_timestamp(retry));
    g.phase = kPending;
    g.block("ScheduleTimeout", kept(message));
    g.annotations[std::string(api::annotations::node_reservations)] = std::nullopt;
    g.annotations[std::string(api::annotations::admitted_at)] = std::nullopt;
    g.annotations[std::string(api::annotations::schedule_timeouts)] = std::to_string(timeouts);
    g.annotations[std::string(api::annotations::requeue_at)] = api::format_timestamp(retry);
    g.bound = {};  // its pods are going
    g.bound_on.clear();
    ++timeouts_;
    result_.events.push_back({"Warning", "ScheduleTimeout", message, g.facts.reference});
    requeue_in(retry);
  }

  /// Free capacity now (less bound pods and admitted reservations), and in the future (less
  /// admitted reservations only: every running pod has finished).
  void read_nodes() {
    std::vector<std::shared_ptr<const NodeRead>> list;
    list.reserve(input_.nodes.size());
    for (const auto& node : input_.nodes)
      list.push_back(cache_.get(cache_.nodes, node, read_node));
    cache_.node_list_reused = cache_.capacity && list == cache_.node_list;
    if (!cache_.node_list_reused) {
      std::vector<std::shared_ptr<const NodeFacts>> facts;
      facts.reserve(list.size());
      cache_.total.clear();
      for (const auto& n : list) {
        if (!n->schedulable)
          continue;
        for (const auto& [name, value] : n->schedulable->free)
          if (name != kPodsResource)
            cache_.total[name] += value;
        facts.push_back(n->schedulable);
      }
      cache_.capacity.emplace(std::move(facts));
      cache_.node_list = std::move(list);
    }
    total_ = cache_.total;
    now_.emplace(*cache_.capacity);
    for (Group& g : groups_) {
      if (g.phase != kInqueue && g.phase != kUnknown)
        continue;
      reserve(g);
    }
    future_.emplace(*now_);
    for (const auto& [node, load] : loads_) {
      if (const auto index = now_->find(node))
        now_->take(*index, load.requested);
    }
    open_.emplace(*now_);
  }

  /// Takes an admitted group's reservation off the nodes: the annotation's, less what its pods
  /// bound there use; a group admitted without one (by hand, or an older controller) is placed
  /// afresh.
  void reserve(Group& g) {
    if (!g.facts.reservations) {
      const std::vector<PodDemand> demands = demands_of(g);
      // When it does not fit, it holds nothing but its bound pods.
      if (const auto placed = now_->place(demands)) {
        for (const auto& [node, amount] : taken_per_node(demands, *placed))
          record_reservation(g, now_->name(node), amount);
      }
      return;
    }
    for (const auto& [node, reserved] : *g.facts.reservations) {
      const auto index = now_->find(node);
      if (!index)
        continue;
      const auto bound = g.bound_on.find(node);
      const ResourceList amount =
          bound == g.bound_on.end() ? reserved : shortfall(reserved, bound->second);
      now_->take(*index, amount);
      record_reservation(g, node, amount);
    }
  }

  /// Remembers what `g` holds on `node`, for preemption (give_back) and for a view of the nodes;
  /// `pods` is shown where the gang's pods are not bound yet.
  void record_reservation(Group& g, const std::string& node, const ResourceList& amount) {
    if (std::none_of(amount.begin(), amount.end(), [](const auto& r) { return r.second > 0; }))
      return;
    if (options_.preemption != Preemption::Never)  // nothing else reads it
      api::add(g.reserved_on[node], amount);
    if (node_view_)
      show_reservation(g, node, amount);
  }

  /// What a view of the nodes shows of a reservation.
  void show_reservation(const Group& g, const std::string& node, const ResourceList& amount) {
    api::add(reserved_[node], amount);
    loads_[node].jobs.insert(g.key);
  }

  void order_queues() {
    for (Group& g : groups_) {
      const auto q = queues_.find(g.queue);
      if (q == queues_.end()) {
        if (g.phase == kPending)
          unqueued_.push_back(&g);
        continue;
      }
      g.in_queue = &q->second;
      if (admitted_phase(g.phase))
        api::add(q->second.held, g.held());
      else if (g.phase == kPending)
        api::add(q->second.held, g.bound);  // a gang below minMember still holds its pods
    }
    std::vector<QueueFigures> figures;
    for (Group& g : groups_) {
      if (g.phase == kPending && g.in_queue != nullptr)
        g.in_queue->pending.push_back(&g);
    }
    std::vector<std::pair<GroupOrder, Group*>> keyed;
    AdmissionCache::Impl::PendingOrders orders;
    for (auto& [name, q] : queues_) {
      keyed.clear();
      for (Group* g : q.pending)
        keyed.emplace_back(GroupOrder(-g->priority.value, created_ticks(*g), g->rank), g);
      order_pending(name, q.pending, keyed, orders);
      QueueFigures f{.name = name, .weight = q.weight, .guarantee = q.guarantee};
      if (q.invalid.empty())
        f.capability = q.capability;
      f.request = q.held;
      for (const Group* g : q.pending)
        api::add(f.request, g->min_resources);
      figures.push_back(std::move(f));
    }
    if (cache_.keeps)
      cache_.pending_orders = std::move(orders);
    const auto deserved = deserved_shares(figures, total_);
    for (auto& [name, q] : queues_) {
      q.deserved = deserved.at(name);
      q.share = queue_share(q.held, q.deserved);
    }
  }

  /// Puts a queue's `pending` gangs in the order of their keys (`keyed`: each gang's key, in
  /// `pending`'s order), and keeps that order for the next pass in `orders`. The last pass's
  /// order is taken as it is when it had the same gangs (by rank) under the same keys: the
  /// common pass, where nothing a queue's order depends on changed, sorts nothing (sorting was a
  /// tenth of a pass over 10,000 waiting gangs).
  void order_pending(const std::string& queue, std::vector<Group*>& pending,
                     std::vector<std::pair<GroupOrder, Group*>>& keyed,
                     AdmissionCache::Impl::PendingOrders& orders) {
    using Order = AdmissionCache::Impl::PendingOrder;
    const auto last = cache_.pending_orders.find(queue);
    const auto same_as = [&](const Order& o) {
      return o.sorted.size() == keyed.size() &&
             std::all_of(keyed.begin(), keyed.end(), [&](const auto& k) {
               const std::size_t rank = std::get<2>(k.first);
               return rank < o.at_rank.size() && o.at_rank[rank] != Order::kNone &&
                      o.sorted[o.at_rank[rank]] == k.first;
             });
    };
    // Ranks are distinct, so keys found at distinct places of an order of as many: all of them.
    if (last != cache_.pending_orders.end() && same_as(last->second)) {
      for (const auto& [order, g] : keyed)
        pending[last->second.at_rank[std::get<2>(order)]] = g;
      orders.emplace(queue, std::move(last->second));
      return;
    }
    // Sorted by keys taken out of the groups first: comparisons then read one array, not two
    // groups scattered over the heap each (most of a 10,000-gang queue's sort was cache misses).
    std::sort(keyed.begin(), keyed.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    Order made;
    if (cache_.keeps)
      made.at_rank.assign(groups_.size(), Order::kNone);
    for (std::size_t i = 0; i < keyed.size(); ++i) {
      pending[i] = keyed[i].second;
      if (cache_.keeps) {
        made.sorted.push_back(keyed[i].first);
        made.at_rank[std::get<2>(keyed[i].first)] = static_cast<std::uint32_t>(i);
      }
    }
    if (cache_.keeps)
      orders.emplace(queue, std::move(made));
  }

  /// The queue whose next gang is decided next: the lowest share of its deserved, then name.
  Queue* next_queue() {
    Queue* best = nullptr;
    for (auto& [name, q] : queues_) {
      if (q.next >= q.pending.size())
        continue;
      if (best == nullptr || q.share < best->share)
        best = &q;
    }
    return best;
  }

  void decide_all() {
    for (Group* g : unqueued_)
      g->block("QueueNotFound", kept(fmt::format("queue {} not found", g->queue)));
    while (Queue* q = next_queue()) {
      Group& g = *q->pending[q->next++];
      decide(g, *q, q->next, q->pending.size());
      if (!g.preempted_by.empty() && !g.blocked.empty())
        g.block("Preempted",
                kept(fmt::format("preempted by {}; now: {}", g.preempted_by, g.blocked)));
      if (!g.priority.note.empty() && !g.blocked.empty())
        g.blocked = kept(fmt::format("{} ({})", g.blocked, g.priority.note));
    }
  }

  void decide(Group& g, Queue& q, std::size_t position, std::size_t of) {
    if (!g.blocked.empty())
      return;  // its minResources do not parse, or it just timed out
    if (taken_back(g) && static_cast<int>(g.pods.size()) > g.succeeded + g.failed)
      return g.block(g.preempted_by.empty() ? "ScheduleTimeout" : "Preempted",
                     "its pods are being deleted");  // not admitted with them
    if (g.requeue_at && input_.now < *g.requeue_at) {
      g.block("ScheduleTimeout",
              kept(fmt::format("requeued after a schedule timeout, next try after {}",
                               api::format_timestamp(*g.requeue_at))));
      requeue_in(*g.requeue_at);
      return;
    }
    if (!q.invalid.empty())
      return g.block("InvalidQueue", kept(fmt::format("queue {}: {}", q.name, q.invalid)));
    if (q.state != "Open")
      return g.block("QueueNotOpen", kept(fmt::format("queue {} is {}", q.name, q.state)));
    const auto waiting = [&](const Group& head) {
      g.block("WaitingForHead",
              kept(fmt::format("waiting behind {} (priority {}, position {} of {})", head.key,
                               head.priority.value, position, of)));
    };
    if (options_.order == AdmissionOrder::StrictFifo && first_head_ != nullptr)
      return waiting(*first_head_);
    // Made when needed: most waiting gangs of a full cluster are told why not by their totals.
    std::optional<std::vector<PodDemand>> made;
    const auto demands = [&]() -> const std::vector<PodDemand>& {
      if (!made)
        made = demands_of(g);
      return *made;
    };
    if (const std::string_view over_quota =
            remembered(why_nots_.quota[q.name], g.min_resources,
                       [&] { return quota_shortages(g, q, q.held); });
        !over_quota.empty()) {
      if (preempt_for(g, q, demands))
        return;
      return g.block("NotEnoughResources", over_quota);
    }
    const ResourceList need = demand_total(g);
    std::string_view why = remembered(why_nots_.cluster, need, [&] {
      return shortages(quantity_texts_, "cluster", "", need, now_->total_free(), total_, false);
    });
    if (why.empty()) {  // the cluster has room in total: node by node?
      std::string no_node;
      if (const auto placed = open_->place(demands(), &no_node))
        return admit(g, q, demands(), *placed);
      if (first_head_ != nullptr && now_->place(demands(), nullptr, false))
        return waiting(*first_head_);
      now_->place(demands(), &no_node, false);
      why = kept(std::move(no_node));
    }
    if (preempt_for(g, q, demands))
      return;
    g.block("NotEnoughResources", why);
    if (q.head == nullptr)
      become_head(g, q, demands());
  }

  /// Why-not messages of this round by what was asked: waiting gangs mostly come in a few shapes
  /// (their templates'), and the same demand against the same free room, or the same
  /// minResources against the same queue, gets the same text. An admission or an eviction changes
  /// the room and the queues' holdings: both forget what they were told (forget_why_nots).
  struct WhyNots {
    using ByDemand = std::unordered_map<ResourceList, std::string_view, ResourceListHash>;
    ByDemand cluster;                                 // shortages of the cluster's free room
    std::unordered_map<std::string, ByDemand> quota;  // by queue: shortages of its capability
  };

  /// `make()`'s text for `demand`, made once while nothing changes (kept).
  template <class Make>
  std::string_view remembered(WhyNots::ByDemand& memo, const ResourceList& demand,
                              const Make& make) {
    const auto found = memo.find(demand);
    if (found != memo.end())
      return found->second;
    std::string text = make();
    return memo.emplace(demand, text.empty() ? std::string_view() : kept(std::move(text)))
        .first->second;
  }

  /// `text`, kept until the round ends: what a group's blocked message views.
  std::string_view kept(std::string text) { return texts_.emplace_back(std::move(text)); }

  void forget_why_nots() {
    why_nots_.cluster.clear();
    why_nots_.quota.clear();
  }

  /// What `g` lacks in its queue's capability when the queue holds `held`.
  std::string quota_shortages(const Group& g, const Queue& q, const ResourceList& held) const {
    if (q.capability.empty())
      return {};  // nothing limited
    return shortages(quantity_texts_, "queue " + q.name, "capability ", g.min_resources,
                     q.capability, q.capability, true, &held);
  }

  /// Adds back (sign 1) or takes again (sign -1) what victim `v` uses on the nodes of `capacity`:
  /// its bound pods and, unless only reservations count (`future`), its reservation's rest.
  void give_back(NodeCapacity& capacity, const Group& v, int sign, bool reservations_only) const {
    const auto apply = [&](const std::map<std::string, ResourceList>& per_node) {
      for (const auto& [node, amount] : per_node) {
        if (const auto index = capacity.find(node))
          capacity.take(*index, times(amount, -sign));
      }
    };
    apply(v.reserved_on);
    if (!reservations_only)
      apply(v.bound_on);
  }

  /// Whether `v` may be evicted for `g` (Preemption in gang.h), with `held` what each queue holds
  /// after the evictions chosen so far.
  bool may_evict(const Group& v, const Group& g, const std::map<std::string, ResourceList>& held) {
    if (!admitted_phase(v.phase) || v.admitted_now || v.priority.value >= g.priority.value)
      return false;
    if (v.queue == g.queue)
      return true;
    const auto q = queues_.find(v.queue);
    return q != queues_.end() && q->second.reclaimable &&
           queue_share(held.at(v.queue), q->second.deserved) > 1;
  }

  /// With Preemption::WithinQueue: evicts the fewest lower-priority gangs, whole, that let `g`
  /// fit its queue and the nodes, and admits it. False (nothing evicted) when none would do.
  /// `demands()`: the pods `g` still needs placed (demands_of), made when asked for.
  template <class Demands>
  bool preempt_for(Group& g, Queue& q, const Demands& demands) {
    if (options_.preemption != Preemption::WithinQueue)
      return false;
    std::vector<Group*> candidates;
    for (Group& v : groups_)
      candidates.push_back(&v);
    std::sort(candidates.begin(), candidates.end(), [](const Group* a, const Group* b) {
      return GroupOrder(a->priority.value, created_ticks(*b), b->rank) <
             GroupOrder(b->priority.value, created_ticks(*a), a->rank);
    });
    std::map<std::string, ResourceList> held;
    for (const auto& [name, queue] : queues_)
      held[name] = queue.held;
    NodeCapacity trial = *open_;
    const auto fits = [&] {
      return quota_shortages(g, q, held[q.name]).empty() &&
             trial.place(demands(), nullptr, false).has_value();
    };
    std::vector<Group*> victims;
    for (Group* v : candidates) {
      if (fits())
        break;
      if (!may_evict(*v, g, held))
        continue;
      give_back(trial, *v, 1, false);
      subtract(held[v->queue], v->held());
      victims.push_back(v);
    }
    if (victims.empty() || !fits())
      return false;
    // Spare those not needed after all, the highest priority first.
    for (auto it = victims.rbegin(); it != victims.rend();) {
      give_back(trial, **it, -1, false);
      api::add(held[(*it)->queue], (*it)->held());
      if (fits()) {
        it = decltype(it)(victims.erase(std::next(it).base()));
        continue;
      }
      give_back(trial, **it, 1, false);
      subtract(held[(*it)->queue], (*it)->held());
      ++it;
    }
    for (Group* v : victims)
      evict(*v, g);
    std::string why;
    const auto placed = open_->place(demands(), &why);
    if (!placed)  // cannot happen: `trial` was `open_` with the same victims given back
      return false;
    admit(g, q, demands(), *placed);
    return true;
  }

  /// Evicts victim `v` for `by`: back to Pending with reason Preempted, its room and share given
  /// back for this round. Its pods go in a later round (delete_taken_back_pods), once the caches
  /// show it Pending: the job reconciler reads the same PodGroup cache, so it never takes the
  /// deleted pods for missing pods of an admitted gang and creates them again.
  void evict(Group& v, const Group& by) {
    forget_why_nots();
    give_back(*now_, v, 1, false);
    give_back(*open_, v, 1, false);
    give_back(*future_, v, 1, true);
    for (const auto& [node, amount] : v.reserved_on)
      subtract(reserved_[node], amount);
    for (const auto& [node, amount] : v.bound_on)
      subtract(loads_[node].requested, amount);
    queues_.at(v.queue).hold(v.held(), -1);
    const std::string preempter =
        fmt::format("{} (priority {} over {})", by.key, by.priority.value, v.priority.value);
    const std::string message =
        fmt::format("preempted by {}: the whole gang was evicted", preempter);
    v.phase = kPending;
    v.block("Preempted", kept(message));
    v.annotations[std::string(api::annotations::preempted_by)] = preempter;
    v.annotations[std::string(api::annotations::node_reservations)] = std::nullopt;
    v.annotations[std::string(api::annotations::admitted_at)] = std::nullopt;
    v.bound = {};
    v.bound_on.clear();
    v.reserved_on.clear();
    ++preemptions_[v.queue];
    result_.events.push_back(
        {"Warning", "Preempted", message, v.job ? v.job->reference : v.facts.reference});
    result_.events.push_back(
        {"Normal", "Preempting",
         fmt::format("evicted gang {} (priority {}) of queue {}", v.key, v.priority.value, v.queue),
         by.job ? by.job->reference : by.facts.reference});
  }

  void admit(Group& g, Queue& q, const std::vector<PodDemand>& demands,
             const GangPlacement& placement) {
    g.admitted_now = true;
    forget_why_nots();
    const auto per_node = taken_per_node(demands, placement);
    for (const auto& [node, amount] : per_node) {
      now_->take(node, amount);
      future_->take(node, amount);
      // Only the view reads it: a gang admitted in this round is never a victim of it.
      if (node_view_)
        show_reservation(g, now_->name(node), amount);
    }
    g.phase = kInqueue;
    g.annotations[std::string(api::annotations::node_reservations)] =
        reservation_text(*now_, per_node);
    g.annotations[std::string(api::annotations::admitted_at)] = now_text_;
    g.annotations[std::string(api::annotations::requeue_at)] = std::nullopt;
    g.annotations[std::string(api::annotations::preempted_by)] = std::nullopt;
    q.hold(shortfall(g.held(), g.bound));  // its bound pods are counted already
    requeue_in(input_.now + timeout_of(g));
  }

  /// The first gang of a queue that waits for nodes reserves where it would go once running
  /// pods finish, so later gangs do not take that room (backfill) or do not start at all
  /// (strict FIFO).
  void become_head(const Group& g, Queue& q, const std::vector<PodDemand>& demands) {
    q.head = &g;
    if (first_head_ == nullptr)
      first_head_ = &g;
    const auto placed = future_->place(demands);
    if (!placed)
      return;  // it would not fit even then: holding room for it would only waste it
    for (const auto& [node, amount] : taken_per_node(demands, *placed))
      open_->take(node, amount);
  }

  /// Deletes the unfinished pods of gangs taken back (preempted, or past their schedule timeout)
  /// once the caches show them Pending, if they stay Pending in this round. Not in the round that
  /// takes them back: the job reconciler would see its pods go while its cache still shows the
  /// PodGroup admitted, and create them again.
  void delete_taken_back_pods() {
    for (const Group& g : groups_) {
      if (g.phase != kPending || !taken_back(g) || g.facts.phase != kPending)
        continue;
      for (const auto& [pod, facts] : g.pods) {
        // One being deleted already is not asked again: its grace period runs, and a cache that
        // lags the delete would otherwise have every pass send it once more.
        if (!finished(facts->phase) && !facts->deleting)
          result_.actions.push_back({Action::Type::Delete, kube::resources::pods(),
                                     namespace_of(*pod), name_of(*pod), json(), uid_of(*pod)});
      }
    }
  }

  /// The conditions of `g`'s status as the facts the pass decided by were read from it, for a
  /// write that sets some of them (a merge patch replaces the array whole); empty where it has
  /// none. Where the input holds the group's metadata alone, read from the object
  /// AdmissionInput::pod_group finds; nullopt when that one is gone or is another version: the
  /// change that made it brings another pass.
  std::optional<json> old_conditions(const Group& g) const {
    if (!g.facts.status.has_conditions)
      return json::array();
    const json& listed = *g.object;
    if (listed.contains("status"))
      return member(status_of(listed), "conditions");
    std::optional<json> found = input_.pod_group ? input_.pod_group(g.key) : std::nullopt;
    if (!found || string_member(member(*found, "metadata"), "resourceVersion") !=
                      string_member(member(listed, "metadata"), "resourceVersion"))
      return std::nullopt;
    json& status = (*found)["status"];
    return status.is_object() && status.contains("conditions") ? std::move(status["conditions"])
                                                               : json::array();
  }

  /// Appends the merge patch that writes `change` into `g`'s status: the members a pass writes,
  /// the conditions whole when it sets any; the rest of the status is kept. False, with nothing
  /// appended: see old_conditions.
  bool append_status_patch(std::string& out, const Group& g,
                           const GroupStatusChange& change) const {
    std::optional<json> conditions;
    if (change.count > 0 && !(conditions = old_conditions(g)))
      return false;
    out += '{';
    if (conditions) {
      out += R"("conditions":)";
      append_conditions(out, *conditions, change.conditions(), now_text_);
      out += ',';
    }
    fmt::format_to(std::back_inserter(out), R"("failed":{},"phase":)", change.failed);
    append_json_string(out, change.phase);
    fmt::format_to(std::back_inserter(out), R"(,"running":{},"succeeded":{}}})", change.running,
                   change.succeeded);
    return true;
  }

  /// The annotations of a merge patch that sets and removes `g`'s annotation changes (null
  /// removes one), those that change only, as JSON text; empty when none does.
  static std::string annotations_patch(const Group& g) {
    const AnnotationFacts& old = g.facts.annotations;
    std::string result;
    for (const auto& [name, value] : g.annotations) {
      const auto it = old.values.find(name);
      const bool has = old.shape == AnnotationFacts::Shape::Object && it != old.values.end();
      // Annotations that are not an object are replaced by one, even by removals alone.
      const bool unchanged = value ? has && it->second == value
                                   : !has && old.shape != AnnotationFacts::Shape::NotObject;
      if (unchanged)
        continue;
      result += result.empty() ? '{' : ',';
      append_json_string(result, name);
      result += ':';
      if (value)
        append_json_string(result, *value);
      else
        result += "null";
    }
    if (!result.empty())
      result += '}';
    return result;
  }

  AdmissionResult write() {
    delete_taken_back_pods();
    result_.actions.reserve(result_.actions.size() + groups_.size() + queues_.size());
    // A first pass over many waiting gangs records an Event for each; growing the vector as
    // they come moved them a dozen times over.
    result_.events.reserve(result_.events.size() + groups_.size());
    const kube::Resource podgroups = kube::resources::podgroups();
    for (Group& g : groups_) {
      if (g.in_queue != nullptr)
        ++g.in_queue->gangs[g.phase];
      const GroupStatusChange change(g);
      const bool same_status = shows(g.facts.status, change);
      const std::string annotations = annotations_patch(g);
      if (same_status && annotations.empty())
        continue;  // the common case once a gang waits: decided from the facts alone
      // A merge patch with the resourceVersion the facts were read from, which both the real
      // server and the sandbox take as a precondition (409 Conflict when it changed), as an
      // update would: the object itself is neither fetched nor copied nor sent. Its metadata is
      // left out rather than null (null in a merge patch removes a member).
      std::string patch = "{";
      const std::string* version = g.version;
      const bool has_version = version != nullptr && !version->empty();
      if (!annotations.empty() || has_version) {
        patch += R"("metadata":{)";
        if (!annotations.empty()) {
          patch += R"("annotations":)";
          patch += annotations;
          if (has_version)
            patch += ',';
        }
        if (has_version) {
          patch += R"("resourceVersion":)";
          append_json_string(patch, *version);
        }
        patch += '}';
      }
      if (!same_status) {
        if (patch.size() > 1)
          patch += ',';
        patch += R"("status":)";
        if (!append_status_patch(patch, g, change))
          continue;
      }
      patch += '}';
      const std::string_view old_phase =
          g.facts.status.phase ? std::string_view(*g.facts.status.phase) : std::string_view();
      // The facts were read from this version of the object: its reference and name as written.
      // Made in place: a first pass writes one of each per waiting gang.
      if (g.phase == kInqueue && old_phase != kInqueue && old_phase != kRunning) {
        result_.events.emplace_back(
            "Normal", "Enqueued", fmt::format("admitted to queue {}", g.queue), g.facts.reference);
      }
      if (!g.blocked.empty() && !unschedulable_true(g.facts.status))
        result_.events.emplace_back("Warning", std::string(kUnschedulable), std::string(g.blocked),
                                    g.facts.reference);
      result_.actions.emplace_back(Action::Type::Patch, podgroups, g.facts.ns, g.facts.name, json(),
                                   std::string(), std::move(patch));
    }
    for (const auto& [name, q] : queues_) {
      json status = queue_status(q);
      if (status == status_of(*q.object))
        continue;
      json updated = *q.object;
      updated["status"] = std::move(status);
      result_.actions.push_back({Action::Type::UpdateStatus, kube::resources::queues(), "", name,
                                 std::move(updated), ""});
    }
    return std::move(result_);
  }

  const AdmissionInput& input_;
  const AdmissionOptions& options_;
  const bool node_view_;
  AdmissionCache::Impl& cache_;
  const std::string now_text_;  // input_.now as format_timestamp writes it
  PriorityClasses priorities_;
  Groups groups_;  // into the cache's facts
  std::map<std::string, Queue> queues_;
  std::vector<Group*> unqueued_;
  ResourceList total_;  // allocatable of the schedulable nodes
  std::optional<NodeCapacity> now_, future_, open_;
  std::map<std::string, NodeLoad> loads_;         // by node name
  std::map<std::string, ResourceList> reserved_;  // by node name, for the view
  int timeouts_ = 0;
  std::map<std::string, int> preemptions_;  // by the victim's queue
  const Group* first_head_ = nullptr;
  mutable QuantityTexts quantity_texts_;  // for why-not messages
  std::deque<std::string> texts_;         // kept(): why-not messages, which groups view
  WhyNots why_nots_;
  AdmissionResult result_;
};

}  // namespace

AdmissionResult admit(const AdmissionInput& input, const AdmissionOptions& options,
                      AdmissionView* view, AdmissionCache* cache) {
  AdmissionCache single_pass;
  single_pass.impl().keeps = false;
  AdmissionCache::Impl& facts = (cache != nullptr ? *cache : single_pass).impl();
  facts.begin();
  AdmissionResult result;
  {
    Round round(input, options, view != nullptr && view->with_nodes, facts);
    result = round.run();
    if (view != nullptr)
      *view = round.take_view(view->with_pending);
  }
  facts.end();
  return result;
}

}  // namespace trainctl::controller
