#include "store/postgres_store.h"

#include <atomic>

#include <fmt/format.h>
#include <libpq-fe.h>
#include <spdlog/spdlog.h>

#include <poll.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <future>
#include <optional>
#include <unordered_map>

#include "common/hash.h"

namespace purser::store {

namespace {
// Every request to the server and its answer, over every connection of the process.
std::atomic<uint64_t> g_round_trips{0};

// A connection of its own (a listener's, a lock's), outside the store's writer and pool.
Result<PGconn*> connectOwn(const std::string& url, const char* application) {
  const char* keys[] = {"dbname", "connect_timeout", "application_name", nullptr};
  const char* values[] = {url.c_str(), "5", application, nullptr};
  PGconn* conn = PQconnectdbParams(keys, values, /*expand_dbname=*/1);
  if (conn == nullptr || PQstatus(conn) != CONNECTION_OK) {
    std::string why = conn != nullptr ? PQerrorMessage(conn) : "out of memory";
    while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
    if (conn != nullptr) PQfinish(conn);
    return fail(
        Error(ErrorCode::kUnavailable, fmt::format("cannot connect to PostgreSQL: {}", why)));
  }
  return conn;
}
}  // namespace

std::optional<std::string> postgresTransportWarning(const std::string& url) {
  char* error = nullptr;
  PQconninfoOption* options = PQconninfoParse(url.c_str(), &error);
  if (options == nullptr) {
    PQfreemem(error);
    return std::nullopt;
  }
  std::string host, hostaddr, sslmode;
  for (PQconninfoOption* o = options; o->keyword != nullptr; ++o) {
    if (o->val == nullptr) continue;
    const std::string_view key = o->keyword;
    if (key == "host") host = o->val;
    if (key == "hostaddr") hostaddr = o->val;
    if (key == "sslmode") sslmode = o->val;
  }
  PQconninfoFree(options);
  if (sslmode.empty()) {
    if (const char* env = std::getenv("PGSSLMODE")) sslmode = env;
  }
  if (host.empty()) {
    if (const char* env = std::getenv("PGHOST")) host = env;
  }
  const std::string where = hostaddr.empty() ? host : hostaddr;
  // Several hosts (a comma list) are judged as a whole: any remote one counts.
  bool remote = false;
  size_t start = 0;
  while (start <= where.size()) {
    const size_t comma = std::min(where.find(',', start), where.size());
    const std::string one = where.substr(start, comma - start);
    if (!one.empty() && one[0] != '/' && one != "localhost" && one != "127.0.0.1" && one != "::1") {
      remote = true;
    }
    start = comma + 1;
  }
  if (!remote || sslmode == "verify-full" || sslmode == "verify-ca") return std::nullopt;
  return fmt::format(
      "store.postgres reaches {} with sslmode={}: the connection is not verified (anyone on the "
      "path could read or change what Purser stores); write sslmode=verify-full (and "
      "sslrootcert= for a private CA)",
      where, sslmode.empty() ? "prefer (libpq's default)" : sslmode);
}

PgListener::PgListener(std::string url, std::string channel)
    : url_(std::move(url)), channel_(std::move(channel)) {}

PgListener::~PgListener() {
  if (conn_ != nullptr) PQfinish(conn_);
}

Result<void> PgListener::connect() {
  if (conn_ != nullptr) PQfinish(conn_);
  conn_ = nullptr;
  conn_ = PURSER_TRY_VALUE(connectOwn(url_, "purser-listener"));
  char* quoted = PQescapeIdentifier(conn_, channel_.c_str(), channel_.size());
  const std::string sql = std::string("LISTEN ") + (quoted != nullptr ? quoted : "\"\"");
  PQfreemem(quoted);
  g_round_trips.fetch_add(1, std::memory_order_relaxed);
  PGresult* res = PQexec(conn_, sql.c_str());
  const bool ok = res != nullptr && PQresultStatus(res) == PGRES_COMMAND_OK;
  PQclear(res);
  if (!ok) {
    PQfinish(conn_);
    conn_ = nullptr;
    return fail(Error(ErrorCode::kUnavailable, "PostgreSQL refused to LISTEN on " + channel_));
  }
  return {};
}

Result<std::vector<std::string>> PgListener::wait(std::chrono::milliseconds timeout) {
  std::vector<std::string> out;
  if (conn_ == nullptr || PQstatus(conn_) != CONNECTION_OK) PURSER_TRY(connect());
  const auto collect = [&] {
    while (PGnotify* n = PQnotifies(conn_)) {
      out.emplace_back(n->extra != nullptr ? n->extra : "");
      PQfreemem(n);
    }
  };
  collect();
  if (!out.empty()) return out;
  pollfd fd{PQsocket(conn_), POLLIN, 0};
  if (fd.fd < 0) {
    PQfinish(conn_);
    conn_ = nullptr;
    return fail(Error(ErrorCode::kUnavailable, "the listening connection was lost"));
  }
  const int ready = ::poll(&fd, 1, static_cast<int>(timeout.count()));
  if (ready > 0) {
    if (PQconsumeInput(conn_) == 0) {
      PQfinish(conn_);
      conn_ = nullptr;
      return fail(Error(ErrorCode::kUnavailable, "the listening connection was lost"));
    }
    collect();
  }
  return out;
}

PgSessionLock::~PgSessionLock() {
  if (conn_ != nullptr) PQfinish(conn_);
}

Result<bool> PgSessionLock::tryAcquire() {
  if (conn_ == nullptr || PQstatus(conn_) != CONNECTION_OK) {
    if (conn_ != nullptr) PQfinish(conn_);
    conn_ = nullptr;
    PGconn* conn = PURSER_TRY_VALUE(connectOwn(url_, "purser-lock"));
    // The server probes this connection after 5 s of silence, every 2 s, 4 times.
    g_round_trips.fetch_add(1, std::memory_order_relaxed);
    PGresult* set = PQexec(conn,
                           "SET tcp_keepalives_idle = 5; SET tcp_keepalives_interval = 2; "
                           "SET tcp_keepalives_count = 4");
    const bool set_ok = set != nullptr && PQresultStatus(set) == PGRES_COMMAND_OK;
    PQclear(set);
    if (!set_ok) {
      PQfinish(conn);
      return fail(
          Error(ErrorCode::kUnavailable, "PostgreSQL refused the lock connection's settings"));
    }
    conn_ = conn;
  }
  const std::string sql = fmt::format("SELECT pg_try_advisory_lock({})", key_);
  g_round_trips.fetch_add(1, std::memory_order_relaxed);
  PGresult* res = PQexec(conn_, sql.c_str());
  const bool ok = res != nullptr && PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1;
  const bool held = ok && std::string_view(PQgetvalue(res, 0, 0)) == "t";
  PQclear(res);
  if (!ok) return fail(Error(ErrorCode::kUnavailable, "PostgreSQL did not answer a lock request"));
  return held;
}

void PgSessionLock::release() {
  if (conn_ != nullptr) PQfinish(conn_);
  conn_ = nullptr;
}

Result<void> PgSessionLock::check() {
  if (conn_ == nullptr || PQstatus(conn_) != CONNECTION_OK) {
    return fail(Error(ErrorCode::kUnavailable, "the lock's connection to PostgreSQL is closed"));
  }
  g_round_trips.fetch_add(1, std::memory_order_relaxed);
  PGresult* res = PQexec(conn_, "SELECT 1");
  const bool ok = res != nullptr && PQresultStatus(res) == PGRES_TUPLES_OK;
  PQclear(res);
  if (!ok) {
    PQfinish(conn_);
    conn_ = nullptr;
    return fail(Error(ErrorCode::kUnavailable, "the lock's connection to PostgreSQL was lost"));
  }
  return {};
}

uint64_t postgresRoundTrips() { return g_round_trips.load(std::memory_order_relaxed); }

namespace {

// Type OIDs of PostgreSQL's built-in types (pg_type.dat; fixed since the types exist).
constexpr Oid kBool = 16;
constexpr Oid kBytea = 17;
constexpr Oid kInt8 = 20;
constexpr Oid kInt2 = 21;
constexpr Oid kInt4 = 23;
constexpr Oid kText = 25;
constexpr Oid kNumeric = 1700;

std::string excerpt(std::string_view sql) {
  std::string where(sql.substr(0, 80));
  if (sql.size() > 80) where += "...";
  return where;
}

// The error of a failed result (or of the connection when there is no result).
Error pgError(PGconn* conn, const PGresult* res, std::string_view sql) {
  const char* state = res != nullptr ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : nullptr;
  std::string message =
      res != nullptr ? PQresultErrorMessage(res) : (conn != nullptr ? PQerrorMessage(conn) : "");
  while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) message.pop_back();
  if (message.starts_with("ERROR:  ")) message = message.substr(8);
  ErrorCode code = ErrorCode::kInternal;
  const std::string_view s = state != nullptr ? state : "";
  if ((conn != nullptr && PQstatus(conn) == CONNECTION_BAD) || s.empty()) {
    // No SQLSTATE: libpq's own failure, the connection (the server went away mid-request).
    code = ErrorCode::kUnavailable;
  } else if (s == "23505") {
    code = ErrorCode::kAlreadyExists;  // unique_violation
  } else if (s.starts_with("23")) {
    code = ErrorCode::kFailedPrecondition;  // other integrity constraints
  } else if (s.starts_with("08") || s.starts_with("53") || s.starts_with("57") || s == "40001" ||
             s == "40P01" || s == "25006") {
    // Connection, resources, shutdown, serialization and deadlock (worth a retry), and a write
    // in a read-only transaction.
    code = ErrorCode::kUnavailable;
  } else if (s.starts_with("XX")) {
    code = ErrorCode::kDataLoss;
  }
  return Error(code, fmt::format("store: {} (in \"{}\")", message, excerpt(sql)));
}

struct ResultDeleter {
  void operator()(PGresult* r) const { PQclear(r); }
};
using PgResult = std::unique_ptr<PGresult, ResultDeleter>;

std::optional<int64_t> parseInt(std::string_view text) {
  int64_t v = 0;
  const auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || p != text.data() + text.size()) return std::nullopt;
  return v;
}

