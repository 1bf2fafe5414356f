#include "gpushare/share_region.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iterator>

namespace purser::gpushare {

namespace {

constexpr uint64_t kMagic = 0x5055525345524753ull;  // "PURSERGS"
constexpr uint32_t kLayout = 1;
// The most a bucket holds: this long at its rate, so that a pod idle for a while cannot then run
// unthrottled for long.
constexpr double kBurstSeconds = 0.02;

bool alive(const ProcessSlot& s) {
  if (s.pid <= 0) return false;
  if (::kill(s.pid, 0) != 0 && errno == ESRCH) return false;
  if (s.start_ticks != 0) {
    const uint64_t now = processStartTicks(s.pid);
    if (now != 0 && now != s.start_ticks) return false;  // the pid was reused
  }
  return true;
}

}  // namespace

uint64_t processStartTicks(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[1024];
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  const char* p = std::strrchr(buf, ')');
  if (p == nullptr) return 0;
  // After the command's ")": state is field 3, starttime field 22.
  int field = 2;
  for (; *p != '\0' && field < 22; ++p) {
    if (*p == ' ') ++field;
  }
  uint64_t v = 0;
  for (; *p >= '0' && *p <= '9'; ++p) v = v * 10 + static_cast<uint64_t>(*p - '0');
  return v;
}

bool ShareRegion::open(const std::string& path, const Limits& limits, std::string* error) {
  int fd = -1;
  if (!path.empty()) {
    fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
      *error = "cannot open the shared region " + path + ": " + std::strerror(errno);
      return false;
    }
    // Where the path is in a directory others can write (a node's /tmp), the file must be this
    // account's own and writable by no one else: a region another user planted could raise or
    // read the pod's counts, or hold its lock for ever. Checked before waiting on that lock.
    struct stat own {};
    if (::fstat(fd, &own) != 0 || !S_ISREG(own.st_mode) || own.st_uid != ::geteuid() ||
        (own.st_mode & 022) != 0) {
      *error = "the shared region " + path +
               " is not a file of this account's own that only it may write";
      ::close(fd);
      return false;
    }
    while (::flock(fd, LOCK_EX) != 0) {
      if (errno != EINTR) {
        *error = "cannot lock the shared region " + path + ": " + std::strerror(errno);
        ::close(fd);
        return false;
      }
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0 || (st.st_size != 0 && st.st_size != sizeof(RegionData))) {
      *error = "the shared region " + path + " is not one this shim made (size " +
               std::to_string(st.st_size) + ")";
      ::close(fd);
      return false;
    }
    if (st.st_size == 0 && ::ftruncate(fd, sizeof(RegionData)) != 0) {
      *error = "cannot size the shared region " + path + ": " + std::strerror(errno);
      ::close(fd);
      return false;
    }
  }
  void* p = ::mmap(nullptr, sizeof(RegionData), PROT_READ | PROT_WRITE,
                   path.empty() ? MAP_SHARED | MAP_ANONYMOUS : MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    *error = "cannot map the shared region: " + std::string(std::strerror(errno));
    if (fd >= 0) ::close(fd);
    return false;
  }
  auto* d = static_cast<RegionData*>(p);
  if (d->magic == 0) {
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(&d->mu, &a);
    pthread_mutexattr_destroy(&a);
    d->layout = kLayout;
    d->size = sizeof(RegionData);
    std::copy(std::begin(limits.memory), std::end(limits.memory), d->limit);
    __atomic_store_n(&d->magic, kMagic, __ATOMIC_RELEASE);
  } else if (d->magic != kMagic || d->layout != kLayout || d->size != sizeof(RegionData)) {
    *error = "the shared region " + path + " is of another layout";
    ::munmap(p, sizeof(RegionData));
    if (fd >= 0) ::close(fd);
    return false;
  } else {
    // A process of the pod may bring a smaller cap, never a larger one.
    for (int i = 0; i < kMaxDevices; ++i) {
      const uint64_t mine = limits.memory[i];
      if (mine != 0 && (d->limit[i] == 0 || mine < d->limit[i])) {
        __atomic_store_n(&d->limit[i], mine, __ATOMIC_RELAXED);
      }
    }
  }
  if (fd >= 0) {
    // The mapping holds the open file, so closing would not drop the lock: drop it first.
    ::flock(fd, LOCK_UN);
    ::close(fd);
  }
  data_ = d;
  slot_ = -1;
  pid_ = ::getpid();
  reclaimDead();
  return true;
}

