// Package cpuslice asks Linux's scheduler for a shorter time slice for
// the threads of this process, so that a thread woken by a completion
// runs at once beside busy threads of other processes instead of after
// them.
//
// Linux's fair scheduler (EEVDF, 6.6 and later) runs a woken thread ahead
// of the running one only when the woken one's virtual deadline is
// earlier; a thread's deadline is its slice past its eligible time, and
// since 6.12 a thread may ask for a slice of its own (sched_setattr's
// sched_runtime, 100 us to 100 ms) and one that asked for a shorter slice
// preempts at wakeup (the PREEMPT_SHORT feature). On the default slice
// (0.7-3 ms, by kernel and core count), an engine waiter that slept on its
// completion ring and was woken by the plugin, on a core where another
// process spins, waited until the tick ended that process's slice: 4 ms
// at HZ=250. A shorter slice changes no thread's share of the CPU, only
// how soon it runs when it wakes.
//
// The slice is a thread's attribute, inherited by the threads it starts,
// so Hold sets it on every thread the process has (sdk.RequestSlice, the
// walk a plugin makes for its own threads) and the threads started later
// inherit it; the last Release returns every fair-class thread to the
// kernel's default, including any the application had given a slice of
// its own. Threads in a real-time class are left alone.
package cpuslice
