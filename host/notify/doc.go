// Package notify owns the engine's side of the host-to-host control
// service (host/control): serving it for peers, the cache of clients for
// the peers it calls, and notifications — sending with an idempotency key
// per notification (so retries are delivered once), settling pending
// SubmitWithNotify submissions as their tasks end (send only when every
// task completed), and the channel that delivers received ones.
//
// The Service owns its goroutines (the settler and one sender per settled
// submission) and stops them in Close. It must not route requests, read
// the metastore or know about plugins: the engine hands it the descriptor
// and status to serve (Source) and the peers to notify (Target).
package notify