bool ShareRegion::lock() {
  if (data_ == nullptr) return false;
  int rc;
  while ((rc = pthread_mutex_lock(&data_->mu)) == EINTR) {
  }
  if (rc == EOWNERDEAD) {
    // The holder died mid-update: its slot goes with it, and the totals are made again.
    reclaimDeadLocked();
    recount();
    pthread_mutex_consistent(&data_->mu);
    return true;
  }
  return rc == 0;
}

void ShareRegion::unlock() { pthread_mutex_unlock(&data_->mu); }

void ShareRegion::recount() {
  for (int d = 0; d < kMaxDevices; ++d) {
    uint64_t sum = 0;
    for (const ProcessSlot& s : data_->slots) {
      if (s.pid != 0) sum += s.used[d];
    }
    data_->total[d] = sum;
  }
}

bool ShareRegion::claimSlot() {
  const pid_t me = pid_;
  if (slot_ >= 0 && data_->slots[slot_].pid == me) return true;
  int free_slot = -1;
  for (int i = 0; i < kMaxProcesses; ++i) {
    ProcessSlot& s = data_->slots[i];
    if (s.pid == me) {
      // A slot under our pid from a process that died before us: its bytes are not ours.
      for (int d = 0; d < kMaxDevices; ++d) data_->total[d] -= s.used[d];
      std::memset(s.used, 0, sizeof s.used);
      s.start_ticks = processStartTicks(me);
      slot_ = i;
      return true;
    }
    if (s.pid == 0 && free_slot < 0) free_slot = i;
  }
  if (free_slot < 0 && reclaimDeadLocked() > 0) {
    for (int i = 0; i < kMaxProcesses && free_slot < 0; ++i) {
      if (data_->slots[i].pid == 0) free_slot = i;
    }
  }
  if (free_slot < 0) return false;
  ProcessSlot& s = data_->slots[free_slot];
  std::memset(s.used, 0, sizeof s.used);
  s.start_ticks = processStartTicks(me);
  s.pid = me;
  slot_ = free_slot;
  return true;
}

int ShareRegion::reclaimDeadLocked() {
  int freed = 0;
  const pid_t me = pid_;
  for (ProcessSlot& s : data_->slots) {
    if (s.pid == 0 || s.pid == me || alive(s)) continue;
    for (int d = 0; d < kMaxDevices; ++d) data_->total[d] -= s.used[d];
    std::memset(s.used, 0, sizeof s.used);
    s.pid = 0;
    ++freed;
  }
  return freed;
}

int ShareRegion::reclaimDead() {
  if (!lock()) return 0;
  const int n = reclaimDeadLocked();
  unlock();
  return n;
}

bool ShareRegion::reserve(int device, uint64_t bytes) {
  if (device < 0 || device >= kMaxDevices || !lock()) return false;
  bool ok = claimSlot();
  if (ok) {
    const uint64_t cap = data_->limit[device];
    auto fits = [&] { return cap == 0 || (bytes <= cap && data_->total[device] <= cap - bytes); };
    ok = fits() || (reclaimDeadLocked() > 0 && fits());
    if (ok) {
      data_->slots[slot_].used[device] += bytes;
      data_->total[device] += bytes;
    }
  }
  unlock();
  return ok;
}

void ShareRegion::release(int device, uint64_t bytes) {
  if (device < 0 || device >= kMaxDevices || !lock()) return;
  if (claimSlot()) {
    uint64_t& mine = data_->slots[slot_].used[device];
    const uint64_t n = std::min(bytes, mine);
    mine -= n;
    data_->total[device] -= n;
  }
  unlock();
}

uint64_t ShareRegion::used(int device) {
  if (device < 0 || device >= kMaxDevices || !lock()) return 0;
  const uint64_t n = data_->total[device];
  unlock();
  return n;
}

