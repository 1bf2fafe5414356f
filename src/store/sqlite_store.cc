#include "store/sqlite_store.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sqlite3.h>

#include <charconv>
#include <future>
#include <unordered_map>

#include "common/assert.h"
#include "common/hash.h"

namespace purser::store {

void sqliteRowValues(sqlite3_stmt* stmt, std::vector<Value>& values) {
  const int n = sqlite3_column_count(stmt);
  values.clear();
  values.reserve(static_cast<size_t>(n));
  for (int c = 0; c < n; ++c) {
    switch (sqlite3_column_type(stmt, c)) {
      case SQLITE_NULL:
        values.emplace_back(std::monostate{});
        break;
      case SQLITE_INTEGER:
        values.emplace_back(static_cast<int64_t>(sqlite3_column_int64(stmt, c)));
        break;
      case SQLITE_BLOB: {
        const auto* p = static_cast<const char*>(sqlite3_column_blob(stmt, c));
        values.emplace_back(Blob{std::string(p == nullptr ? "" : p,
                                             static_cast<size_t>(sqlite3_column_bytes(stmt, c)))});
        break;
      }
      default: {  // TEXT, and REAL as its text (Purser stores no floating point)
        const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt, c));
        values.emplace_back(
            std::string(p == nullptr ? "" : p, static_cast<size_t>(sqlite3_column_bytes(stmt, c))));
      }
    }
  }
}

namespace {

Error sqliteError(sqlite3* db, int rc, std::string_view sql) {
  const int ext = db != nullptr ? sqlite3_extended_errcode(db) : rc;
  const char* msg = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  ErrorCode code = ErrorCode::kInternal;
  switch (rc & 0xff) {
    case SQLITE_CONSTRAINT:
      code = (ext == SQLITE_CONSTRAINT_UNIQUE || ext == SQLITE_CONSTRAINT_PRIMARYKEY)
                 ? ErrorCode::kAlreadyExists
                 : ErrorCode::kFailedPrecondition;
      break;
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    case SQLITE_FULL:
    case SQLITE_IOERR:
    case SQLITE_CANTOPEN:
    case SQLITE_READONLY:
      code = ErrorCode::kUnavailable;
      break;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      code = ErrorCode::kDataLoss;
      break;
    default:
      break;
  }
  std::string where(sql.substr(0, 80));
  if (sql.size() > 80) where += "...";
  return Error(code, fmt::format("store: {} (in \"{}\")", msg, where));
}

}  // namespace

