#include "ledger/journal.h"

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>

#include "common/crc32c.h"

namespace purser::ledger {

namespace {

namespace fs = std::filesystem;

constexpr size_t kReplayBatch = 1000;  // records per transaction while replaying
constexpr auto kRetryAfter = std::chrono::milliseconds(100);  // doubling while it keeps failing
// A backlog this long is materialised without waiting for apply_interval.
constexpr size_t kShipAtOnce = 4096;
constexpr auto kRetryAfterMax = std::chrono::seconds(5);
constexpr auto kCatchUpLimit = std::chrono::seconds(30);

void putU32(char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>(v >> (8 * i));
}
void putU64(char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>(v >> (8 * i));
}
uint32_t getU32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}
uint64_t getU64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

uint32_t recordCrc(const char* sequence_bytes, std::string_view payload) {
  return crc32c(payload, crc32c(std::string_view(sequence_bytes, 8)));
}

std::string errnoText(int e) { return std::strerror(e); }

// The sequence a segment's name gives, or nothing for a file that is not a segment.
std::optional<uint64_t> segmentFirst(const std::string& name) {
  constexpr std::string_view kPrefix = "journal-";
  constexpr std::string_view kSuffix = ".log";
  if (name.size() != kPrefix.size() + 16 + kSuffix.size() || !name.starts_with(kPrefix) ||
      !name.ends_with(kSuffix)) {
    return std::nullopt;
  }
  uint64_t v = 0;
  for (char ch : std::string_view(name).substr(kPrefix.size(), 16)) {
    int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
    if (d < 0) return std::nullopt;
    v = (v << 4) | static_cast<uint64_t>(d);
  }
  return v;
}

Result<void> syncDirectory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    return fail(internalError(
        fmt::format("cannot open the journal directory \"{}\": {}", dir, errnoText(errno))));
  }
  const int rc = ::fsync(fd);
  const int e = errno;
  ::close(fd);
  if (rc != 0) {
    return fail(internalError(
        fmt::format("cannot sync the journal directory \"{}\": {}", dir, errnoText(e))));
  }
  return {};
}

}  // namespace

Journal::Journal(JournalOptions options, store::Store& store, Apply apply, Applied applied)
    : options_(std::move(options)),
      store_(store),
      apply_(std::move(apply)),
      applied_(std::move(applied)) {}

Result<std::unique_ptr<Journal>> Journal::open(JournalOptions options, store::Store& store,
                                               Apply apply, Applied applied) {
  if (options.dir.empty()) return fail(invalidArgument("the ledger journal needs a directory"));
  if (options.segment_bytes < 4096) options.segment_bytes = 4096;
  if (options.max_unapplied == 0) options.max_unapplied = 1;
  std::error_code ec;
  fs::create_directories(options.dir, ec);
  if (ec) {
    return fail(internalError(
        fmt::format("cannot create the journal directory \"{}\": {}", options.dir, ec.message())));
  }
  std::unique_ptr<Journal> j(
      new Journal(std::move(options), store, std::move(apply), std::move(applied)));
  PURSER_TRY(j->replay());
  PURSER_TRY(j->startSegment(j->next_));
  j->thread_ = std::thread([raw = j.get()] { raw->run(); });
  return j;
}

Journal::~Journal() { close(); }

