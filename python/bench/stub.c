/* stub.c: do-nothing stand-ins for two calls of libferry.so, for
 * python/bench/cost.py's "parts" mode: the package's Python code and the
 * cffi call are timed against these, with no engine work behind them. */
#include <stddef.h>
#include <stdint.h>

int ferry_transfer(uint64_t e, const void *reqs, size_t n) {
    (void)e;
    (void)reqs;
    (void)n;
    return 0;
}

const char *ferry_version(void) { return "stub"; }
