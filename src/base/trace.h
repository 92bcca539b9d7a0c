// A ring buffer of the last engine events, dumped to stderr when the process crashes (SIGSEGV, SIGABRT,
// std::terminate) so a crash report says what the engine was doing. Recording is cheap and lock-free.
#pragma once

#include <cstdint>

namespace drift::trace {

enum class Event : uint8_t {
  kSubmit, kReject, kAdmit, kStepBegin, kStepEnd, kSample, kFinish, kCancel, kPreempt, kEvict, kError, kShed
};

constexpr int kCapacity = 512;

// a, b: event-specific numbers (sequence id, token counts, block counts...).
void record(Event event, int64_t a = 0, int64_t b = 0);
// Writes the recorded events, oldest first, to the file descriptor (async-signal-tolerant formatting).
void dump(int fd);
// Installs the crash handlers once; later calls do nothing.
void install_crash_handlers();

}  // namespace drift::trace
