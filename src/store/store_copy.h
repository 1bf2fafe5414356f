// Copying a SQLite store into PostgreSQL, for `purser migrate`: one node's state moved to the
// database that replicas share (docs/operations.md).
//
// SqliteSource reads the SQLite file as untrusted input: opened read-only (nothing in it is ever
// changed), checked to be a SQLite database, intact and a Purser store before anything is read,
// and every value checked against the type its PostgreSQL column has before it is sent.
//
// copyStore() copies every table of the source into a PostgreSQL store whose schema is already
// migrated to the same versions: all of it in one transaction, many rows to an INSERT, the ids
// as they are (identity sequences are then moved past the largest), parents before the tables
// that refer to them. Before that transaction commits it checks, per table, the row counts and
// the sum of every integer column (money in nanos, tokens, times) on both sides; any difference,
// or any error, rolls everything back. A table of the source that PostgreSQL does not have is an
// error, never skipped.
//
// Thread-safety: a SqliteSource is used by one thread at a time; copyStore() blocks its caller.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/result.h"
#include "store/store.h"

struct sqlite3;

namespace purser::store {

class SqliteSource {
 public:
  // Opens `path` read-only and checks it: kNotFound when there is no such file, kDataLoss when it
  // is not a SQLite database or is corrupt (PRAGMA quick_check), kFailedPrecondition when it is
  // a SQLite database but not a Purser store (no schema_migrations). Every read after this sees
  // the one snapshot taken here.
  static Result<std::unique_ptr<SqliteSource>> open(const std::string& path);
  ~SqliteSource();
  SqliteSource(const SqliteSource&) = delete;
  SqliteSource& operator=(const SqliteSource&) = delete;

  const std::string& path() const { return path_; }

  // What schema_migrations records, per component: rows of (version, name, checksum) in version
  // order, their types checked (kDataLoss when a row is malformed).
  Result<std::map<std::string, Rows>> recordedMigrations();
  // The tables to copy, by name: every table but SQLite's own (sqlite_*) and schema_migrations.
  Result<std::vector<std::string>> tables();
  // A table's columns, in order.
  Result<std::vector<std::string>> columns(const std::string& table);
  Result<int64_t> count(const std::string& table);
  // Calls `row` with the values of `columns` of each row (as SqliteStore reads them: REAL as its
  // text); stops at the first error, from SQLite or from `row`.
  Result<void> scan(const std::string& table, const std::vector<std::string>& columns,
                    const std::function<Result<void>(std::vector<Value>& values)>& row);

 private:
  SqliteSource(std::string path, ::sqlite3* db) : path_(std::move(path)), db_(db) {}
  Result<void> run(const std::string& sql, const std::vector<std::string>& params,
                   const std::function<Result<void>(std::vector<Value>& values)>& row);

  const std::string path_;
  ::sqlite3* db_;
};

// Refuses (kFailedPrecondition, naming the table and what it holds) a target where one of
// `tables` exists and holds a row: a copy goes into an empty database only.
Result<void> checkTargetEmpty(Store& target, const std::vector<std::string>& tables);

struct CopyOptions {
  // Rows per INSERT statement at most; wide tables take fewer (a statement carries at most
  // 65,535 values).
  size_t batch_rows = 500;
};

// One table's account after the copy.
struct TableCheck {
  std::string table;
  int64_t source_rows = 0;              // COUNT(*) in SQLite
  int64_t target_rows = 0;              // COUNT(*) in PostgreSQL
  std::vector<std::string> summed;      // the integer columns whose sums were compared
  std::vector<std::string> mismatches;  // what differs, in words; empty when it checks out
  bool ok() const { return mismatches.empty(); }
};

struct CopyReport {
  std::vector<TableCheck> tables;  // by name
  bool committed = false;          // false: a check failed and nothing was kept
  bool ok() const;
};

// Copies every table of `source` into `target` (PostgreSQL, its schema migrated), checks the copy
// and commits it, or rolls it all back (see the file comment). Errors name the table, and for a
// value that does not fit its column, the row and the column. A failed check is not an error:
// the report says what differs, and committed is false.
Result<CopyReport> copyStore(SqliteSource& source, Store& target, const CopyOptions& options = {});

// The same check on what `target` holds now, in a snapshot of its own: for a copy whose tables
// were reshaped after it committed (rows moved into partitions). committed is true.
Result<CopyReport> checkCopy(SqliteSource& source, Store& target);

}  // namespace purser::store
