/* stub.c: do-nothing stand-ins for three calls of libferry.so, for
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

int ferry_transfer_sync(uint64_t e, int opcode, uint32_t seg, void *local, uint64_t remote, size_t len,
                        int64_t timeout_ns, const char *transport_hint) {
    (void)e;
    (void)opcode;
    (void)seg;
    (void)local;
    (void)remote;
    (void)len;
    (void)timeout_ns;
    (void)transport_hint;
    return 0;
}

const char *ferry_version(void) { return "stub"; }