bool wordChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

bool sameWord(std::string_view text, size_t at, std::string_view word) {
  if (at + word.size() > text.size()) return false;
  for (size_t i = 0; i < word.size(); ++i) {
    char c = text[at + i];
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
    if (c != word[i]) return false;
  }
  return (at == 0 || !wordChar(text[at - 1])) &&
         (at + word.size() == text.size() || !wordChar(text[at + word.size()]));
}

}  // namespace

std::string postgresSchemaSql(std::string_view sql) {
  std::string out;
  out.reserve(sql.size() + 16);
  size_t i = 0;
  while (i < sql.size()) {
    const char c = sql[i];
    if (c == '\'' || c == '"') {
      // A literal or a quoted identifier, copied as it is ('' and "" escape the quote).
      size_t j = i + 1;
      while (j < sql.size()) {
        if (sql[j] == c) {
          if (j + 1 < sql.size() && sql[j + 1] == c) {
            j += 2;
            continue;
          }
          break;
        }
        ++j;
      }
      const size_t end = std::min(j + 1, sql.size());
      out.append(sql.substr(i, end - i));
      i = end;
      continue;
    }
    if (sameWord(sql, i, "INTEGER") && i + 7 < sql.size()) {
      // SQLite's rowid alias: a key assigned when none is given.
      size_t j = i + 7;
      while (j < sql.size() && (sql[j] == ' ' || sql[j] == '\n' || sql[j] == '\t')) ++j;
      if (sameWord(sql, j, "PRIMARY")) {
        size_t k = j + 7;
        while (k < sql.size() && (sql[k] == ' ' || sql[k] == '\n' || sql[k] == '\t')) ++k;
        if (sameWord(sql, k, "KEY")) {
          out += "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY";
          i = k + 3;
          continue;
        }
      }
    }
    if (sameWord(sql, i, "INTEGER")) {
      out += "BIGINT";
      i += 7;
      continue;
    }
    if (sameWord(sql, i, "BLOB")) {
      out += "BYTEA";
      i += 4;
      continue;
    }
    out.push_back(c);
    ++i;
  }
  return out;
}

