#include "store/store_copy.h"

#include "store/sqlite_store.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <sqlite3.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

namespace purser::store {

namespace {

// A statement carries at most this many parameters (PostgreSQL's protocol counts them in 16 bits).
constexpr size_t kMaxParams = 65'535;

std::string quoteIdent(std::string_view name) {
  std::string out = "\"";
  for (char c : name) {
    if (c == '"') out += '"';
    out += c;
  }
  out += '"';
  return out;
}

// A value as a person reads it in an error: short, and never raw bytes.
std::string shown(const Value& v) {
  if (std::holds_alternative<std::monostate>(v)) return "NULL";
  if (const auto* n = std::get_if<int64_t>(&v)) return std::to_string(*n);
  if (const auto* b = std::get_if<Blob>(&v))
    return fmt::format("{} bytes of binary data", b->bytes.size());
  const std::string& t = std::get<std::string>(v);
  std::string out;
  for (char c : t.substr(0, 40)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  return fmt::format("\"{}{}\"", out, t.size() > 40 ? "..." : "");
}

std::string decimal(__int128 v) {
  if (v == 0) return "0";
  const bool negative = v < 0;
  auto u = negative ? -static_cast<unsigned __int128>(v) : static_cast<unsigned __int128>(v);
  std::string digits;
  while (u > 0) {
    digits += static_cast<char>('0' + static_cast<int>(u % 10));
    u /= 10;
  }
  if (negative) digits += '-';
  std::reverse(digits.begin(), digits.end());
  return digits;
}

// --- The target's catalog ------------------------------------------------------------------------

enum class Kind { kInteger, kText, kBytes, kOther };

struct Column {
  std::string name;
  std::string type;  // as format_type() writes it: "bigint", "text", "bytea", ...
  Kind kind = Kind::kOther;
  bool identity = false;  // GENERATED ... AS IDENTITY
  bool serial = false;    // a nextval() default
};

struct Catalog {
  std::map<std::string, std::vector<Column>> tables;            // in column order
  std::vector<std::pair<std::string, std::string>> references;  // (table, the table it refers to)
};

Kind kindOf(std::string_view type) {
  if (type == "bigint" || type == "integer" || type == "smallint") return Kind::kInteger;
  if (type == "text" || type.starts_with("character")) return Kind::kText;
  if (type == "bytea") return Kind::kBytes;
  return Kind::kOther;
}

Result<Catalog> readCatalog(Store& target) {
  Catalog c;
  PURSER_TRY(target.read([&](Tx& tx) -> Result<void> {
    const Rows columns = PURSER_TRY_VALUE(tx.query(
        "SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod),"
        " a.attidentity::text, COALESCE(pg_get_expr(d.adbin, d.adrelid), '')"
        " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped"
        " LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum"
        " WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p')"
        " ORDER BY c.relname, a.attnum"));
    for (const Row& r : columns) {
      Column col;
      col.name = r.getText(1);
      col.type = r.getText(2);
      col.kind = kindOf(col.type);
      col.identity = !r.getText(3).empty();
      col.serial = r.getText(4).starts_with("nextval(");
      c.tables[r.getText(0)].push_back(std::move(col));
    }
    const Rows refs = PURSER_TRY_VALUE(
        tx.query("SELECT c.relname, p.relname FROM pg_constraint k"
                 " JOIN pg_class c ON c.oid = k.conrelid JOIN pg_class p ON p.oid = k.confrelid"
                 " JOIN pg_namespace n ON n.oid = c.relnamespace"
                 " WHERE k.contype = 'f' AND n.nspname = current_schema()"));
    for (const Row& r : refs) c.references.emplace_back(r.getText(0), r.getText(1));
    return {};
  }));
  return c;
}

// `tables` ordered so that a table comes after every table it refers to (by name otherwise); a
// cycle, which Purser's schema does not have, leaves its tables in name order at the end.
std::vector<std::string> parentsFirst(std::vector<std::string> tables, const Catalog& catalog) {
  std::sort(tables.begin(), tables.end());
  const std::set<std::string> copied(tables.begin(), tables.end());
  std::vector<std::string> out;
  std::set<std::string> placed;
  bool progress = true;
  while (progress && out.size() < tables.size()) {
    progress = false;
    for (const auto& t : tables) {
      if (placed.contains(t)) continue;
      const bool ready =
          std::none_of(catalog.references.begin(), catalog.references.end(), [&](const auto& ref) {
            return ref.first == t && ref.second != t && copied.contains(ref.second) &&
                   !placed.contains(ref.second);
          });
      if (!ready) continue;
      out.push_back(t);
      placed.insert(t);
      progress = true;
    }
  }
  for (const auto& t : tables) {
    if (!placed.contains(t)) out.push_back(t);
  }
  return out;
}

// --- Copying
// --------------------------------------------------------------------------------------

struct Plan {
  std::string table;
  std::vector<Column> columns;  // the source's columns, as the target has them
  bool identity = false;        // the target assigns some column's values unless told otherwise
  std::string full_insert;      // the INSERT of a whole batch
  size_t batch_rows = 1;
};

std::string insertSql(const Plan& p, size_t rows) {
  std::string sql = "INSERT INTO " + quoteIdent(p.table) + " (";
  for (size_t i = 0; i < p.columns.size(); ++i) {
    if (i > 0) sql += ", ";
    sql += quoteIdent(p.columns[i].name);
  }
  sql += ")";
  // Ids are copied as they are, also into identity columns.
  if (p.identity) sql += " OVERRIDING SYSTEM VALUE";
  sql += " VALUES ";
  size_t n = 1;
  for (size_t r = 0; r < rows; ++r) {
    sql += r > 0 ? ", (" : "(";
    for (size_t i = 0; i < p.columns.size(); ++i) {
      if (i > 0) sql += ", ";
      // Typed here, so that a batch whose first value is NULL is prepared as well as any other.
      sql += fmt::format("${}::{}", n++, p.columns[i].type);
    }
    sql += ")";
  }
  return sql;
}

// Makes `v` the value `column` keeps in PostgreSQL, or says why it cannot be.
Result<void> fitValue(Value& v, const Column& column, const std::string& table, int64_t row) {
  if (std::holds_alternative<std::monostate>(v)) return {};
  const auto refuse = [&](std::string_view expected) -> Result<void> {
    return fail(Error(ErrorCode::kDataLoss,
                      fmt::format("table {}, row {}, column {}: {} where {} is expected (the "
                                  "SQLite store holds a value Purser never writes there)",
                                  table, row, column.name, shown(v), expected)));
  };
  switch (column.kind) {
    case Kind::kInteger:
      if (!std::holds_alternative<int64_t>(v)) return refuse("an integer");
      return {};
    case Kind::kBytes:
      if (std::holds_alternative<int64_t>(v)) return refuse("binary data");
      if (auto* t = std::get_if<std::string>(&v)) v = Blob{std::move(*t)};
      return {};
    case Kind::kText:
    case Kind::kOther:
      if (std::holds_alternative<Blob>(v)) return refuse("text");
      if (const auto* n = std::get_if<int64_t>(&v)) v = std::to_string(*n);
      return {};
  }
  return {};
}

Result<void> requireEmpty(Tx& tx, const std::string& table) {
  const Rows rows = PURSER_TRY_VALUE(tx.query("SELECT COUNT(*) FROM (SELECT 1 FROM " +
                                              quoteIdent(table) + " LIMIT 1) AS any_row"));
  if (!rows.empty() && rows[0].getInt(0) > 0) {
    return fail(Error(ErrorCode::kFailedPrecondition,
                      fmt::format("the PostgreSQL database already holds data in table {}: purser "
                                  "migrate copies into an empty database only (was a replica "
                                  "started on it already?); give it a new, empty database",
                                  table)));
  }
  return {};
}

Result<void> copyTable(SqliteSource& source, Tx& tx, const Plan& p) {
  std::vector<std::string> names;
  for (const auto& c : p.columns) names.push_back(c.name);
  std::vector<Value> params;
  params.reserve(p.batch_rows * p.columns.size());
  size_t in_batch = 0;
  int64_t row = 0;
  const auto flush = [&](const std::string& sql) -> Result<void> {
    auto done = tx.exec(sql, params);
    if (!done) {
      return fail(Error(done.error().code, fmt::format("copying table {} (rows up to {}): {}",
                                                       p.table, row, done.error().message)));
    }
    params.clear();
    in_batch = 0;
    return {};
  };
  PURSER_TRY(source.scan(p.table, names, [&](std::vector<Value>& values) -> Result<void> {
    ++row;
    for (size_t i = 0; i < values.size(); ++i) {
      PURSER_TRY(fitValue(values[i], p.columns[i], p.table, row));
      params.push_back(std::move(values[i]));
    }
    if (++in_batch == p.batch_rows) PURSER_TRY(flush(p.full_insert));
    return {};
  }));
  if (in_batch > 0) PURSER_TRY(flush(insertSql(p, in_batch)));
  return {};
}

// Moves the sequences behind identity and serial columns past the ids copied into them, so that
// the next row the database numbers itself does not collide with a copied one.
Result<void> advanceSequences(Tx& tx, const Plan& p) {
  for (const auto& c : p.columns) {
    if (!c.identity && !c.serial) continue;
    PURSER_TRY(tx.query("SELECT setval(pg_get_serial_sequence($1, $2), GREATEST(MAX(" +
                            quoteIdent(c.name) + "), 1)) FROM " + quoteIdent(p.table) +
                            " HAVING MAX(" + quoteIdent(c.name) + ") IS NOT NULL",
                        {quoteIdent(p.table), c.name}));
  }
  return {};
}

// Counts and sums on both sides; the target's inside `tx` (the copy's own transaction, or a read).
Result<TableCheck> checkTable(SqliteSource& source, Tx& tx, const Plan& p) {
  TableCheck check;
  check.table = p.table;
  check.source_rows = PURSER_TRY_VALUE(source.count(p.table));
  std::string sql = "SELECT COUNT(*)";
  for (const auto& c : p.columns) {
    if (c.kind != Kind::kInteger) continue;
    check.summed.push_back(c.name);
    sql += ", COALESCE(SUM(" + quoteIdent(c.name) + "), 0)::text";
  }
  sql += " FROM " + quoteIdent(p.table);
  std::vector<__int128> sums(check.summed.size(), 0);
  std::vector<bool> not_integer(check.summed.size(), false);
  PURSER_TRY(source.scan(p.table, check.summed, [&](std::vector<Value>& values) -> Result<void> {
    for (size_t i = 0; i < values.size(); ++i) {
      if (const auto* n = std::get_if<int64_t>(&values[i])) {
        sums[i] += *n;
      } else if (!std::holds_alternative<std::monostate>(values[i])) {
        not_integer[i] = true;
      }
    }
    return {};
  }));
  const Rows rows = PURSER_TRY_VALUE(tx.query(sql));
  if (rows.size() != 1 || rows[0].size() != check.summed.size() + 1) {
    return fail(internalError("PostgreSQL answered a count with an unexpected shape"));
  }
  check.target_rows = rows[0].getInt(0);
  if (check.source_rows != check.target_rows) {
    check.mismatches.push_back(
        fmt::format("rows: {} in SQLite, {} in PostgreSQL", check.source_rows, check.target_rows));
  }
  for (size_t i = 0; i < check.summed.size(); ++i) {
    const Value& v = rows[0].at(i + 1);
    const std::string target = std::holds_alternative<std::string>(v) ? std::get<std::string>(v)
                               : std::holds_alternative<int64_t>(v)
                                   ? std::to_string(std::get<int64_t>(v))
                                   : std::string("?");
    if (not_integer[i]) {
      check.mismatches.push_back(
          fmt::format("sum({}): SQLite holds values that are not integers", check.summed[i]));
    } else if (decimal(sums[i]) != target) {
      check.mismatches.push_back(fmt::format("sum({}): {} in SQLite, {} in PostgreSQL",
                                             check.summed[i], decimal(sums[i]), target));
    }
  }
  return check;
}

Error sqliteError(sqlite3* db, int rc, const std::string& path) {
  const char* msg = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  switch (rc & 0xff) {
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return Error(ErrorCode::kDataLoss,
                   fmt::format("\"{}\" is damaged ({}): restore it from a backup", path, msg));
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    case SQLITE_IOERR:
    case SQLITE_CANTOPEN:
      return unavailable(fmt::format("cannot read \"{}\": {}", path, msg));
    default:
      return Error(ErrorCode::kDataLoss, fmt::format("cannot read \"{}\": {}", path, msg));
  }
}

}  // namespace

bool CopyReport::ok() const {
  return committed &&
         std::all_of(tables.begin(), tables.end(), [](const TableCheck& t) { return t.ok(); });
}

// --- SqliteSource
// ---------------------------------------------------------------------------------

Result<std::unique_ptr<SqliteSource>> SqliteSource::open(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return fail(
        Error(ErrorCode::kNotFound, fmt::format("there is no SQLite store at \"{}\"", path)));
  }
  {
    // SQLite would take an empty or foreign file for an empty database; say what it is instead.
    static constexpr char kMagic[16] = {'S', 'Q', 'L', 'i', 't', 'e', ' ', 'f',
                                        'o', 'r', 'm', 'a', 't', ' ', '3', '\0'};
    std::ifstream in(path, std::ios::binary);
    char header[16] = {};
    in.read(header, sizeof header);
    if (!in || std::memcmp(header, kMagic, sizeof kMagic) != 0) {
      return fail(Error(ErrorCode::kDataLoss,
                        fmt::format("\"{}\" is not a SQLite database (its first bytes are not "
                                    "SQLite's header)",
                                    path)));
    }
  }
  sqlite3* db = nullptr;
  const int rc =
      sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_FULLMUTEX, nullptr);
  std::unique_ptr<SqliteSource> source(new SqliteSource(path, db));
  if (rc != SQLITE_OK) return fail(sqliteError(db, rc, path));
  sqlite3_extended_result_codes(db, 1);
  sqlite3_busy_timeout(db, 5000);
  const auto none = [](std::vector<Value>&) -> Result<void> { return {}; };
  PURSER_TRY(source->run("PRAGMA query_only=1", {}, none));
  // One snapshot for every read that follows.
  PURSER_TRY(source->run("BEGIN", {}, none));
  std::vector<std::string> problems;
  PURSER_TRY(source->run("PRAGMA quick_check", {}, [&](std::vector<Value>& v) -> Result<void> {
    const bool ok = v.size() == 1 && std::holds_alternative<std::string>(v[0]) &&
                    std::get<std::string>(v[0]) == "ok";
    if (!ok && problems.size() < 3) problems.push_back(v.empty() ? "?" : shown(v[0]));
    return {};
  }));
  if (!problems.empty()) {
    return fail(Error(ErrorCode::kDataLoss,
                      fmt::format("\"{}\" is damaged (integrity check: {}): restore it from a "
                                  "backup",
                                  path, fmt::join(problems, "; "))));
  }
  bool purser = false;
  PURSER_TRY(
      source->run("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'",
                  {}, [&](std::vector<Value>&) -> Result<void> {
                    purser = true;
                    return {};
                  }));
  if (!purser) {
    return fail(Error(ErrorCode::kFailedPrecondition,
                      fmt::format("\"{}\" is a SQLite database but not a Purser store (it has no "
                                  "schema_migrations table)",
                                  path)));
  }
  return source;
}

