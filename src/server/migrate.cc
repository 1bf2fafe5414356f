#include "server/migrate.h"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <memory>

#include "common/clock.h"
#include "common/logging.h"
#include "config/config.h"
#include "gateway/secrets.h"
#include "identity/identity_store.h"
#include "identity/sessions.h"
#include "ledger/audit.h"
#include "ledger/ledger_store.h"
#include "server/data_dir.h"
#include "server/fleet_leader.h"
#include "server/replication.h"
#include "server/startup.h"
#include "store/postgres_store.h"
#include "store/store_copy.h"
#include "store/write_queue.h"
#include "workloads/fleet_service.h"

namespace purser::server {

namespace {

namespace fs = std::filesystem;

// Every component's schema, as `purser serve` applies them. A component missing here is caught:
// its record in the SQLite store's schema_migrations, or its tables, make the copy refuse.
struct Component {
  const char* name;
  const std::vector<store::Migration>& migrations;
  bool postgres_only = false;
  // Applied once the rows are in: it reshapes tables and moves the rows they hold (as on a
  // PostgreSQL store that had them before the migration existed), which an insert into the
  // reshaped table would not do the same way.
  bool after_copy = false;
};

std::vector<Component> components() {
  return {
      {"server", serverMigrations()},
      {"identity", identity::identityMigrations()},
      {"sessions", identity::sessionMigrations()},
      {"ledger", ledger::ledgerMigrations()},
      {"audit", ledger::AuditLog::migrations()},
      {"gateway", gateway::ProviderKeyStore::migrations()},
      {"fleet", workloads::fleetMigrations()},
      // After the tables its triggers watch (server/replication.h).
      {"replicas", changeNoticeMigrations(), /*postgres_only=*/true},
      {"fleet_leader", fleetLeaderMigrations(), /*postgres_only=*/true},
      // A partition for every month the copied events span (ledger/ledger_store.h).
      {"usage_partitions", ledger::usagePartitionMigrations(), /*postgres_only=*/true,
       /*after_copy=*/true},
  };
}

// A target where a component applied after the copy already is was set up by `purser serve`:
// rows copied in now would not be placed as that migration places them.
Result<void> checkNotSetUp(store::Store& target) {
  std::vector<std::string> applied;
  PURSER_TRY(target.read([&](store::Tx& tx) -> Result<void> {
    for (const auto& r : PURSER_TRY_VALUE(
             tx.query("SELECT DISTINCT component FROM schema_migrations ORDER BY component"))) {
      applied.push_back(r.getText(0));
    }
    return {};
  }));
  for (const auto& c : components()) {
    if (c.after_copy && std::find(applied.begin(), applied.end(), c.name) != applied.end()) {
      return fail(Error(ErrorCode::kFailedPrecondition,
                        fmt::format("the PostgreSQL database was set up by purser serve already "
                                    "(its {} schema is there): purser migrate copies into an "
                                    "empty database only; give it a new one",
                                    c.name)));
    }
  }
  return {};
}

// The journal holds what the node answered and had not yet copied into purser.db when it
// stopped; a clean stop leaves no segment with anything in it.
Result<void> checkJournal(const std::string& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return {};
  int64_t segments = 0;
  uintmax_t bytes = 0;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with("journal-") || !name.ends_with(".log")) continue;
    std::error_code size_ec;
    const uintmax_t size = entry.file_size(size_ec);
    if (size_ec || size > 0) {
      ++segments;
      bytes += size_ec ? 0 : size;
    }
  }
  if (ec) {
    return fail(unavailable(fmt::format("cannot read the journal \"{}\": {}", dir, ec.message())));
  }
  if (segments > 0) {
    return fail(Error(
        ErrorCode::kFailedPrecondition,
        fmt::format("the ledger's journal \"{}\" holds {} segment(s) ({} bytes) of requests that "
                    "may not be in purser.db yet: the node was not stopped cleanly. Start `purser "
                    "serve` on this data directory once and stop it with SIGTERM (it ships its "
                    "journal into purser.db), then run purser migrate again",
                    dir, segments, bytes)));
  }
  return {};
}

