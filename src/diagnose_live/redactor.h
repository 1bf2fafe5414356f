// CaseRedactor: a live case made fit for a caller who may not see everything (see the class).
//
// Thread-safety: a plain value of one request.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "diagnose/case.h"

namespace purser::diagnose_live {

// Hides from a caller what is another tenant's — by the case's structure, never by words of its
// text. Every name in a case has a known kind where it stands: an inventory field (a workload's
// namespace and name, a deployment's route and model server, a team and its tenant), a series'
// label by its key (`tenant`, `team`, `namespace`, `user`, `service_account`, `key`, `wallet`,
// `scope`, `workload`, `route`, `provider`, `deployment`, ...), an event's object and actor. A
// name of another tenant's object of that kind is replaced by a placeholder of its kind
// ("another tenant's team #1", numbered in the order they first appear in the case) before the
// engine reads it, so the answer, built from the case, never holds it; a series whose `tenant`
// label is another tenant's is theirs whole. What the caller may see is never renamed: a name
// allowed for a kind (its own team, a visible route) stays even where another tenant has an
// object of that name, and kinds outside tenancy (nodes, GPUs, shared queues) are never touched.
// An event of another tenant's object keeps its time, kind and reason; its message (free text)
// is not shown. A log line of another tenant's workload is dropped.
class CaseRedactor {
 public:
  enum class Kind {
    kTenant,
    kTeam,
    kNamespace,
    kUser,
    kServiceAccount,
    kKey,
    kWallet,  // a wallet's id
    kWorkload,
    kRoute,
    kProvider,
  };
  // A name the caller may see as `kind`; a foreign one equal to it is not hidden.
  void allow(Kind kind, const std::string& name);
  // A name of another tenant's object of `kind`.
  void hide(Kind kind, const std::string& name);
  // Takes back an allow() (an object first seen as visible that turned out another tenant's).
  void unallow(Kind kind, const std::string& name) { allowed_.erase({kind, name}); }
  bool empty() const { return foreign_.empty(); }

  // Renames what is foreign in `c`, in place.
  void apply(diagnose::Case& c);
  // The placeholder `name` has as `kind` (numbered at its first use), or nullopt when the caller
  // may see it.
  std::optional<std::string> rename(Kind kind, const std::string& name);

 private:
  bool foreign(Kind kind, const std::string& name) const;
  // The placeholder of `name` as `kind`, whether or not the caller may see a name like it.
  std::string placeholder(Kind kind, const std::string& name);
  // "team:ml" (a wallet's scope): its name renamed as its kind says.
  std::optional<std::string> renameScope(const std::string& scope, bool force);
  void renameLabels(diagnose::Labels& labels);

  std::set<std::pair<Kind, std::string>> foreign_;
  std::set<std::pair<Kind, std::string>> allowed_;
  std::map<std::pair<Kind, std::string>, std::string> given_;  // placeholders given so far
  std::map<Kind, int> next_;
};

}  // namespace purser::diagnose_live