SqliteSource::~SqliteSource() { sqlite3_close_v2(db_); }

Result<void> SqliteSource::run(const std::string& sql, const std::vector<std::string>& params,
                               const std::function<Result<void>(std::vector<Value>&)>& row) {
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v2(db_, sql.c_str(), static_cast<int>(sql.size()), &stmt, nullptr);
  if (rc != SQLITE_OK) return fail(sqliteError(db_, rc, path_));
  struct Finalize {
    sqlite3_stmt* stmt;
    ~Finalize() { sqlite3_finalize(stmt); }
  } finalize{stmt};
  if (stmt == nullptr) return {};
  for (size_t i = 0; i < params.size(); ++i) {
    rc = sqlite3_bind_text64(stmt, static_cast<int>(i) + 1, params[i].data(), params[i].size(),
                             SQLITE_TRANSIENT, SQLITE_UTF8);
    if (rc != SQLITE_OK) return fail(sqliteError(db_, rc, path_));
  }
  std::vector<Value> values;
  for (;;) {
    rc = sqlite3_step(stmt);
    if (rc == SQLITE_DONE) return {};
    if (rc != SQLITE_ROW) return fail(sqliteError(db_, rc, path_));
    sqliteRowValues(stmt, values);
    PURSER_TRY(row(values));
  }
}

