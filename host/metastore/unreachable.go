package metastore

import (
	"errors"
	"io"
	"net"
	"syscall"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Unreachable reports whether err, from a Store or Lease call, says that
// the metastore could not be reached (a refused or reset connection, no
// route, a name that does not resolve, no answer in time, a connection
// closed before the answer: a server that is stopped, restarting or cut
// off), rather than that it answered and refused. The errors of every
// backend wrap their cause, so this holds for HTTP, Redis and etcd alike.
//
// An engine that closes while its metastore is unreachable is closed all
// the same; only its descriptor's key stays behind, and expires with its
// lease. Callers use this to tell that case from a real failure.
func Unreachable(err error) bool {
	if err == nil {
		return false
	}
	// net.Error covers *net.OpError (dial, read, write), *net.DNSError and
	// context.DeadlineExceeded, which has Timeout() too.
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	// An HTTP request that got no answer, whatever net/http's reason.
	var na noAnswer
	if errors.As(err, &na) {
		return true
	}
	// A connection the server closed before it answered (it stopped
	// while a kept-alive connection was idle).
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	for _, errno := range []syscall.Errno{syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.EHOSTUNREACH, syscall.ENETUNREACH, syscall.EPIPE} {
		if errors.Is(err, errno) {
			return true
		}
	}
	// etcd's client reports a cluster it cannot reach as gRPC's
	// Unavailable, or DeadlineExceeded once its context's deadline passed.
	var se interface{ GRPCStatus() *status.Status }
	if errors.As(err, &se) {
		switch se.GRPCStatus().Code() {
		case codes.Unavailable, codes.DeadlineExceeded:
			return true
		}
	}
	return false
}
