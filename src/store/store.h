// Store: durable state behind one small interface, so the SQLite default and a PostgreSQL
// implementation are interchangeable (docs/architecture.md rule 10).
//
// Writes run on a single writer thread, several callers' writes committed together (group
// commit); each write is all-or-nothing on its own even when it shares a commit with others, and
// it is durable when write() returns or writeAsync() calls back. Reads run on the calling thread
// in their own snapshot and may run concurrently with each other and with writes.
//
// SQL is written once for both back-ends: placeholders are $1, $2, ... (PostgreSQL's form, which
// the SQLite implementation binds by name); where the dialects differ, branch on dialect().
//
// Thread-safety: all methods may be called from any thread. A Tx is only valid inside the
// callback it was passed to.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/result.h"

namespace purser::store {

struct Blob {
  std::string bytes;
  friend bool operator==(const Blob&, const Blob&) = default;
};

using Value = std::variant<std::monostate, int64_t, std::string, Blob>;

class Row {
 public:
  explicit Row(std::vector<Value> values) : values_(std::move(values)) {}
  size_t size() const { return values_.size(); }
  bool isNull(size_t i) const { return std::holds_alternative<std::monostate>(values_.at(i)); }
  // Typed access; a NULL reads as 0 / "" / empty blob. A wrong type is a programming error.
  int64_t getInt(size_t i) const;
  const std::string& getText(size_t i) const;
  const Blob& getBlob(size_t i) const;
  const Value& at(size_t i) const { return values_.at(i); }

 private:
  std::vector<Value> values_;
};

using Rows = std::vector<Row>;

// A transaction, valid only inside the callback it was handed to.
class Tx {
 public:
  virtual ~Tx() = default;
  // Runs a statement; returns the number of rows it changed.
  virtual Result<int64_t> exec(std::string_view sql, const std::vector<Value>& params = {}) = 0;
  virtual Result<Rows> query(std::string_view sql, const std::vector<Value>& params = {}) = 0;
};

enum class Dialect { kSqlite, kPostgres };

struct Migration {
  int version;       // 1, 2, 3, ... per component, never reused
  std::string name;  // short description, recorded with the version
  std::string sql;   // one or more statements
};

using TxFn = std::function<Result<void>(Tx&)>;

class Store {
 public:
  virtual ~Store() = default;
  virtual Dialect dialect() const = 0;

  // Brings `component`'s schema up to date: applies, in version order, each migration not yet
  // applied, each in its own transaction together with its record. Fails without applying
  // anything further when a recorded migration has changed, when the store holds a version this
  // binary does not know (written by a newer Purser), or when a migration fails. Returns the
  // number applied.
  virtual Result<int> migrate(std::string_view component,
                              const std::vector<Migration>& migrations) = 0;

  // Runs `fn` in a write transaction and waits until it is durable. If `fn` returns an error
  // (or throws) nothing it did is kept, and that error is returned.
  virtual Result<void> write(TxFn fn) = 0;
  // The same, in a transaction of its own rather than sharing a commit with other writes: for
  // writes that lock rows other replicas lock too (in their own order), so that no other write
  // of this process can hold a lock in the same transaction (no deadlock between replicas).
  virtual Result<void> writeAlone(TxFn fn) { return write(std::move(fn)); }
  // The same without waiting: `done` runs on the writer thread once the outcome is known. It
  // must not block or call write().
  virtual void writeAsync(TxFn fn, std::function<void(Result<void>)> done) = 0;

  // Runs `fn` in a read-only snapshot on the calling thread.
  virtual Result<void> read(TxFn fn) = 0;

  // Commits what is queued, then stops the writer; later writes fail with kUnavailable.
  virtual void close() = 0;
};

}  // namespace purser::store