Result<std::map<std::string, Rows>> SqliteSource::recordedMigrations() {
  std::map<std::string, Rows> out;
  auto r = run(
      "SELECT component, version, name, checksum FROM schema_migrations"
      " ORDER BY component, version",
      {}, [&](std::vector<Value>& v) -> Result<void> {
        if (v.size() != 4 || !std::holds_alternative<std::string>(v[0]) ||
            !std::holds_alternative<int64_t>(v[1]) || !std::holds_alternative<std::string>(v[2]) ||
            !std::holds_alternative<std::string>(v[3])) {
          return fail(Error(ErrorCode::kDataLoss, "a row is malformed"));
        }
        out[std::get<std::string>(v[0])].emplace_back(std::vector<Value>{v[1], v[2], v[3]});
        return {};
      });
  if (!r) {
    return fail(Error(ErrorCode::kDataLoss,
                      fmt::format("\"{}\": its schema_migrations table cannot be read ({})", path_,
                                  r.error().message)));
  }
  return out;
}

Result<std::vector<std::string>> SqliteSource::tables() {
  std::vector<std::string> out;
  PURSER_TRY(
      run("SELECT name FROM sqlite_master WHERE type = 'table'"
          " AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' AND name <> 'schema_migrations'"
          " ORDER BY name",
          {}, [&](std::vector<Value>& v) -> Result<void> {
            if (v.size() != 1 || !std::holds_alternative<std::string>(v[0])) {
              return fail(Error(ErrorCode::kDataLoss,
                                fmt::format("\"{}\" names a table strangely", path_)));
            }
            out.push_back(std::get<std::string>(v[0]));
            return {};
          }));
  return out;
}