Result<void> Journal::replay() {
  std::vector<std::pair<uint64_t, std::string>> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(options_.dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (auto first = segmentFirst(name)) {
      found.emplace_back(*first, entry.path().string());
    } else {
      spdlog::warn("ledger journal: ignoring \"{}\", which is not a journal segment", name);
    }
  }
  if (ec) {
    return fail(internalError(
        fmt::format("cannot list the journal directory \"{}\": {}", options_.dir, ec.message())));
  }
  std::sort(found.begin(), found.end());
  uint64_t last = 0;  // the last sequence applied
  bool cut = false;   // a torn or corrupt record was met: nothing after it was synced
  std::vector<std::string> batch;
  auto flush = [&]() -> Result<void> {
    if (batch.empty()) return {};
    auto r = store_.write([&](store::Tx& tx) -> Result<void> {
      const std::vector<std::string_view> records(batch.begin(), batch.end());
      return apply_(tx, records, /*replaying=*/true);
    });
    if (!r) {
      return fail(Error(r.error().code,
                        "cannot replay the ledger journal into the store: " + r.error().message));
    }
    batch.clear();
    return {};
  };
  for (const auto& [first, path] : found) {
    ++replay_.segments;
    std::ifstream in(path, std::ios::binary);
    if (!in) return fail(internalError(fmt::format("cannot read journal segment \"{}\"", path)));
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    next_ = std::max(next_, first + 1);
    size_t pos = 0;
    while (!cut && pos + kHeaderBytes <= bytes.size()) {
      const char* h = bytes.data() + pos;
      const uint32_t length = getU32(h);
      const uint32_t crc = getU32(h + 4);
      const uint64_t sequence = getU64(h + 8);
      if (length == 0 && crc == 0 && sequence == 0) break;  // zeros: the end
      if (length > kMaxRecordBytes || pos + kHeaderBytes + length > bytes.size() ||
          sequence <= last) {
        cut = true;
        break;
      }
      const std::string_view payload(h + kHeaderBytes, length);
      if (recordCrc(h + 8, payload) != crc) {
        cut = true;
        break;
      }
      batch.emplace_back(payload);
      last = sequence;
      ++replay_.records;
      pos += kHeaderBytes + length;
      if (batch.size() >= kReplayBatch) PURSER_TRY(flush());
    }
    if (pos < bytes.size()) {
      cut = true;  // anything after the last good record, zeros included, ends the replay
      const bool zeros = std::all_of(bytes.begin() + static_cast<std::ptrdiff_t>(pos), bytes.end(),
                                     [](char c) { return c == 0; });
      if (!zeros) {
        replay_.dropped_bytes += static_cast<int64_t>(bytes.size() - pos);
        spdlog::warn(
            "ledger journal: {} byte(s) at the end of \"{}\" (from offset {}) are torn or fail "
            "their checksum: a crash cut them off before they were synced; dropped",
            bytes.size() - pos, path, pos);
      }
    }
  }
  PURSER_TRY(flush());
  next_ = std::max(next_, last + 1);
  synced_ = next_ - 1;
  applied_through_ = next_ - 1;
  // Everything readable is in the store; the segments go, and the next one starts afresh.
  for (const auto& [first, path] : found) {
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      return fail(internalError(fmt::format("cannot remove replayed journal segment \"{}\": {}",
                                            path, errnoText(errno))));
    }
  }
  if (!found.empty()) {
    PURSER_TRY(syncDirectory(options_.dir));
    if (replay_.records > 0) {
      spdlog::info("ledger journal: replayed {} record(s) from {} segment(s)", replay_.records,
                   replay_.segments);
    }
  }
  return {};
}