// The SQLite store's schema must be the one this purser writes, version for version: a copy
// moves rows, never schema changes.
Result<void> checkSchema(store::SqliteSource& source) {
  const auto recorded = PURSER_TRY_VALUE(source.recordedMigrations());
  const auto known = components();
  for (const auto& [name, rows] : recorded) {
    const auto c = std::find_if(known.begin(), known.end(),
                                [&](const Component& k) { return k.name == name; });
    if (c == known.end() || c->postgres_only) {
      return fail(Error(ErrorCode::kFailedPrecondition,
                        fmt::format("\"{}\" has a schema component \"{}\" that this purser does "
                                    "not write in SQLite: it was written by another program or a "
                                    "newer purser; nothing was copied",
                                    source.path(), name)));
    }
    PURSER_TRY(store::checkRecorded(name, c->migrations, rows));
    if (rows.size() < c->migrations.size()) {
      return fail(Error(
          ErrorCode::kFailedPrecondition,
          fmt::format("the SQLite store's {} schema is at version {}, this purser's at {}: start "
                      "this purser's `serve` on the data directory once and stop it (it migrates "
                      "at start), then run purser migrate again",
                      name, rows.size(), c->migrations.size())));
    }
  }
  return {};
}

void printReport(const store::CopyReport& report, std::ostream& out) {
  size_t width = 5;
  for (const auto& t : report.tables) width = std::max(width, t.table.size());
  out << fmt::format("{:<{}}  {:>10}  {:>4}  {}\n", "TABLE", width, "ROWS", "SUMS", "OK");
  int64_t rows = 0;
  for (const auto& t : report.tables) {
    rows += t.target_rows;
    out << fmt::format("{:<{}}  {:>10}  {:>4}  {}\n", t.table, width, t.source_rows,
                       t.summed.size(), t.ok() ? "ok" : "MISMATCH");
  }
  for (const auto& t : report.tables) {
    for (const auto& m : t.mismatches) out << fmt::format("{}: {}\n", t.table, m);
  }
  out << fmt::format(
      "ROWS: rows in SQLite, the same count found in PostgreSQL; SUMS: integer columns (money in "
      "nanos, tokens, times) whose sums are equal on both sides.\n");
  if (report.ok()) {
    out << fmt::format("purser migrate: {} rows in {} tables copied into PostgreSQL and checked\n",
                       rows, report.tables.size());
  }
}

}  // namespace

Result<int> migrateToPostgres(const MigrateOptions& options, std::ostream& out) {
  if (options.postgres.empty()) {
    return fail(invalidArgument(
        "no PostgreSQL database to copy into: give --to postgresql://USER@HOST:5432/DB, or a "
        "--config whose store: names postgres"));
  }
  std::error_code ec;
  if (!fs::is_directory(options.data_dir, ec)) {
    return fail(Error(ErrorCode::kNotFound,
                      fmt::format("there is no data directory \"{}\" (--data: the directory the "
                                  "SQLite node ran on)",
                                  options.data_dir)));
  }
  if (!fs::exists(fs::path(options.data_dir) / "purser.db", ec)) {
    return fail(Error(ErrorCode::kNotFound,
                      fmt::format("the data directory \"{}\" holds no SQLite store (purser.db)",
                                  options.data_dir)));
  }
  // The node must be stopped; holding its lock also keeps it from starting until this is done.
  auto dir = DataDir::open(options.data_dir);
  if (!dir) {
    Error e = dir.error();
    if (e.code == ErrorCode::kFailedPrecondition) {
      e.message += ": stop it first (purser migrate copies a stopped node); nothing was copied";
    }
    return fail(e);
  }
  PURSER_TRY(checkJournal((*dir)->file("journal")));
  auto source = PURSER_TRY_VALUE(store::SqliteSource::open((*dir)->file("purser.db")));
  PURSER_TRY(checkSchema(*source));
  const auto tables = PURSER_TRY_VALUE(source->tables());

  auto target = PURSER_TRY_VALUE(store::PostgresStore::open(
      {.url = options.postgres, .max_readers = 2}, SystemClock::instance()));
  PURSER_TRY(store::checkTargetEmpty(*target, tables));
  PURSER_TRY(checkNotSetUp(*target));
  for (const auto& c : components()) {
    if (!c.after_copy) PURSER_TRY(target->migrate(c.name, c.migrations));
  }
  const store::CopyReport copied =
      PURSER_TRY_VALUE(store::copyStore(*source, *target, {.batch_rows = options.batch_rows}));
  if (!copied.ok()) {
    printReport(copied, out);
    out << "purser migrate: the copy did not check out; nothing was kept in PostgreSQL\n";
    return 1;
  }
  for (const auto& c : components()) {
    if (c.after_copy) PURSER_TRY(target->migrate(c.name, c.migrations));
  }
  // As the ledger does at every start on PostgreSQL (Meter::open).
  PURSER_TRY(ledger::ensureUsagePartitions(*target, SystemClock::instance().now()));
  // Checked again as the replicas will find it, rows moved into partitions and all.
  const store::CopyReport report = PURSER_TRY_VALUE(store::checkCopy(*source, *target));
  target->close();
  printReport(report, out);
  if (!report.ok()) {
    out << "purser migrate: the copy checked out, but not after the schema steps that follow "
           "it; look into the PostgreSQL database before serving from it\n";
    return 1;
  }
  out << fmt::format(
      "Next: start the replicas with store: {{postgres: ...}}, each with this node's keys: the\n"
      "PURSER_MASTER_KEY and PURSER_AUDIT_KEY it ran with, else the contents of\n"
      "{} and {} (docs/operations.md).\n",
      (*dir)->file("master.key"), (*dir)->file("audit.key"));
  return 0;
}