// One PostgreSQL connection with its prepared statements. Used by one thread at a time.
class PgConnection final : public Tx {
 public:
  static Result<std::unique_ptr<PgConnection>> open(const PostgresOptions& options) {
    const std::string timeout =
        std::to_string(std::max<int64_t>(1, options.connect_timeout.count()));
    const char* keys[] = {"dbname", "connect_timeout", "application_name", nullptr};
    const char* values[] = {options.url.c_str(), timeout.c_str(), "purser", nullptr};
    PGconn* conn = PQconnectdbParams(keys, values, /*expand_dbname=*/1);
    auto out = std::unique_ptr<PgConnection>(new PgConnection(conn));
    if (conn == nullptr || PQstatus(conn) != CONNECTION_OK) {
      std::string why = conn != nullptr ? PQerrorMessage(conn) : "out of memory";
      while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
      return fail(
          Error(ErrorCode::kUnavailable, fmt::format("cannot connect to PostgreSQL: {}", why)));
    }
    // Times and amounts are text in Purser's schema; only the session's own notices are muted.
    PURSER_TRY(out->raw("SET client_min_messages = warning"));
    return out;
  }

  ~PgConnection() override {
    if (conn_ != nullptr) PQfinish(conn_);
  }

  bool broken() const { return conn_ == nullptr || PQstatus(conn_) == CONNECTION_BAD; }
  PGTransactionStatusType txStatus() const { return PQtransactionStatus(conn_); }

