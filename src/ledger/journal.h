// Journal: the ledger's write-ahead log. The money path appends its records here — a write()
// from the caller's own thread, no hand-off — and a background thread makes them durable and
// materialises them into the store for queries (docs/architecture.md rule 3).
//
// On disk: segment files `journal-<first sequence, 16 hex digits>.log` in one directory, each a
// run of records
//
//   u32 length | u32 CRC-32C of (sequence, payload) | u64 sequence | payload (length bytes)
//
// little-endian, sequences increasing by one. A segment is closed when it passes
// `segment_bytes`, and deleted once every record in it is in the store.
//
// Durability, like PostgreSQL's synchronous_commit:
//   kBatch   append() returns once the record is in the kernel (a process crash — kill -9 —
//            cannot lose it); the sync thread calls fdatasync every `sync_interval`, so a machine
//            crash loses at most the records of the last interval.
//   kAlways  the same, and the caller waits (whenSynced) for the fdatasync that covers its
//            record; syncs run back to back, each covering everything appended before it (group
//            commit).
// Only synced records are materialised, so the store never holds what the journal could lose.
//
// Materialising: after each sync the records it covered are applied to the store by `apply`, in
// order, in one write transaction; one batch is in flight at a time, and a batch that fails is
// tried again, in order, before anything later. `apply` must be idempotent: at open, every
// segment left in the directory is applied again from its start (records already in the store
// among them), stopping at the first record that is torn or fails its checksum — what a machine
// crash left of the unsynced tail; nothing after it was synced. Then a new segment starts, so a
// later record can never sit beside a stale one.
//
// Bounded: a record is at most kMaxRecordBytes; at most `max_unapplied` records wait for the
// store, beyond which append() refuses (kUnavailable) until it catches up. A failed fdatasync
// cannot be retried honestly (the kernel may have dropped the dirty pages), so the journal stops
// taking records: append() fails until the process restarts and replays what is on disk.
//
// Thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/result.h"
#include "store/store.h"

namespace purser::ledger {

enum class SyncMode { kBatch, kAlways };

struct JournalOptions {
  std::string dir;  // created if missing
  SyncMode sync = SyncMode::kBatch;
  Duration sync_interval = std::chrono::milliseconds(5);  // kBatch: how often it syncs
  uint64_t segment_bytes = uint64_t{16} << 20;
  size_t max_unapplied = 100'000;
  const Clock* clock = nullptr;  // for the retry's back-off; nullptr: SystemClock
  // The least time between the starts of two materialising batches (0: each as soon as the one
  // before is done). Longer, more records share a batch and fewer reach the store at all (an
  // intent settled within the interval is never written): replicas on PostgreSQL ship every
  // store.ship_interval. A reader that catches up (catchUp()) ships at once, and so does a
  // backlog of kShipAtOnce records.
  Duration apply_interval = Duration::zero();
  // whenSynced() answers once the record is in the store, not only on disk (replicas on
  // PostgreSQL with ledger.sync: always: what is acknowledged is committed there first). Its
  // waiters wait, through retries, while the store cannot be reached.
  bool ack_after_store = false;
};

class Journal {
 public:
  static constexpr size_t kHeaderBytes = 16;
  static constexpr size_t kMaxRecordBytes = size_t{1} << 20;

  // Applies records, in order, inside one of the materialiser's transactions (a batch may then
  // skip work that a later record in it undoes). Must be idempotent. `replaying`: the records
  // come from the files at open, and some of them may have been applied before, in other
  // batches.
  using Apply = std::function<Result<void>(
      store::Tx& tx, const std::vector<std::string_view>& records, bool replaying)>;
  // Told, on the store's writer thread, of the last sequence a committed batch applied.
  using Applied = std::function<void(uint64_t through)>;

  struct Replay {
    int64_t segments = 0;
    int64_t records = 0;
    int64_t dropped_bytes = 0;  // a torn or corrupt tail, left by a crash before its sync
  };

  // Replays the segments in `options.dir` into `store` (see the file comment), then starts a new
  // segment and the sync thread.
  static Result<std::unique_ptr<Journal>> open(JournalOptions options, store::Store& store,
                                               Apply apply, Applied applied = {});
  ~Journal();
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;

  const Replay& replayed() const { return replay_; }
  SyncMode mode() const { return options_.sync; }

  // Appends one record; returns its sequence once the bytes are in the kernel.
  Result<uint64_t> append(std::string_view record);

  // Runs `done` once `sequence` is on disk (with ack_after_store: in the store): at once on this
  // thread if it already is, else on the sync thread or the store's writer (it must not block).
  // With a false argument when the journal failed or closed first.
  void whenSynced(uint64_t sequence, std::function<void(bool)> done);

  // Waits until every record appended before the call is in the store (syncing at once rather
  // than at the next interval). For reads that must see the latest usage.
  Result<void> catchUp();

  // Syncs and materialises what is appended, then stops the sync thread. Later appends fail.
  void close();
  // Stops the sync thread and closes the files without syncing or materialising anything, as a
  // killed process would (what append() wrote stays in the kernel's page cache). For tests.
  void abandon();

  // The segment files now in the directory, oldest first (for tests and diagnostics).
  std::vector<std::string> segments() const;
  // The sequence of the last record synced.
  uint64_t syncedThrough() const;

 private:
  struct Segment {
    std::string path;
    int fd = -1;
    uint64_t first = 0;       // first sequence
    uint64_t last = 0;        // last sequence appended (first - 1 when empty)
    uint64_t bytes = 0;       // bytes appended
    bool dir_synced = false;  // its directory entry is on disk
  };
  struct Pending {
    uint64_t sequence;
    std::string record;
  };
  struct Waiter {
    uint64_t sequence;
    std::function<void(bool)> done;
  };

  Journal(JournalOptions options, store::Store& store, Apply apply, Applied applied);
  Result<void> replay();
  Result<void> startSegment(uint64_t first);  // mu_ held (or before the thread starts)
  void run();
  void stopThread();

  const JournalOptions options_;
  store::Store& store_;
  const Apply apply_;
  const Applied applied_;
  Replay replay_;

  mutable std::mutex mu_;
  std::condition_variable wake_;    // the sync thread: records to sync, urgency, stop
  std::condition_variable caught_;  // catchUp(): applied_through_ moved
  std::deque<std::shared_ptr<Segment>> segments_;  // oldest first; back() takes appends; mu_
  uint64_t next_ = 1;                              // the next record's sequence; mu_
  uint64_t synced_ = 0;                            // synced through; mu_
  uint64_t applied_through_ = 0;                   // in the store through; mu_
  std::deque<Pending> unapplied_;                  // synced or not, not yet in the store; mu_
  std::multimap<uint64_t, Waiter> waiters_;        // mu_
  bool in_flight_ = false;                         // a batch is being applied; mu_
  bool urgent_ = false;                            // someone waits: sync now; mu_
  bool ship_now_ = false;      // a reader catches up: materialise without waiting the interval; mu_
  MonoTime last_batch_at_{};   // when the last materialising batch started; mu_
  bool idle_ = false;          // the sync thread waits for work; mu_
  bool stopping_ = false;      // mu_
  bool failed_ = false;        // an fdatasync failed; mu_
  bool closed_ = false;        // mu_
  bool abandoned_ = false;     // abandon(): stop without syncing; mu_
  bool apply_failed_ = false;  // the last batch failed to apply; mu_
  int apply_failures_ = 0;     // consecutive failed batches, for the retry's back-off; mu_
  MonoTime retry_at_{};        // a failed batch is not tried again before this; mu_
  std::thread thread_;
};

}  // namespace purser::ledger