int ShareRegion::pids(int32_t* out, int max) {
  if (!lock()) return 0;
  int n = 0;
  for (const ProcessSlot& s : data_->slots) {
    if (s.pid != 0 && n < max) out[n++] = s.pid;
  }
  unlock();
  return n;
}

uint64_t ShareRegion::take(int device, uint64_t cost, uint64_t now_ns) {
  if (device < 0 || device >= kMaxDevices || !lock()) return 0;
  ComputeBucket& b = data_->bucket[device];
  uint64_t wait = 0;
  if (b.rate_milli <= 0) {
    b.launched += cost;  // not measured yet: let it run, and count it
  } else {
    const double rate = static_cast<double>(b.rate_milli);  // milli-units per second
    if (b.refilled_ns != 0 && now_ns > b.refilled_ns) {
      const double add = static_cast<double>(now_ns - b.refilled_ns) * rate / 1e9;
      const double burst = std::max(rate * kBurstSeconds, 1000.0);
      b.tokens = static_cast<int64_t>(std::min(static_cast<double>(b.tokens) + add, burst));
    }
    if (b.refilled_ns == 0 || now_ns > b.refilled_ns) b.refilled_ns = now_ns;
    if (b.tokens >= 0) {
      b.tokens -= static_cast<int64_t>(cost * 1000);
      b.launched += cost;
    } else {
      wait = static_cast<uint64_t>(static_cast<double>(-b.tokens) * 1e9 / rate) + 1000;
    }
  }
  unlock();
  return wait;
}

ShareRegion::Turn ShareRegion::claimTick(int device, uint64_t now_ns, uint64_t period_ns,
                                         TickClaim* claim) {
  if (device < 0 || device >= kMaxDevices || !lock()) return Turn::kNone;
  claimSlot();  // a process that launches is one of the pod's, whose samples count
  ComputeBucket& b = data_->bucket[device];
  Turn turn = Turn::kNone;
  // Until the first rate is set launches run freely: look sooner.
  if (b.rate_milli <= 0) period_ns /= 5;
  if (b.tick_ns == 0 || now_ns < b.tick_ns || now_ns - b.tick_ns >= period_ns) {
    turn = b.tick_ns == 0 || now_ns < b.tick_ns ? Turn::kBaseline : Turn::kTune;
    claim->rate_milli = b.rate_milli;
    claim->launched = b.launched - b.tick_launched;
    claim->window_ns = turn == Turn::kTune ? now_ns - b.tick_ns : 0;
    claim->nvml_seen_us = b.nvml_seen_us;
    claim->npids = 0;
    for (const ProcessSlot& s : data_->slots) {
      if (s.pid != 0 && claim->npids < static_cast<int>(std::size(claim->pids))) {
        claim->pids[claim->npids++] = s.pid;
      }
    }
    b.tick_ns = now_ns;
    b.tick_launched = b.launched;
  }
  unlock();
  return turn;
}

void ShareRegion::finishTick(int device, const TickClaim& claim, int64_t rate_milli) {
  if (device < 0 || device >= kMaxDevices || !lock()) return;
  ComputeBucket& b = data_->bucket[device];
  if (b.rate_milli <= 0 && rate_milli > 0) {
    b.tokens = 0;  // throttling starts now, with an empty bucket
    b.refilled_ns = 0;
  }
  b.rate_milli = rate_milli;
  if (claim.nvml_seen_us > b.nvml_seen_us) b.nvml_seen_us = claim.nvml_seen_us;
  unlock();
}

void ShareRegion::charge(int device, uint64_t bytes) {
  if (device < 0 || device >= kMaxDevices || !lock()) return;
  if (claimSlot()) {
    data_->slots[slot_].used[device] += bytes;
    data_->total[device] += bytes;
  }
  unlock();
}

void ShareRegion::leave() {
  if (slot_ < 0 || !lock()) return;
  ProcessSlot& s = data_->slots[slot_];
  if (s.pid == pid_) {
    for (int d = 0; d < kMaxDevices; ++d) data_->total[d] -= s.used[d];
    std::memset(s.used, 0, sizeof s.used);
    s.pid = 0;
  }
  slot_ = -1;
  unlock();
}

}  // namespace purser::gpushare
