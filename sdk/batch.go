package sdk

import (
	"context"
	"sync/atomic"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	transportv1 "github.com/ferrydev/ferry/internal/proto/transport/v1"
	"github.com/ferrydev/ferry/sdk/shm"
)

// MaxBatchRegions is the most regions one RegisterMemoryBatch may carry:
// the most buffers a host's segment holds.
const MaxBatchRegions = 1 << 15

// sharedFD is a memfd that several regions of a batch were carved from:
// it stays open while any of them is registered, so that each region's
// Region.FD stays valid until that region is unregistered, and a batch of
// 10,000 regions of one allocation holds one fd, not 10,000.
type sharedFD struct {
	fd   int
	refs atomic.Int32
}

func (f *sharedFD) release() {
	if f.refs.Add(-1) == 0 {
		unix.Close(f.fd)
	}
}

// takeBatchFDs collects the fds of every attach id, in order.
func (s *server) takeBatchFDs(ctx context.Context, ids []uint64) ([]int, error) {
	if s.fds == nil {
		return nil, status.Error(codes.FailedPrecondition, "no fd socket: the plugin was not started by a Ferry host")
	}
	ctx, cancel := context.WithTimeout(ctx, fdWait)
	defer cancel()
	var all []int
	for _, id := range ids {
		fds, err := s.fds.Take(ctx, id)
		if err != nil {
			closeFDs(all)
			return nil, status.Errorf(codes.FailedPrecondition, "register batch: fds for attach id %d did not arrive: %v", id, err)
		}
		all = append(all, fds...)
	}
	return all, nil
}

// RegisterMemoryBatch maps and registers every region of the batch with
// the transport, one by one in process, or none: when one fails, those
// already registered are unregistered and unmapped again.
func (s *server) RegisterMemoryBatch(ctx context.Context, req *transportv1.RegisterMemoryBatchRequest) (*transportv1.RegisterMemoryBatchResponse, error) {
	if len(req.Regions) > MaxBatchRegions || len(req.AttachIds) > len(req.Regions) {
		// Take nothing: the fds stay pending in the receiver, bounded by
		// its MaxPending, as any fds sent for a refused call.
		return nil, status.Errorf(codes.InvalidArgument, "register batch: %d regions in %d fd messages; at most %d regions, and no more messages than regions", len(req.Regions), len(req.AttachIds), MaxBatchRegions)
	}
	fds, err := s.takeBatchFDs(ctx, req.AttachIds)
	if err != nil {
		return nil, err
	}
	shared := make([]*sharedFD, len(fds))
	for i, fd := range fds {
		shared[i] = &sharedFD{fd: fd}
		shared[i].refs.Store(1) // the batch's own, dropped on return
	}
	defer func() {
		for _, f := range shared {
			f.release()
		}
	}()
	perms := make([]Perm, len(req.Regions))
	seen := make(map[uint32]bool, len(req.Regions))
	for i, r := range req.Regions {
		if perms[i], err = permFromProto(r.Perm); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "register batch: region %d: %v", r.RegionId, err)
		}
		if r.Length == 0 || r.Length > 1<<46 || r.Offset > 1<<46 {
			return nil, status.Errorf(codes.InvalidArgument, "register batch: region %d: bad range offset %d length %d", r.RegionId, r.Offset, r.Length)
		}
		if int(r.FdIndex) >= len(fds) {
			return nil, status.Errorf(codes.InvalidArgument, "register batch: region %d: fd index %d, the batch carries %d fds", r.RegionId, r.FdIndex, len(fds))
		}
		if seen[r.RegionId] {
			return nil, status.Errorf(codes.InvalidArgument, "register batch: region %d listed twice", r.RegionId)
		}
		seen[r.RegionId] = true
	}
	s.mu.Lock()
	for _, r := range req.Regions {
		if _, ok := s.regions[r.RegionId]; ok {
			s.mu.Unlock()
			return nil, status.Errorf(codes.AlreadyExists, "register batch: region %d already registered", r.RegionId)
		}
	}
	s.mu.Unlock()
	done := 0
	undo := func() {
		for _, r := range req.Regions[:done] {
			s.impl.UnregisterMemory(context.Background(), r.RegionId)
			s.mu.Lock()
			m := s.regions[r.RegionId]
			delete(s.regions, r.RegionId)
			s.mu.Unlock()
			if m != nil {
				m.close()
			}
		}
	}
	for i, r := range req.Regions {
		f := shared[r.FdIndex]
		m, err := shm.Map(f.fd, int64(r.Offset), int(r.Length), true)
		if err != nil {
			undo()
			return nil, status.Errorf(codes.InvalidArgument, "register batch: region %d: %v; nothing of the batch was registered", r.RegionId, err)
		}
		f.refs.Add(1)
		rm := &regionMap{m: m, fd: f.fd, shared: f}
		s.mu.Lock()
		if _, ok := s.regions[r.RegionId]; ok || s.stopped {
			s.mu.Unlock()
			rm.close()
			undo()
			return nil, status.Errorf(codes.AlreadyExists, "register batch: region %d already registered, or the plugin stopped; nothing of the batch was registered", r.RegionId)
		}
		s.regions[r.RegionId] = rm
		s.mu.Unlock()
		reg := Region{ID: r.RegionId, Mem: m.Mem(), Perm: perms[i], Kind: MemoryKind(r.Kind), FD: f.fd, FDOffset: r.Offset}
		if err := s.impl.RegisterMemory(ctx, reg); err != nil {
			s.mu.Lock()
			delete(s.regions, r.RegionId)
			s.mu.Unlock()
			rm.close()
			undo()
			return nil, status.Errorf(codes.InvalidArgument, "register batch: region %d: %v; nothing of the batch was registered", r.RegionId, err)
		}
		done++
	}
	return &transportv1.RegisterMemoryBatchResponse{}, nil
}

// UnregisterMemoryBatch forgets every region it can and lists the others.
func (s *server) UnregisterMemoryBatch(ctx context.Context, req *transportv1.UnregisterMemoryBatchRequest) (*transportv1.UnregisterMemoryBatchResponse, error) {
	if len(req.RegionIds) > MaxBatchRegions {
		return nil, status.Errorf(codes.InvalidArgument, "unregister batch: %d regions, at most %d", len(req.RegionIds), MaxBatchRegions)
	}
	resp := &transportv1.UnregisterMemoryBatchResponse{}
	for _, id := range req.RegionIds {
		if _, err := s.UnregisterMemory(ctx, &transportv1.UnregisterMemoryRequest{RegionId: id}); err != nil {
			resp.Failed = append(resp.Failed, &transportv1.BatchFailure{RegionId: id, Error: status.Convert(err).Message()})
		}
	}
	return resp, nil
}