Result<std::vector<std::string>> SqliteSource::columns(const std::string& table) {
  std::vector<std::string> out;
  PURSER_TRY(run("SELECT name FROM pragma_table_info(?1)", {table},
                 [&](std::vector<Value>& v) -> Result<void> {
                   if (v.size() != 1 || !std::holds_alternative<std::string>(v[0])) {
                     return fail(Error(ErrorCode::kDataLoss,
                                       fmt::format("table {} names a column strangely", table)));
                   }
                   out.push_back(std::get<std::string>(v[0]));
                   return {};
                 }));
  if (out.empty()) {
    return fail(Error(ErrorCode::kDataLoss, fmt::format("table {} has no columns", table)));
  }
  return out;
}

Result<int64_t> SqliteSource::count(const std::string& table) {
  int64_t n = -1;
  PURSER_TRY(run("SELECT COUNT(*) FROM " + quoteIdent(table), {},
                 [&](std::vector<Value>& v) -> Result<void> {
                   if (!v.empty() && std::holds_alternative<int64_t>(v[0])) {
                     n = std::get<int64_t>(v[0]);
                   }
                   return {};
                 }));
  if (n < 0) return fail(internalError(fmt::format("SQLite did not count table {}", table)));
  return n;
}

Result<void> SqliteSource::scan(const std::string& table, const std::vector<std::string>& columns,
                                const std::function<Result<void>(std::vector<Value>&)>& row) {
  if (columns.empty()) return {};
  std::string sql = "SELECT ";
  for (size_t i = 0; i < columns.size(); ++i) {
    if (i > 0) sql += ", ";
    sql += quoteIdent(columns[i]);
  }
  sql += " FROM " + quoteIdent(table);
  return run(sql, {}, row);
}

