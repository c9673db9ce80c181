package host

import (
	"context"
	"errors"
	"fmt"

	"github.com/ferrydev/ferry/host/segment"
)

// ExportSegment returns this engine's segment descriptor as bytes for the
// application's own side channel (a file, its framework's RPC): the
// registered buffers, each running transport's endpoint and rails, the
// engine's name, incarnation, machine id and control address. It is
// checksummed always and, with a cluster secret, signed, so that
// ImportSegment on a peer detects a truncated, corrupted or (with a
// secret) forged blob. The format is segment.EncodeBlob's.
//
// A blob is a snapshot: buffers registered after the export are not in
// it, so export after registering. It stays valid for this life of the
// engine (its incarnation); after a restart, export again.
func (e *Engine) ExportSegment() ([]byte, error) {
	if e.x.Closed() {
		return nil, ErrClosed
	}
	b, err := segment.EncodeBlob(e.signer, e.descriptor())
	if err != nil {
		return nil, fmt.Errorf("%w: engine %q: %w", ErrInvalid, e.name, err)
	}
	return b, nil
}

// ImportOption changes what ImportSegment accepts.
type ImportOption func(*importOptions)

type importOptions struct{ name string }

// ExpectName makes ImportSegment refuse a blob of any engine but name, so
// that a side channel that delivers the wrong peer's blob is caught
// before any transfer goes to that peer.
func ExpectName(name string) ImportOption {
	return func(o *importOptions) { o.name = name }
}

// ImportSegment opens the segment a peer's ExportSegment described, with
// no metastore: the returned handle is used as one from OpenSegment. The
// segment is known by the engine name in the blob (Segment.Name).
//
// A blob that is truncated, corrupted, of an unknown version, unsigned or
// badly signed (with a cluster secret), or of another engine than
// ExpectName's is refused with ErrInvalid and a message that says which;
// nothing is opened.
//
// Nothing watches an imported segment. A blob of an earlier life of its
// peer is found out on first use, as a stale descriptor is: the peer's
// plugins refuse a request addressed to a previous incarnation (or the
// old endpoint no longer answers), the task fails, and the engine asks
// the peer's control service (its address is in the blob) for the
// current descriptor. Where that shows a new incarnation, the handle is
// retired and its error says so: import a new blob, or open the segment
// by its control address. Importing a blob of another life of a segment
// that is open retires the open handle, as OpenSegment does.
func (e *Engine) ImportSegment(ctx context.Context, blob []byte, opts ...ImportOption) (Segment, error) {
	if e.x.Closed() {
		return Segment{}, ErrClosed
	}
	var o importOptions
	for _, opt := range opts {
		opt(&o)
	}
	d, err := segment.DecodeBlob(e.signer, blob, o.name)
	if err != nil {
		if errors.Is(err, segment.ErrUnsigned) || errors.Is(err, segment.ErrBadSignature) {
			err = fmt.Errorf("%w (%d refused so far)", err, e.signer.Refused())
		}
		return Segment{}, fmt.Errorf("%w: import segment: %w", ErrInvalid, err)
	}
	h, err := e.dir.Import(ctx, d)
	if err != nil {
		return Segment{}, remotesErr(err)
	}
	return segmentOf(h, e.x.Plugins()), nil
}