void registerMigrateCommand(CLI::App& root, int& exit_code) {
  struct Options {
    std::string config;
    std::string data;
    std::string to;
  };
  auto opts = std::make_shared<Options>();
  CLI::App* cmd = root.add_subcommand(
      "migrate",
      "Copy a stopped node's SQLite store into an empty PostgreSQL database, for replicas, and "
      "check the copy");
  cmd->footer(
      "Applies every component's schema in PostgreSQL as `purser serve` does, copies every table "
      "in one transaction, and prints each table's row count and the integer columns (money, "
      "tokens, times) whose sums match on both sides; any difference keeps nothing and exits 1.\n"
      "Refuses, changing nothing, while a `purser serve` uses the data directory, when its "
      "journal holds requests not yet in purser.db (start and stop the node once), or when the "
      "PostgreSQL database already holds Purser data.");
  cmd->add_option("--to", opts->to,
                  "The PostgreSQL database to copy into, a libpq connection string "
                  "(postgresql://USER@HOST:5432/DB); default: store.postgres from --config");
  cmd->add_option("-c,--config", opts->config,
                  "Configuration file (YAML): data_dir and store.postgres are read from it")
      ->check(CLI::ExistingFile);
  cmd->add_option("--data,--data-dir", opts->data,
                  "The SQLite node's data directory (replaces data_dir from the file; default "
                  "./var)");
  cmd->callback([opts, &exit_code] {
    MigrateOptions m;
    m.data_dir = "./var";
    LogOptions log;
    if (!opts->config.empty()) {
      config::Overrides overrides;
      if (!opts->data.empty()) overrides.data_dir = opts->data;
      auto cfg = config::loadConfig(opts->config, overrides);
      if (!cfg) {
        std::cerr << "purser: " << cfg.error().toString() << "\n";
        exit_code = 2;
        return;
      }
      m.data_dir = cfg->data_dir;
      if (cfg->store.driver == "postgres") m.postgres = cfg->store.postgres;
      log = cfg->log;
    } else if (!opts->data.empty()) {
      m.data_dir = opts->data;
    }
    if (!opts->to.empty()) m.postgres = opts->to;
    if (auto logging = setupLogging(log); !logging) {
      std::cerr << "purser: " << logging.error().toString() << "\n";
      exit_code = 2;
      return;
    }
    auto result = migrateToPostgres(m, std::cout);
    if (!result) {
      std::cerr << "purser migrate: " << result.error().toString() << "\n";
      exit_code = 1;
      return;
    }
    exit_code = *result;
  });
}

}  // namespace purser::server