  // Reconnects a broken connection; its prepared statements are gone with it.
  Result<void> reset() {
    statements_.clear();
    PQreset(conn_);
    if (PQstatus(conn_) != CONNECTION_OK) {
      std::string why = PQerrorMessage(conn_);
      while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
      return fail(
          Error(ErrorCode::kUnavailable, fmt::format("cannot reconnect to PostgreSQL: {}", why)));
    }
    return raw("SET client_min_messages = warning");
  }

  // Statements without parameters, possibly several separated by ';'.
  Result<void> raw(std::string_view sql) {
    const std::string text(sql);
    g_round_trips.fetch_add(1, std::memory_order_relaxed);
    PgResult res(PQexec(conn_, text.c_str()));
    const ExecStatusType st = res ? PQresultStatus(res.get()) : PGRES_FATAL_ERROR;
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK && st != PGRES_EMPTY_QUERY) {
      return fail(pgError(conn_, res.get(), sql));
    }
    return {};
  }

  Result<int64_t> exec(std::string_view sql, const std::vector<Value>& params) override {
    PgResult res = PURSER_TRY_VALUE(run(sql, params));
    const char* n = PQcmdTuples(res.get());
    return n != nullptr && *n != '\0' ? parseInt(n).value_or(0) : int64_t{0};
  }

  Result<Rows> query(std::string_view sql, const std::vector<Value>& params) override {
    PgResult res = PURSER_TRY_VALUE(run(sql, params));
    Rows rows;
    const int n = PQntuples(res.get());
    const int cols = PQnfields(res.get());
    rows.reserve(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) {
      std::vector<Value> values;
      values.reserve(static_cast<size_t>(cols));
      for (int c = 0; c < cols; ++c) {
        if (PQgetisnull(res.get(), r, c)) {
          values.emplace_back(std::monostate{});
          continue;
        }
        const char* v = PQgetvalue(res.get(), r, c);
        const auto len = static_cast<size_t>(PQgetlength(res.get(), r, c));
        const std::string_view text(v, len);
        switch (PQftype(res.get(), c)) {
          case kInt2:
          case kInt4:
          case kInt8:
            values.emplace_back(parseInt(text).value_or(0));
            break;
          case kBool:
            values.emplace_back(int64_t{text == "t" ? 1 : 0});
            break;
          case kNumeric:
            // SUM() of bigints is numeric: a whole one reads as an integer, as in SQLite.
            if (auto whole = parseInt(text)) {
              values.emplace_back(*whole);
            } else {
              values.emplace_back(std::string(text));
            }
            break;
          case kBytea: {
            size_t out_len = 0;
            unsigned char* bytes =
                PQunescapeBytea(reinterpret_cast<const unsigned char*>(v), &out_len);
            if (bytes == nullptr) return fail(internalError("store: cannot read a bytea value"));
            values.emplace_back(Blob{std::string(reinterpret_cast<const char*>(bytes), out_len)});
            PQfreemem(bytes);
            break;
          }
          default:
            values.emplace_back(std::string(text));
        }
      }
      rows.emplace_back(std::move(values));
    }
    return rows;
  }

 private:
  explicit PgConnection(PGconn* conn) : conn_(conn) {}

  // Prepares `sql` once, with its parameters' types taken from the first values it is run with.
  Result<const std::string*> prepare(std::string_view sql, const std::vector<Value>& params) {
    auto it = statements_.find(std::string(sql));
    if (it != statements_.end()) return &it->second;
    std::vector<Oid> types;
    types.reserve(params.size());
    for (const Value& v : params) {
      if (std::holds_alternative<int64_t>(v)) {
        types.push_back(kInt8);
      } else if (std::holds_alternative<std::string>(v)) {
        types.push_back(kText);
      } else if (std::holds_alternative<Blob>(v)) {
        types.push_back(kBytea);
      } else {
        types.push_back(0);  // NULL: the server infers the type from where it is used
      }
    }
    std::string name = fmt::format("p{}", ++prepared_);
    g_round_trips.fetch_add(1, std::memory_order_relaxed);
    PgResult res(PQprepare(conn_, name.c_str(), std::string(sql).c_str(),
                           static_cast<int>(types.size()), types.empty() ? nullptr : types.data()));
    if (!res || PQresultStatus(res.get()) != PGRES_COMMAND_OK) {
      return fail(pgError(conn_, res.get(), sql));
    }
    auto [pos, _] = statements_.emplace(std::string(sql), std::move(name));
    return &pos->second;
  }

  Result<PgResult> run(std::string_view sql, const std::vector<Value>& params) {
    const std::string* name = PURSER_TRY_VALUE(prepare(sql, params));
    std::vector<std::string> text(params.size());
    std::vector<const char*> values(params.size(), nullptr);
    std::vector<int> lengths(params.size(), 0);
    std::vector<int> formats(params.size(), 0);
    for (size_t i = 0; i < params.size(); ++i) {
      const Value& v = params[i];
      if (const auto* n = std::get_if<int64_t>(&v)) {
        text[i] = std::to_string(*n);
      } else if (const auto* t = std::get_if<std::string>(&v)) {
        if (t->find('\0') != std::string::npos) {
          return fail(invalidArgument(fmt::format(
              "store: text parameter ${} holds a NUL byte (in \"{}\")", i + 1, excerpt(sql))));
        }
        values[i] = t->c_str();
        lengths[i] = static_cast<int>(t->size());
        continue;
      } else if (const auto* b = std::get_if<Blob>(&v)) {
        values[i] = b->bytes.data();
        lengths[i] = static_cast<int>(b->bytes.size());
        formats[i] = 1;  // binary: the bytes as they are
        continue;
      } else {
        continue;  // NULL
      }
      values[i] = text[i].c_str();
      lengths[i] = static_cast<int>(text[i].size());
    }
    g_round_trips.fetch_add(1, std::memory_order_relaxed);
    PgResult res(PQexecPrepared(conn_, name->c_str(), static_cast<int>(params.size()),
                                values.data(), lengths.data(), formats.data(), 0));
    const ExecStatusType st = res ? PQresultStatus(res.get()) : PGRES_FATAL_ERROR;
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)
      return fail(pgError(conn_, res.get(), sql));
    return res;
  }

  PGconn* conn_;
  std::unordered_map<std::string, std::string> statements_;  // SQL -> prepared name
  uint64_t prepared_ = 0;
};