// One SQLite connection with its prepared-statement cache. Used by one thread at a time.
class SqliteConnection final : public Tx {
 public:
  static Result<std::unique_ptr<SqliteConnection>> open(const SqliteOptions& options,
                                                        bool read_only) {
    sqlite3* db = nullptr;
    const int flags =
        (read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE) |
        SQLITE_OPEN_NOMUTEX;
    const int rc = sqlite3_open_v2(options.path.c_str(), &db, flags, nullptr);
    auto conn = std::unique_ptr<SqliteConnection>(new SqliteConnection(db));
    if (rc != SQLITE_OK) {
      return fail(Error(ErrorCode::kUnavailable,
                        fmt::format("cannot open database \"{}\": {}", options.path,
                                    db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc))));
    }
    sqlite3_busy_timeout(db, static_cast<int>(options.busy_timeout.count()));
    sqlite3_extended_result_codes(db, 1);
    if (!read_only) {
      auto mode = conn->query("PRAGMA journal_mode=WAL");
      if (!mode) return fail(mode.error());
      if (mode->empty() || mode->front().getText(0) != "wal") {
        return fail(Error(ErrorCode::kUnavailable,
                          fmt::format("database \"{}\" cannot use WAL journaling", options.path)));
      }
      PURSER_TRY(conn->raw("PRAGMA synchronous=FULL"));
    } else {
      PURSER_TRY(conn->raw("PRAGMA query_only=1"));
    }
    PURSER_TRY(conn->raw("PRAGMA foreign_keys=ON"));
    return conn;
  }

  ~SqliteConnection() override {
    for (auto& [_, s] : cache_) sqlite3_finalize(s.stmt);
    sqlite3_close_v2(db_);
  }

  sqlite3* db() const { return db_; }

  // Statements without parameters, possibly several separated by ';'.
  Result<void> raw(std::string_view sql) {
    char* err = nullptr;
    const std::string text(sql);
    const int rc = sqlite3_exec(db_, text.c_str(), nullptr, nullptr, &err);
    sqlite3_free(err);
    if (rc != SQLITE_OK) return fail(sqliteError(db_, rc, sql));
    return {};
  }

  Result<int64_t> exec(std::string_view sql, const std::vector<Value>& params) override {
    PURSER_TRY(run(sql, params, nullptr));
    return static_cast<int64_t>(sqlite3_changes64(db_));
  }

  Result<Rows> query(std::string_view sql, const std::vector<Value>& params) override {
    Rows rows;
    PURSER_TRY(run(sql, params, &rows));
    return rows;
  }

  Result<Rows> query(std::string_view sql) { return query(sql, {}); }

 private:
  explicit SqliteConnection(sqlite3* db) : db_(db) {}

  struct Statement {
    sqlite3_stmt* stmt = nullptr;
    std::vector<int> value_index;  // per SQLite parameter (1-based - 1): index into params
  };

  Result<Statement*> prepare(std::string_view sql) {
    auto it = cache_.find(std::string(sql));
    if (it != cache_.end()) return &it->second;
    Statement s;
    const char* tail = nullptr;
    const int rc = sqlite3_prepare_v3(db_, sql.data(), static_cast<int>(sql.size()),
                                      SQLITE_PREPARE_PERSISTENT, &s.stmt, &tail);
    if (rc != SQLITE_OK) return fail(sqliteError(db_, rc, sql));
    if (s.stmt == nullptr) return fail(invalidArgument("store: empty SQL statement"));
    if (tail != nullptr &&
        std::string_view(tail).find_first_not_of(" \t\r\n;") != std::string_view::npos) {
      sqlite3_finalize(s.stmt);
      return fail(invalidArgument(fmt::format(
          "store: one statement at a time with parameters (in \"{}\")", sql.substr(0, 80))));
    }
    const int count = sqlite3_bind_parameter_count(s.stmt);
    for (int i = 1; i <= count; ++i) {
      const char* name = sqlite3_bind_parameter_name(s.stmt, i);
      int index = i - 1;  // '?' parameters bind in order
      if (name != nullptr && name[0] == '$') {
        const std::string_view digits(name + 1);
        const auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
        if (ec != std::errc() || p != digits.data() + digits.size() || index < 1) {
          sqlite3_finalize(s.stmt);
          return fail(invalidArgument(fmt::format("store: bad parameter \"{}\"", name)));
        }
        --index;
      }
      s.value_index.push_back(index);
    }
    auto [pos, _] = cache_.emplace(std::string(sql), s);
    return &pos->second;
  }

  Result<void> run(std::string_view sql, const std::vector<Value>& params, Rows* rows) {
    Statement* s = PURSER_TRY_VALUE(prepare(sql));
    sqlite3_stmt* stmt = s->stmt;
    struct Reset {
      sqlite3_stmt* stmt;
      ~Reset() {
        sqlite3_reset(stmt);
        sqlite3_clear_bindings(stmt);
      }
    } reset{stmt};
    for (size_t i = 0; i < s->value_index.size(); ++i) {
      const auto vi = static_cast<size_t>(s->value_index[i]);
      if (vi >= params.size()) {
        return fail(invalidArgument(
            fmt::format("store: statement uses parameter ${} but {} were given (in \"{}\")", vi + 1,
                        params.size(), sql.substr(0, 80))));
      }
      const Value& v = params[vi];
      const int col = static_cast<int>(i) + 1;
      int rc = SQLITE_OK;
      if (std::holds_alternative<std::monostate>(v)) {
        rc = sqlite3_bind_null(stmt, col);
      } else if (const auto* n = std::get_if<int64_t>(&v)) {
        rc = sqlite3_bind_int64(stmt, col, *n);
      } else if (const auto* t = std::get_if<std::string>(&v)) {
        rc = sqlite3_bind_text64(stmt, col, t->data(), t->size(), SQLITE_STATIC, SQLITE_UTF8);
      } else {
        const Blob& b = std::get<Blob>(v);
        rc = sqlite3_bind_blob64(stmt, col, b.bytes.data(), b.bytes.size(), SQLITE_STATIC);
      }
      if (rc != SQLITE_OK) return fail(sqliteError(db_, rc, sql));
    }
    for (;;) {
      const int rc = sqlite3_step(stmt);
      if (rc == SQLITE_DONE) return {};
      if (rc != SQLITE_ROW) return fail(sqliteError(db_, rc, sql));
      if (rows == nullptr) continue;
      std::vector<Value> values;
      sqliteRowValues(stmt, values);
      rows->emplace_back(std::move(values));
    }
  }

  sqlite3* db_;
  std::unordered_map<std::string, Statement> cache_;
};

Result<std::unique_ptr<SqliteStore>> SqliteStore::open(SqliteOptions options, const Clock& clock) {
  auto writer = PURSER_TRY_VALUE(SqliteConnection::open(options, /*read_only=*/false));
  PURSER_TRY(writer->raw(
      "CREATE TABLE IF NOT EXISTS schema_migrations ("
      " component TEXT NOT NULL, version INTEGER NOT NULL, name TEXT NOT NULL,"
      " checksum TEXT NOT NULL, applied_at TEXT NOT NULL, PRIMARY KEY (component, version))"));
  return std::unique_ptr<SqliteStore>(
      new SqliteStore(std::move(options), clock, std::move(writer)));
}

