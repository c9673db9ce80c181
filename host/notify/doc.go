// Package notify owns the engine's side of the host-to-host control
// service (host/control): serving it for peers, the cache of clients for
// the peers it calls, and notifications — sending with a random 128-bit
// idempotency key per notification (so retries are delivered once and no
// one can send a real notification's key first), signed with the cluster
// secret when the engine has one, settling pending
// SubmitWithNotify submissions as their tasks end (send only when every
// task completed), and the channel that delivers received ones, in which
// each sender gets a fair share so that a flooding peer cannot starve the
// others (fairBuffer).
//
// The Service owns its goroutines (the settler and one sender per settled
// submission) and stops them in Close. It must not route requests, read
// the metastore or know about plugins: the engine hands it the descriptor
// and status to serve (Source) and the peers to notify (Target).
package notify
