package pluginclient

import (
	"context"
	"fmt"
	"strings"

	transportv1 "github.com/ferrydev/ferry/internal/proto/transport/v1"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/shm"
)

// Region is one region of a batch registration: [Offset, Offset+Length)
// of the memfd FD, under the id ID.
type Region struct {
	ID             uint32
	FD             int
	Offset, Length uint64
	Perm           sdk.Perm
	Kind           sdk.MemoryKind
}

// RegisterMemoryBatch shares every region of regs with the plugin, or
// none. A plugin whose SDK takes batches (Description.RegisterBatch) gets
// one call: each distinct memfd is sent once, in fd messages of up to
// shm.MaxFDs (the kernel passes at most 253 per SCM_RIGHTS message), and
// the plugin registers every region or none. Any other plugin gets one
// RegisterMemory per region, and those it took are unregistered again
// when one fails.
func (c *Client) RegisterMemoryBatch(ctx context.Context, regs []Region) error {
	if len(regs) == 0 {
		return nil
	}
	if !c.batch.Load() {
		return c.registerEach(ctx, regs)
	}
	if c.fds == nil {
		return errNoFDSocket
	}
	index := make(map[int]uint32) // memfd -> its place in the batch's fds
	var fds []int
	req := &transportv1.RegisterMemoryBatchRequest{Regions: make([]*transportv1.BatchRegion, len(regs))}
	for i, r := range regs {
		k, ok := index[r.FD]
		if !ok {
			k = uint32(len(fds))
			index[r.FD] = k
			fds = append(fds, r.FD)
		}
		req.Regions[i] = &transportv1.BatchRegion{
			RegionId: r.ID, FdIndex: k, Offset: r.Offset, Length: r.Length, Perm: permToProto(r.Perm), Kind: string(r.Kind),
		}
	}
	for len(fds) > 0 {
		n := min(len(fds), shm.MaxFDs)
		aid, err := c.sendFDs(fmt.Sprintf("%d region fds", n), fds[:n]...)
		if err != nil {
			return err
		}
		req.AttachIds = append(req.AttachIds, aid)
		fds = fds[n:]
	}
	_, err := c.rpc.RegisterMemoryBatch(ctx, req)
	return rpcErr(err)
}

func (c *Client) registerEach(ctx context.Context, regs []Region) error {
	for k, r := range regs {
		if err := c.RegisterMemory(ctx, r.ID, r.FD, r.Offset, r.Length, r.Perm, r.Kind); err != nil {
			for _, d := range regs[:k] {
				c.UnregisterMemory(context.Background(), d.ID)
			}
			return fmt.Errorf("region %d: %w", r.ID, err)
		}
	}
	return nil
}

// UnregisterMemoryBatch makes the plugin forget and unmap every region of
// ids it can, in one call to a plugin whose SDK takes batches and one per
// region otherwise. The error names the regions it could not forget.
func (c *Client) UnregisterMemoryBatch(ctx context.Context, ids []uint32) error {
	if len(ids) == 0 {
		return nil
	}
	var failed []string
	if c.batch.Load() {
		r, err := c.rpc.UnregisterMemoryBatch(ctx, &transportv1.UnregisterMemoryBatchRequest{RegionIds: ids})
		if err != nil {
			return rpcErr(err)
		}
		for _, f := range r.Failed {
			failed = append(failed, fmt.Sprintf("region %d: %s", f.RegionId, f.Error))
		}
	} else {
		for _, id := range ids {
			if err := c.UnregisterMemory(ctx, id); err != nil {
				failed = append(failed, fmt.Sprintf("region %d: %v", id, err))
			}
		}
	}
	if len(failed) == 0 {
		return nil
	}
	const show = 3
	n, more := len(failed), ""
	if n > show {
		more = fmt.Sprintf("; and %d more", n-show)
		failed = failed[:show]
	}
	return fmt.Errorf("%d of %d regions not unregistered: %s%s", n, len(ids), strings.Join(failed, "; "), more)
}