SqliteStore::SqliteStore(SqliteOptions options, const Clock& clock,
                         std::unique_ptr<SqliteConnection> writer)
    : options_(std::move(options)),
      clock_(clock),
      writer_(std::move(writer)),
      readers_(options_.max_readers,
               [this] { return SqliteConnection::open(options_, /*read_only=*/true); }) {
  queue_ = std::make_unique<WriteQueue>(
      options_.max_batch, options_.max_queue,
      [this](std::vector<WriteQueue::Job>& batch) { return runBatch(batch); });
}

SqliteStore::~SqliteStore() { close(); }

void SqliteStore::close() {
  queue_->close();
  readers_.clear();
}

uint64_t SqliteStore::commitsForTest() const { return queue_->batches(); }

void SqliteStore::writeAsync(TxFn fn, std::function<void(Result<void>)> done) {
  queue_->writeAsync(std::move(fn), std::move(done));
}

Result<void> SqliteStore::write(TxFn fn) { return queue_->write(std::move(fn)); }

std::vector<Result<void>> SqliteStore::runBatch(std::vector<WriteQueue::Job>& batch) {
  SqliteConnection& db = *writer_;
  // Transaction control statements are prepared once and reused (they run for every job).
  const auto control = [&db](std::string_view sql) -> Result<void> {
    PURSER_TRY(db.exec(sql, {}));
    return {};
  };
  std::vector<Result<void>> results(batch.size());
  size_t txn_start = 0;  // first job of the current transaction
  // Marks the jobs of the current transaction that had succeeded as failed with `e`.
  const auto failOpen = [&](size_t end, const Error& e) {
    for (size_t k = txn_start; k < end; ++k) {
      if (results[k]) results[k] = fail(e);
    }
  };
  auto begun = control("BEGIN IMMEDIATE");
  for (size_t i = 0; i < batch.size(); ++i) {
    if (!begun) {
      results[i] = fail(begun.error());
      txn_start = i + 1;
      begun = control("BEGIN IMMEDIATE");
      continue;
    }
    Result<void> r = control("SAVEPOINT job");
    if (r) {
      try {
        r = batch[i].fn(db);
      } catch (const std::exception& e) {
        r = fail(internalError(fmt::format("store: write threw: {}", e.what())));
      }
      if (sqlite3_get_autocommit(db.db()) != 0) {
        // SQLite rolled the whole transaction back (disk full, I/O error): the earlier writes
        // of this batch are lost too. Report it and start a new transaction for the rest.
        const Error lost = r ? internalError("store: transaction was rolled back") : r.error();
        failOpen(i, lost);
        results[i] = r ? fail(lost) : r;
        txn_start = i + 1;
        begun = control("BEGIN IMMEDIATE");
        continue;
      }
      if (r) {
        r = control("RELEASE job");
      } else {
        (void)control("ROLLBACK TO job");
        (void)control("RELEASE job");
      }
    }
    results[i] = std::move(r);
  }
  if (begun) {
    auto committed = control("COMMIT");
    if (!committed) {
      (void)control("ROLLBACK");
      failOpen(batch.size(), committed.error());
    }
  }
  return results;
}

Result<void> SqliteStore::read(TxFn fn) {
  auto conn = PURSER_TRY_VALUE(readers_.acquire());
  Result<void> r = conn->raw("BEGIN");
  if (r) {
    try {
      r = fn(*conn);
    } catch (const std::exception& e) {
      r = fail(internalError(fmt::format("store: read threw: {}", e.what())));
    }
    (void)conn->raw(r ? "COMMIT" : "ROLLBACK");
  }
  readers_.release(std::move(conn));
  return r;
}

Result<int> SqliteStore::migrate(std::string_view component,
                                 const std::vector<Migration>& migrations) {
  PURSER_TRY(checkNumbering(component, migrations));
  // Check what is recorded against what this binary knows.
  Rows applied;
  PURSER_TRY(write([&](Tx& tx) -> Result<void> {
    applied =
        PURSER_TRY_VALUE(tx.query("SELECT version, name, checksum FROM schema_migrations WHERE "
                                  "component = $1 ORDER BY version",
                                  {std::string(component)}));
    return {};
  }));
  PURSER_TRY(checkRecorded(component, migrations, applied));
  int count = 0;
  for (size_t i = applied.size(); i < migrations.size(); ++i) {
    const Migration& m = migrations[i];
    auto r = write([&](Tx& tx) -> Result<void> {
      auto& conn = static_cast<SqliteConnection&>(tx);
      auto done = conn.raw(m.sql);
      if (!done) {
        return fail(Error(done.error().code,
                          fmt::format("migration {} version {} (\"{}\") failed: {}", component,
                                      m.version, m.name, done.error().message)));
      }
      PURSER_TRY(
          tx.exec("INSERT INTO schema_migrations (component, version, name, checksum, applied_at)"
                  " VALUES ($1, $2, $3, $4, $5)",
                  {std::string(component), static_cast<int64_t>(m.version), m.name,
                   migrationChecksum(m.sql), formatRfc3339(clock_.now())}));
      return {};
    });
    if (!r) return fail(r.error());
    spdlog::info("store: applied migration {} {} ({})", component, m.version, m.name);
    ++count;
  }
  return count;
}

}  // namespace purser::store
