// The memory one pod holds on each device, shared by all of the pod's processes through a file
// (CUDA_DEVICE_MEMORY_SHARED_CACHE) mapped by each of them. Every process has a slot (its pid, the
// start time that tells a reused pid apart, its bytes per device); a reservation is checked and
// recorded under one process-shared robust mutex, so two processes can never both take the last
// bytes (the check and the record are one step; the driver is called after, and a failed call
// gives the reservation back). A process that died is found by its pid and its bytes returned:
// when a reservation would not fit, and when a process opens the region. A process that died
// holding the mutex leaves it to the next (EOWNERDEAD), which recounts the totals from the slots.
//
// The compute bucket of each device lives here too, so that the pod's processes draw on one
// allowance of launches.
//
// Thread-safe and process-safe. No C++ exception leaves this file; nothing here calls the driver.
#pragma once

#include <pthread.h>
#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "gpushare/limits.h"

namespace purser::gpushare {

constexpr int kMaxProcesses = 1024;

struct ProcessSlot {
  int32_t pid;  // 0: free
  uint32_t reserved0;
  uint64_t start_ticks;  // from /proc/<pid>/stat, 0 where unreadable
  uint64_t used[kMaxDevices];
};

struct ComputeBucket {
  int64_t tokens;          // launch cost units; a launch may leave it negative (a debt)
  int64_t rate_milli;      // units per second x 1000; 0 = not yet measured (no throttle)
  uint64_t refilled_ns;    // CLOCK_MONOTONIC of the last refill
  uint64_t launched;       // cost launched since the region was made (all processes)
  uint64_t tick_ns;        // when the controller last looked at utilisation
  uint64_t tick_launched;  // `launched` at that tick
  uint64_t nvml_seen_us;   // NVML's timestamp of the newest utilisation sample read
};

struct RegionData {
  uint64_t magic;
  uint32_t layout;  // kLayout; a region of another layout is refused
  uint32_t size;    // sizeof(RegionData)
  pthread_mutex_t mu;
  uint64_t limit[kMaxDevices];  // bytes; the smallest any process of the pod brought
  uint64_t total[kMaxDevices];  // sum of the slots' used, guarded by mu
  ComputeBucket bucket[kMaxDevices];
  ProcessSlot slots[kMaxProcesses];
};

class ShareRegion {
 public:
  // Maps the region at `path` (made if absent, mode 0600) or, with an empty path, a private one.
  // On failure returns false with `error` saying why.
  bool open(const std::string& path, const Limits& limits, std::string* error);

  // This process's slot, taken at first use (again in a child after fork()).
  bool reserve(int device, uint64_t bytes);
  void release(int device, uint64_t bytes);
  uint64_t used(int device);
  uint64_t limit(int device) const { return data_ == nullptr ? 0 : data_->limit[device]; }
  // Returns every dead process's bytes to the pod; the number of slots freed.
  int reclaimDead();
  // Forgets this process's slot (its memory went with its contexts); after fork() in the child.
  void forgetSlotAfterFork() {
    slot_ = -1;
    pid_ = ::getpid();
  }

  // The compute allowance: takes `cost` units at `now_ns`, or returns how long to wait (ns) before
  // asking again. The rate is set by the controller (`retune`).
  uint64_t take(int device, uint64_t cost, uint64_t now_ns);
  // The controller's turn: at most one caller per `period_ns` gets a turn, with what was launched
  // and the pod's pids since the last turn, and then calls finishTick() with the new rate. The
  // first turn is a baseline: the caller only reads where NVML's samples stand.
  enum class Turn { kNone, kBaseline, kTune };
  struct TickClaim {
    int64_t rate_milli = 0;
    uint64_t launched = 0;
    uint64_t window_ns = 0;
    uint64_t nvml_seen_us = 0;
    int32_t pids[256];
    int npids = 0;
  };
  Turn claimTick(int device, uint64_t now_ns, uint64_t period_ns, TickClaim* claim);
  void finishTick(int device, const TickClaim& claim, int64_t rate_milli);
  // The pids of the pod's processes that hold a slot, at most `max`.
  int pids(int32_t* out, int max);
  // Adds bytes the driver already took (a context's own memory), even past the cap.
  void charge(int device, uint64_t bytes);
  // Gives this process's bytes back and frees its slot (at exit).
  void leave();

  RegionData* dataForTest() { return data_; }

 private:
  bool lock();
  void unlock();
  bool claimSlot();  // mu held
  void recount();    // mu held
  int reclaimDeadLocked();

  RegionData* data_ = nullptr;
  int slot_ = -1;
  pid_t pid_ = 0;  // this process's, read once (a system call costs a microsecond on some VMs)
};

// The start time of a process in clock ticks since boot, or 0 when it cannot be read.
uint64_t processStartTicks(pid_t pid);

}  // namespace purser::gpushare