Result<void> Journal::startSegment(uint64_t first) {
  auto seg = std::make_shared<Segment>();
  seg->path = (fs::path(options_.dir) / fmt::format("journal-{:016x}.log", first)).string();
  seg->first = first;
  seg->last = first - 1;
  seg->fd = ::open(seg->path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (seg->fd < 0) {
    return fail(unavailable(
        fmt::format("cannot create journal segment \"{}\": {}", seg->path, errnoText(errno))));
  }
  segments_.push_back(std::move(seg));
  return {};
}

Result<uint64_t> Journal::append(std::string_view record) {
  if (record.size() > kMaxRecordBytes) {
    return fail(invalidArgument(fmt::format("a ledger record of {} bytes is over the limit of {}",
                                            record.size(), kMaxRecordBytes)));
  }
  thread_local std::string frame;
  std::unique_lock lock(mu_);
  if (failed_) {
    return fail(unavailable("the ledger journal could not be synced to disk; restart the server"));
  }
  if (closed_ || stopping_) return fail(unavailable("the ledger is shutting down"));
  if (unapplied_.size() >= options_.max_unapplied) {
    return fail(unavailable("the ledger's store is behind its journal; try again shortly"));
  }
  Segment* seg = segments_.back().get();
  if (seg->bytes > 0 && seg->bytes + kHeaderBytes + record.size() > options_.segment_bytes) {
    PURSER_TRY(startSegment(next_));
    seg = segments_.back().get();
  }
  const uint64_t sequence = next_;
  frame.resize(kHeaderBytes + record.size());
  putU32(frame.data(), static_cast<uint32_t>(record.size()));
  putU64(frame.data() + 8, sequence);
  putU32(frame.data() + 4, recordCrc(frame.data() + 8, record));
  if (!record.empty()) std::memcpy(frame.data() + kHeaderBytes, record.data(), record.size());
  size_t done = 0;
  while (done < frame.size()) {
    const ssize_t n = ::pwrite(seg->fd, frame.data() + done, frame.size() - done,
                               static_cast<off_t>(seg->bytes + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      // Nothing is counted: the next record is written over whatever part of this one landed.
      const int e = n < 0 ? errno : EIO;
      spdlog::error("ledger journal: cannot write to \"{}\": {}", seg->path, errnoText(e));
      return fail(unavailable("the ledger could not record this; try again"));
    }
    done += static_cast<size_t>(n);
  }
  seg->bytes += frame.size();
  seg->last = sequence;
  ++next_;
  unapplied_.push_back({sequence, std::string(record)});
  // The sync thread is woken only when it sleeps with nothing to do, or when every record is
  // waited for (kAlways): in kBatch a wake-up per record would cost a context switch each, for a
  // thread that is going to wait out its interval anyway.
  const bool wake = idle_ || options_.sync == SyncMode::kAlways;
  lock.unlock();
  if (wake) wake_.notify_one();
  return sequence;
}

void Journal::whenSynced(uint64_t sequence, std::function<void(bool)> done) {
  std::unique_lock lock(mu_);
  if (sequence <= (options_.ack_after_store ? applied_through_ : synced_)) {
    lock.unlock();
    done(true);
    return;
  }
  if (failed_ || closed_) {
    lock.unlock();
    done(false);
    return;
  }
  waiters_.emplace(sequence, Waiter{sequence, std::move(done)});
  lock.unlock();
  wake_.notify_one();
}

Result<void> Journal::catchUp() {
  std::unique_lock lock(mu_);
  const uint64_t target = next_ - 1;
  if (applied_through_ >= target) return {};
  if (closed_) return fail(unavailable("the ledger is shut down"));
  urgent_ = true;
  ship_now_ = true;
  wake_.notify_one();
  const bool caught = caught_.wait_for(
      lock, kCatchUpLimit, [&] { return applied_through_ >= target || failed_ || closed_; });
  if (applied_through_ >= target) return {};
  if (failed_) {
    return fail(unavailable("the ledger journal could not be synced to disk; restart the server"));
  }
  if (!caught) return fail(unavailable("the ledger's store is behind its journal; try again"));
  return fail(unavailable("the ledger is shut down"));
}

void Journal::run() {
  std::unique_lock lock(mu_);
  const Clock& clock = options_.clock != nullptr ? *options_.clock : SystemClock::instance();
  while (true) {
    // After a failed batch, the retry waits out its back-off; syncing does not.
    auto backing_off = [&] { return apply_failed_ && clock.monotonic() < retry_at_; };
    // How long the next batch waits for more records to join it (zero: it may start now).
    auto pacing = [&]() -> Duration {
      if (options_.apply_interval <= Duration::zero() || stopping_ || ship_now_ ||
          unapplied_.size() >= kShipAtOnce || (options_.ack_after_store && !waiters_.empty())) {
        return Duration::zero();
      }
      const MonoTime now = clock.monotonic();
      const MonoTime next = last_batch_at_ + options_.apply_interval;
      return next > now ? std::chrono::duration_cast<Duration>(next - now) : Duration::zero();
    };
    auto synced_work = [&] {
      return !in_flight_ && !unapplied_.empty() && unapplied_.front().sequence <= synced_ &&
             (stopping_ || !backing_off());
    };
    auto materialisable = [&] { return synced_work() && pacing() <= Duration::zero(); };
    auto wanted = [&] {
      return stopping_ || urgent_ || (!failed_ && next_ - 1 > synced_) || materialisable();
    };
    idle_ = true;
    if (!in_flight_ && backing_off()) {
      wake_.wait_for(lock, retry_at_ - clock.monotonic(), wanted);
      if (!wanted()) continue;  // the back-off is over: look again
    } else if (synced_work() && pacing() > Duration::zero()) {
      wake_.wait_for(lock, pacing(), wanted);
      if (!wanted()) continue;  // the interval is over: look again
    } else {
      wake_.wait(lock, wanted);
    }
    idle_ = false;
    if (abandoned_) break;
    if (options_.sync == SyncMode::kBatch && !stopping_ && !urgent_ && !failed_ &&
        next_ - 1 > synced_) {
      // Let the interval's records gather into one sync.
      wake_.wait_for(lock, options_.sync_interval, [&] { return stopping_ || urgent_; });
      if (abandoned_) break;
    }
    urgent_ = false;

    // Sync what is appended: every segment holding a record past synced_.
    std::vector<Waiter> ready;
    const uint64_t target = next_ - 1;
    if (!failed_ && target > synced_) {
      std::vector<std::shared_ptr<Segment>> dirty;
      for (const auto& s : segments_) {
        if (s->last > synced_ || !s->dir_synced) dirty.push_back(s);
      }
      lock.unlock();
      bool ok = true;
      bool dir = false;
      for (const auto& s : dirty) {
        if (::fdatasync(s->fd) != 0) {
          spdlog::critical("ledger journal: fdatasync of \"{}\" failed: {}", s->path,
                           errnoText(errno));
          ok = false;
        }
        dir = dir || !s->dir_synced;
      }
      if (ok && dir) {
        auto r = syncDirectory(options_.dir);
        if (!r) {
          spdlog::critical("ledger journal: {}", r.error().message);
          ok = false;
        }
      }
      lock.lock();
      if (!ok) {
        // What the kernel failed to write may be gone from its cache: a retry could report
        // success for lost bytes. Stop taking money; a restart replays what is on disk.
        failed_ = true;
        spdlog::critical(
            "ledger journal: records can no longer be made durable; new requests are refused "
            "until the server restarts");
      } else {
        for (const auto& s : dirty) s->dir_synced = true;
        synced_ = target;
      }
    }
    const uint64_t acked = options_.ack_after_store ? applied_through_ : synced_;
    for (auto it = waiters_.begin(); it != waiters_.end() && (failed_ || it->first <= acked);) {
      ready.push_back(std::move(it->second));
      it = waiters_.erase(it);
    }

    // Materialise what is synced, one batch at a time, in order.
    std::shared_ptr<std::vector<Pending>> batch;
    if (materialisable()) {
      batch = std::make_shared<std::vector<Pending>>();
      while (!unapplied_.empty() && unapplied_.front().sequence <= synced_) {
        batch->push_back(std::move(unapplied_.front()));
        unapplied_.pop_front();
      }
      in_flight_ = true;
      ship_now_ = false;
      last_batch_at_ = clock.monotonic();
    }
    // Segments wholly in the store go (never the one taking appends).
    std::vector<std::shared_ptr<Segment>> gone;
    while (segments_.size() > 1 && segments_.front()->last <= applied_through_ &&
           segments_.front()->last <= synced_) {
      gone.push_back(std::move(segments_.front()));
      segments_.pop_front();
    }
    const bool stop_now =
        stopping_ &&
        (failed_ || (next_ - 1 == synced_ && unapplied_.empty() && !in_flight_ && !batch) ||
         apply_failed_);
    lock.unlock();
    for (auto& w : ready) w.done(!failed_ || w.sequence <= acked);
    for (const auto& s : gone) {
      ::close(s->fd);
      if (::unlink(s->path.c_str()) != 0) {
        spdlog::warn("ledger journal: cannot remove applied segment \"{}\": {}", s->path,
                     errnoText(errno));
      }
    }
    if (batch) {
      store_.writeAsync(
          [this, batch](store::Tx& tx) -> Result<void> {
            std::vector<std::string_view> records;
            records.reserve(batch->size());
            for (const auto& p : *batch) records.emplace_back(p.record);
            return apply_(tx, records, /*replaying=*/false);
          },
          [this, batch, clock = &clock](Result<void> r) {
            const uint64_t through = batch->back().sequence;
            // The owner is told before the batch stops counting as in flight: close() and
            // abandon() wait for in_flight_ to clear and their caller may free the owner (and
            // this journal) right after, so nothing here may touch either once it is cleared.
            if (r) {
              if (applied_) applied_(through);
              if (options_.ack_after_store) {
                // Waiters for these records are answered now that the store has them.
                std::vector<Waiter> ready;
                {
                  std::lock_guard g(mu_);
                  for (auto it = waiters_.begin(); it != waiters_.end() && it->first <= through;) {
                    ready.push_back(std::move(it->second));
                    it = waiters_.erase(it);
                  }
                }
                for (auto& w : ready) w.done(true);
              }
            }
            std::lock_guard g(mu_);
            in_flight_ = false;
            if (r) {
              applied_through_ = through;
              apply_failed_ = false;
              apply_failures_ = 0;
            } else {
              // Back to the front, in order, to be tried again before anything later.
              for (auto it = batch->rbegin(); it != batch->rend(); ++it) {
                unapplied_.push_front(std::move(*it));
              }
              apply_failed_ = true;
              ++apply_failures_;
              const auto wait = std::min<std::chrono::milliseconds>(
                  kRetryAfter * (int64_t{1} << std::min(apply_failures_ - 1, 10)), kRetryAfterMax);
              retry_at_ = clock->monotonic() + wait;
              // Logged at the first failure and then as the back-off grows, at most every 5 s.
              if (apply_failures_ <= 7 || apply_failures_ % 10 == 0) {
                spdlog::error(
                    "ledger journal: materialising into the store failed ({} time(s) in a row): "
                    "{}; retrying in {} ms",
                    apply_failures_, r.error().message, wait.count());
              }
            }
            caught_.notify_all();
            wake_.notify_one();
          });
    }
    lock.lock();
    if (stop_now) break;
    if (stopping_ && in_flight_) {
      // Wait for the batch in flight before deciding whether anything is left.
      caught_.wait(lock, [&] { return !in_flight_ || abandoned_; });
      if (abandoned_) break;
      if (apply_failed_) break;
    }
  }
  // Whoever still waits for a sync is told it will not come.
  std::vector<Waiter> left;
  for (auto& [_, w] : waiters_) left.push_back(std::move(w));
  waiters_.clear();
  const uint64_t acked = options_.ack_after_store ? applied_through_ : synced_;
  lock.unlock();
  for (auto& w : left) w.done(w.sequence <= acked);
  caught_.notify_all();
}

void Journal::stopThread() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  caught_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Journal::close() {
  {
    std::lock_guard lock(mu_);
    if (closed_) return;
  }
  stopThread();
  // The thread may have left a batch in flight only when abandoned; wait it out regardless.
  std::unique_lock lock(mu_);
  caught_.wait(lock, [&] { return !in_flight_; });
  const bool clean = !failed_ && unapplied_.empty() && next_ - 1 == synced_;
  closed_ = true;
  auto segments = std::move(segments_);
  segments_.clear();
  lock.unlock();
  for (const auto& s : segments) {
    ::close(s->fd);
    // Everything in the store: the next start has nothing to replay.
    if (clean && ::unlink(s->path.c_str()) != 0) {
      spdlog::warn("ledger journal: cannot remove \"{}\": {}", s->path, errnoText(errno));
    }
  }
  if (clean && !segments.empty()) (void)syncDirectory(options_.dir);
  caught_.notify_all();
}

void Journal::abandon() {
  {
    std::lock_guard lock(mu_);
    if (closed_) return;
    abandoned_ = true;
  }
  stopThread();
  std::unique_lock lock(mu_);
  caught_.wait(lock, [&] { return !in_flight_; });
  closed_ = true;
  for (const auto& s : segments_) ::close(s->fd);
  segments_.clear();
  unapplied_.clear();
}

std::vector<std::string> Journal::segments() const {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(options_.dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (segmentFirst(name)) out.push_back(entry.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

uint64_t Journal::syncedThrough() const {
  std::lock_guard lock(mu_);
  return synced_;
}

}  // namespace purser::ledger
