#include "base/trace.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <exception>

namespace drift::trace {

namespace {

struct Record {
  std::atomic<int64_t> time_us{0};
  std::atomic<uint8_t> event{0};
  std::atomic<int64_t> a{0}, b{0};
};

Record g_ring[kCapacity];
std::atomic<uint64_t> g_next{0};
std::atomic<bool> g_installed{false};

const char* event_name(uint8_t e) {
  static const char* names[] = {"submit", "reject", "admit", "step_begin", "step_end", "sample",
                                "finish", "cancel", "preempt", "evict", "error", "shed"};
  return e < sizeof(names) / sizeof(names[0]) ? names[e] : "?";
}

void write_all(int fd, const char* s, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, s, n);
    if (w <= 0) return;
    s += w;
    n -= size_t(w);
  }
}

void on_signal(int sig) {
  char line[96];
  const int n = std::snprintf(line, sizeof line, "\ndrift: fatal signal %d; last engine events:\n", sig);
  write_all(STDERR_FILENO, line, size_t(n));
  dump(STDERR_FILENO);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

void on_terminate() {
  const char msg[] = "\ndrift: std::terminate called; last engine events:\n";
  write_all(STDERR_FILENO, msg, sizeof msg - 1);
  dump(STDERR_FILENO);
  std::signal(SIGABRT, SIG_DFL);
  std::abort();
}

}  // namespace

void record(Event event, int64_t a, int64_t b) {
  const uint64_t i = g_next.fetch_add(1, std::memory_order_relaxed) % kCapacity;
  const auto now = std::chrono::steady_clock::now().time_since_epoch();
  g_ring[i].time_us.store(std::chrono::duration_cast<std::chrono::microseconds>(now).count(), std::memory_order_relaxed);
  g_ring[i].event.store(uint8_t(event), std::memory_order_relaxed);
  g_ring[i].a.store(a, std::memory_order_relaxed);
  g_ring[i].b.store(b, std::memory_order_relaxed);
}

void dump(int fd) {
  const uint64_t end = g_next.load();
  const uint64_t begin = end > uint64_t(kCapacity) ? end - kCapacity : 0;
  char line[128];
  for (uint64_t i = begin; i < end; ++i) {
    const Record& r = g_ring[i % kCapacity];
    const int n = std::snprintf(line, sizeof line, "  #%llu t=%lldus %s a=%lld b=%lld\n", (unsigned long long)i,
                                (long long)r.time_us.load(), event_name(r.event.load()), (long long)r.a.load(),
                                (long long)r.b.load());
    write_all(fd, line, size_t(n));
  }
}

void install_crash_handlers() {
  if (g_installed.exchange(true)) return;
  std::signal(SIGSEGV, on_signal);
  std::signal(SIGABRT, on_signal);
  std::signal(SIGBUS, on_signal);
  std::signal(SIGFPE, on_signal);
  std::set_terminate(on_terminate);
}

}  // namespace drift::trace
