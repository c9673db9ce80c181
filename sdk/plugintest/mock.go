package plugintest

import (
	"context"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/ring"
)

// Mock is a Transport whose every method is a function field; a nil field
// does the sensible default: Describe names it "mock", Probe says
// available, Submit completes with StatusOK and the descriptor's length,
// Stats returns an empty map, everything else succeeds. A vendor uses it
// to test code that drives a Transport; Ferry uses it, through Connect, to
// test the gRPC conversion of every call without a plugin binary.
type Mock struct {
	DescribeFunc         func(ctx context.Context) (sdk.Info, error)
	ProbeFunc            func(ctx context.Context) (sdk.ProbeResult, error)
	StartFunc            func(ctx context.Context, cfg sdk.StartConfig) (sdk.Endpoint, error)
	RegisterMemoryFunc   func(ctx context.Context, r sdk.Region) error
	UnregisterMemoryFunc func(ctx context.Context, id uint32) error
	OpenPeerFunc         func(ctx context.Context, p sdk.Peer) error
	ClosePeerFunc        func(ctx context.Context, id uint32) error
	SubmitFunc           func(d *ring.Descriptor, c sdk.Completer)
	StatsFunc            func(ctx context.Context) (map[string]uint64, error)
	StopFunc             func(ctx context.Context) error
}

var _ sdk.Transport = (*Mock)(nil)

// Describe calls DescribeFunc, or names the mock.
func (m *Mock) Describe(ctx context.Context) (sdk.Info, error) {
	if m.DescribeFunc != nil {
		return m.DescribeFunc(ctx)
	}
	return sdk.Info{Name: "mock", Version: "0.0.0", MemoryKinds: []sdk.MemoryKind{sdk.MemoryCPU}}, nil
}

// Probe calls ProbeFunc, or says available.
func (m *Mock) Probe(ctx context.Context) (sdk.ProbeResult, error) {
	if m.ProbeFunc != nil {
		return m.ProbeFunc(ctx)
	}
	return sdk.ProbeResult{Available: true}, nil
}

// Start calls StartFunc, or returns an empty endpoint.
func (m *Mock) Start(ctx context.Context, cfg sdk.StartConfig) (sdk.Endpoint, error) {
	if m.StartFunc != nil {
		return m.StartFunc(ctx, cfg)
	}
	return nil, nil
}

// RegisterMemory calls RegisterMemoryFunc, or accepts.
func (m *Mock) RegisterMemory(ctx context.Context, r sdk.Region) error {
	if m.RegisterMemoryFunc != nil {
		return m.RegisterMemoryFunc(ctx, r)
	}
	return nil
}

// UnregisterMemory calls UnregisterMemoryFunc, or accepts.
func (m *Mock) UnregisterMemory(ctx context.Context, id uint32) error {
	if m.UnregisterMemoryFunc != nil {
		return m.UnregisterMemoryFunc(ctx, id)
	}
	return nil
}

// OpenPeer calls OpenPeerFunc, or accepts.
func (m *Mock) OpenPeer(ctx context.Context, p sdk.Peer) error {
	if m.OpenPeerFunc != nil {
		return m.OpenPeerFunc(ctx, p)
	}
	return nil
}

// ClosePeer calls ClosePeerFunc, or accepts.
func (m *Mock) ClosePeer(ctx context.Context, id uint32) error {
	if m.ClosePeerFunc != nil {
		return m.ClosePeerFunc(ctx, id)
	}
	return nil
}

// Submit calls SubmitFunc, or completes d with StatusOK at once.
func (m *Mock) Submit(d *ring.Descriptor, c sdk.Completer) {
	if m.SubmitFunc != nil {
		m.SubmitFunc(d, c)
		return
	}
	c.Complete(d.Token, ring.StatusOK, d.Length)
}

// Stats calls StatsFunc, or returns no counters.
func (m *Mock) Stats(ctx context.Context) (map[string]uint64, error) {
	if m.StatsFunc != nil {
		return m.StatsFunc(ctx)
	}
	return map[string]uint64{}, nil
}

// Stop calls StopFunc, or succeeds.
func (m *Mock) Stop(ctx context.Context) error {
	if m.StopFunc != nil {
		return m.StopFunc(ctx)
	}
	return nil
}

// MockDrainer is a Mock that also implements sdk.Drainer; Mock alone does
// not, so that a test can have either.
type MockDrainer struct {
	Mock
	DrainFunc func(ctx context.Context) error // nil: succeed
}

var _ sdk.Drainer = (*MockDrainer)(nil)

// MockAborter is a Mock that also implements sdk.Aborter.
type MockAborter struct {
	Mock
	AbortFunc func(ctx context.Context, tokens []uint64) (int, error) // nil: finds none
}

var _ sdk.Aborter = (*MockAborter)(nil)

// Abort calls AbortFunc, or finds nothing.
func (m *MockAborter) Abort(ctx context.Context, tokens []uint64) (int, error) {
	if m.AbortFunc != nil {
		return m.AbortFunc(ctx, tokens)
	}
	return 0, nil
}

// Drain calls DrainFunc, or succeeds.
func (m *MockDrainer) Drain(ctx context.Context) error {
	if m.DrainFunc != nil {
		return m.DrainFunc(ctx)
	}
	return nil
}

// MockDeviceImporter is a Mock that also implements sdk.DeviceImporter.
type MockDeviceImporter struct {
	Mock
	// RegisterDeviceFunc: nil succeeds.
	RegisterDeviceFunc func(ctx context.Context, region uint32, perm sdk.Perm, kind sdk.MemoryKind, h sdk.Handle) error
}

var _ sdk.DeviceImporter = (*MockDeviceImporter)(nil)

// RegisterDevice calls RegisterDeviceFunc, or succeeds.
func (m *MockDeviceImporter) RegisterDevice(ctx context.Context, region uint32, perm sdk.Perm, kind sdk.MemoryKind, h sdk.Handle) error {
	if m.RegisterDeviceFunc != nil {
		return m.RegisterDeviceFunc(ctx, region, perm, kind, h)
	}
	return nil
}