// --- Copying
// --------------------------------------------------------------------------------------

Result<void> checkTargetEmpty(Store& target, const std::vector<std::string>& tables) {
  if (target.dialect() != Dialect::kPostgres) {
    return fail(invalidArgument("the target of a copy must be a PostgreSQL store"));
  }
  const Catalog catalog = PURSER_TRY_VALUE(readCatalog(target));
  return target.read([&](Tx& tx) -> Result<void> {
    for (const auto& t : tables) {
      if (catalog.tables.contains(t)) PURSER_TRY(requireEmpty(tx, t));
    }
    return {};
  });
}

namespace {

// What to copy from each table of `source`, parents first; an error for a table or column the
// target does not have.
Result<std::vector<Plan>> planCopy(SqliteSource& source, Store& target,
                                   const CopyOptions& options) {
  if (target.dialect() != Dialect::kPostgres) {
    return fail(invalidArgument("the target of a copy must be a PostgreSQL store"));
  }
  const Catalog catalog = PURSER_TRY_VALUE(readCatalog(target));
  const std::vector<std::string> tables = PURSER_TRY_VALUE(source.tables());
  std::vector<Plan> plans;
  for (const auto& table : parentsFirst(tables, catalog)) {
    const auto it = catalog.tables.find(table);
    if (it == catalog.tables.end()) {
      return fail(Error(ErrorCode::kFailedPrecondition,
                        fmt::format("the SQLite store has a table \"{}\" that no migration this "
                                    "purser knows creates in PostgreSQL, so it cannot be copied "
                                    "(was the store written by another program or a newer "
                                    "purser?); nothing was copied",
                                    table)));
    }
    Plan p;
    p.table = table;
    for (const auto& name : PURSER_TRY_VALUE(source.columns(table))) {
      const auto col = std::find_if(it->second.begin(), it->second.end(),
                                    [&](const Column& c) { return c.name == name; });
      if (col == it->second.end()) {
        return fail(Error(ErrorCode::kFailedPrecondition,
                          fmt::format("table {} has a column \"{}\" in the SQLite store that it "
                                      "does not have in PostgreSQL; nothing was copied",
                                      table, name)));
      }
      p.columns.push_back(*col);
    }
    p.identity = std::any_of(it->second.begin(), it->second.end(),
                             [](const Column& c) { return c.identity; });
    p.batch_rows = std::max<size_t>(1, std::min(options.batch_rows, kMaxParams / p.columns.size()));
    p.full_insert = insertSql(p, p.batch_rows);
    plans.push_back(std::move(p));
  }
  return plans;
}

// Every table's check, by name.
Result<std::vector<TableCheck>> checkAll(SqliteSource& source, Tx& tx,
                                         const std::vector<Plan>& plans) {
  std::vector<TableCheck> out;
  for (const auto& p : plans) out.push_back(PURSER_TRY_VALUE(checkTable(source, tx, p)));
  std::sort(out.begin(), out.end(),
            [](const TableCheck& a, const TableCheck& b) { return a.table < b.table; });
  return out;
}

}  // namespace