Result<std::unique_ptr<PostgresStore>> PostgresStore::open(PostgresOptions options,
                                                           const Clock& clock) {
  auto writer = PURSER_TRY_VALUE(PgConnection::open(options));
  // Replicas starting together create the table once.
  PURSER_TRY(writer->raw(
      "BEGIN; SELECT pg_advisory_xact_lock(7244000001);"
      " CREATE TABLE IF NOT EXISTS schema_migrations ("
      " component TEXT NOT NULL, version BIGINT NOT NULL, name TEXT NOT NULL,"
      " checksum TEXT NOT NULL, applied_at TEXT NOT NULL, PRIMARY KEY (component, version));"
      " COMMIT"));
  return std::unique_ptr<PostgresStore>(
      new PostgresStore(std::move(options), clock, std::move(writer)));
}

PostgresStore::PostgresStore(PostgresOptions options, const Clock& clock,
                             std::unique_ptr<PgConnection> writer)
    : options_(std::move(options)),
      clock_(clock),
      writer_(std::move(writer)),
      readers_(options_.max_readers, [this] { return PgConnection::open(options_); }) {
  queue_ = std::make_unique<WriteQueue>(
      options_.max_batch, options_.max_queue,
      [this](std::vector<WriteQueue::Job>& batch) { return runBatch(batch); });
}

PostgresStore::~PostgresStore() { close(); }

void PostgresStore::close() {
  queue_->close();
  readers_.clear();
}

uint64_t PostgresStore::commitsForTest() const { return queue_->batches(); }

void PostgresStore::writeAsync(TxFn fn, std::function<void(Result<void>)> done) {
  queue_->writeAsync(std::move(fn), std::move(done));
}

Result<void> PostgresStore::write(TxFn fn) { return queue_->write(std::move(fn)); }

Result<void> PostgresStore::writeAlone(TxFn fn) {
  return queue_->write(std::move(fn), /*alone=*/true);
}

