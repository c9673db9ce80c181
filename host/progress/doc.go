// Package progress owns the transfer path after validation: the host side
// of each plugin lane (submission and completion rings), cutting requests
// into slices, reaping completions, and folding slice outcomes into
// per-task and per-batch state with exactly one terminal state per task.
//
// It does not choose transports or validate addresses (the engine and the
// selector do), and it never touches payload bytes. Submission and
// completion allocate nothing per request.
package progress