Result<CopyReport> copyStore(SqliteSource& source, Store& target, const CopyOptions& options) {
  const std::vector<Plan> plans = PURSER_TRY_VALUE(planCopy(source, target, options));
  CopyReport report;
  bool mismatch = false;
  auto written = target.write([&](Tx& tx) -> Result<void> {
    report.tables.clear();
    for (const auto& p : plans) {
      // Checked again inside the transaction: a replica started meanwhile is not overwritten.
      PURSER_TRY(requireEmpty(tx, p.table));
      PURSER_TRY(copyTable(source, tx, p));
      PURSER_TRY(advanceSequences(tx, p));
      spdlog::info("migrate: copied table {}", p.table);
    }
    report.tables = PURSER_TRY_VALUE(checkAll(source, tx, plans));
    mismatch = !std::all_of(report.tables.begin(), report.tables.end(),
                            [](const TableCheck& t) { return t.ok(); });
    if (mismatch) return fail(Error(ErrorCode::kAborted, "the copy did not check out"));
    return {};
  });
  if (!written) {
    if (mismatch) return report;  // committed stays false: nothing was kept
    return fail(written.error());
  }
  report.committed = true;
  return report;
}

Result<CopyReport> checkCopy(SqliteSource& source, Store& target) {
  const std::vector<Plan> plans = PURSER_TRY_VALUE(planCopy(source, target, {}));
  CopyReport report;
  report.committed = true;
  PURSER_TRY(target.read([&](Tx& tx) -> Result<void> {
    report.tables = PURSER_TRY_VALUE(checkAll(source, tx, plans));
    return {};
  }));
  return report;
}

}  // namespace purser::store