std::vector<Result<void>> PostgresStore::runBatch(std::vector<WriteQueue::Job>& batch) {
  PgConnection& db = *writer_;
  std::vector<Result<void>> results(batch.size());
  if (db.broken()) {
    if (auto r = db.reset(); !r) {
      for (auto& result : results) result = fail(r.error());
      return results;
    }
    spdlog::info("store: reconnected to PostgreSQL");
  }
  if (auto begun = db.raw("BEGIN"); !begun) {
    for (auto& result : results) result = fail(begun.error());
    return results;
  }
  bool lost = false;  // the connection broke: the transaction is gone
  for (size_t i = 0; i < batch.size() && !lost; ++i) {
    Result<void> r = db.raw("SAVEPOINT job");
    if (r) {
      try {
        r = batch[i].fn(db);
      } catch (const std::exception& e) {
        r = fail(internalError(fmt::format("store: write threw: {}", e.what())));
      }
      if (db.broken()) {
        lost = true;
        const Error e(ErrorCode::kUnavailable,
                      "store: the connection to PostgreSQL was lost; the write was not committed");
        for (size_t k = 0; k <= i; ++k) results[k] = fail(e);
        for (size_t k = i + 1; k < batch.size(); ++k) results[k] = fail(e);
        break;
      }
      if (r && db.txStatus() == PQTRANS_INERROR) {
        // The write swallowed an error of its own: what it did cannot be committed.
        r = fail(internalError("store: a statement of the write failed and was ignored"));
      }
      if (r) {
        r = db.raw("RELEASE SAVEPOINT job");
      } else {
        (void)db.raw("ROLLBACK TO SAVEPOINT job");
        (void)db.raw("RELEASE SAVEPOINT job");
      }
    }
    results[i] = std::move(r);
  }
  if (!lost) {
    auto committed = db.raw("COMMIT");
    if (!committed) {
      // A commit that failed, or whose answer was lost with the connection (its outcome is then
      // unknown to us): every write of the batch is reported failed.
      (void)db.raw("ROLLBACK");
      for (auto& result : results) {
        if (result) result = fail(committed.error());
      }
    }
  }
  return results;
}

Result<void> PostgresStore::read(TxFn fn) {
  auto conn = PURSER_TRY_VALUE(readers_.acquire());
  Result<void> r = conn->raw("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY");
  if (!r && conn->broken()) {
    // A pooled connection the server dropped (it restarted): once more on a fresh one.
    readers_.release(std::move(conn), /*broken=*/true);
    conn = PURSER_TRY_VALUE(readers_.acquire());
    r = conn->raw("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY");
  }
  if (r) {
    try {
      r = fn(*conn);
    } catch (const std::exception& e) {
      r = fail(internalError(fmt::format("store: read threw: {}", e.what())));
    }
    if (r && conn->txStatus() == PQTRANS_INERROR) {
      r = fail(internalError("store: a statement of the read failed and was ignored"));
    }
    (void)conn->raw(r ? "COMMIT" : "ROLLBACK");
  }
  const bool broken = conn->broken();
  readers_.release(std::move(conn), broken);
  return r;
}

Result<int> PostgresStore::migrate(std::string_view component,
                                   const std::vector<Migration>& migrations) {
  PURSER_TRY(checkNumbering(component, migrations));
  int count = 0;
  // Each migration in its own transaction, under an advisory lock that replicas share: the
  // first to take it applies the migration; the others then find it recorded.
  for (;;) {
    std::optional<Migration> applied_now;
    auto r = write([&](Tx& tx) -> Result<void> {
      auto& conn = static_cast<PgConnection&>(tx);
      PURSER_TRY(conn.raw("SELECT pg_advisory_xact_lock(7244000001)"));
      const Rows recorded =
          PURSER_TRY_VALUE(tx.query("SELECT version, name, checksum FROM schema_migrations WHERE "
                                    "component = $1 ORDER BY version",
                                    {std::string(component)}));
      PURSER_TRY(checkRecorded(component, migrations, recorded));
      if (recorded.size() >= migrations.size()) return {};
      const Migration& m = migrations[recorded.size()];
      auto done = conn.raw(postgresSchemaSql(m.sql));
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
      applied_now = m;
      return {};
    });
    if (!r) return fail(r.error());
    if (!applied_now) return count;
    spdlog::info("store: applied migration {} {} ({})", component, applied_now->version,
                 applied_now->name);
    ++count;
  }
}

}  // namespace purser::store
