package sdk

import (
	"context"
	"errors"
	"time"

	"github.com/ferrydev/ferry/sdk/ring"
)

// Transport is what a transport plugin implements. A vendor reads this file
// to know what to write; ServeTransport does the rest (go-plugin handshake,
// gRPC control plane, shared-memory rings, fd passing, host liveness).
//
// Control methods are called from gRPC handlers, possibly concurrently. The
// data path is Submit: the SDK calls it for every descriptor the host puts
// on the submission ring, from the lane goroutine or from a transport
// goroutine inside Assist (see Assister), never twice at once for one
// lane. The plugin reports the outcome exactly once through the
// Completer, from any goroutine.
type Transport interface {
	// Describe says what the plugin is. It must work before Start.
	Describe(ctx context.Context) (Info, error)

	// Probe says whether the hardware or service the plugin needs is
	// present. A plugin without its hardware answers Available=false with
	// a reason rather than failing.
	Probe(ctx context.Context) (ProbeResult, error)

	// Start configures the plugin for one engine and returns the endpoint
	// blob peers need to reach it (published in the segment descriptor).
	Start(ctx context.Context, cfg StartConfig) (Endpoint, error)

	// RegisterMemory makes a region of the engine's memory known to the
	// plugin. Region.Mem is already mapped into the plugin's address space
	// by the SDK; the plugin must not touch memory outside registered
	// regions and must honour Region.Perm for remote access.
	RegisterMemory(ctx context.Context, r Region) error

	// UnregisterMemory forgets a region. After it returns the plugin must
	// not touch the region's memory again; the SDK unmaps it.
	UnregisterMemory(ctx context.Context, id uint32) error

	// OpenPeer prepares the plugin to reach a remote segment. Descriptors
	// name the peer by Peer.ID.
	OpenPeer(ctx context.Context, p Peer) error

	// ClosePeer forgets a peer; work in flight to it ends with an error.
	ClosePeer(ctx context.Context, id uint32) error

	// Submit starts one descriptor (OpWrite, OpRead or OpNop). It must not
	// block on I/O: queue the work and return. The plugin calls
	// c.Complete exactly once per descriptor, also on failure.
	Submit(d *ring.Descriptor, c Completer)

	// Stats returns the plugin's counters; the host exports them with the
	// plugin's name as a label.
	Stats(ctx context.Context) (map[string]uint64, error)

	// Stop ends all work. Outstanding descriptors complete with
	// StatusShutdown before Stop returns.
	Stop(ctx context.Context) error
}

// Completer reports the outcome of one descriptor. It is safe for
// concurrent use.
type Completer interface {
	// Complete reports the outcome of the descriptor with this token.
	// bytes is how many bytes were transferred.
	Complete(token uint64, status ring.Status, bytes uint64)
}

// Assister is implemented by the Completer the SDK hands to Submit. A
// transport goroutine that has just completed work and is about to wait
// for more (a reader going back to its socket) calls Assist where it
// holds nothing its own Submit needs. If that was the last outstanding
// descriptor of the lane and the lane goroutine sleeps, Assist takes the
// host's next descriptors as they come, for up to the spin budget, and
// submits them on the calling goroutine: a host waiting on a round trip
// answers its completion with the next request within microseconds, and
// a thread that already runs takes it without a wakeup. Otherwise Assist
// returns at once.
//
// A transport that calls Assist also lets the lane goroutine sleep while
// small work is on the wire, instead of spinning for the next request.
type Assister interface {
	Assist()
}

// Drainer is an optional interface (protocol 2) a Transport implements to
// let the host retire it gracefully: Drain finishes what is in flight and
// accepts nothing new. From the moment Drain is called, Submit completes
// every new descriptor at once with ring.StatusShutdown; Drain returns
// when every descriptor submitted before it has completed, or with ctx's
// error when ctx ends first. The plugin keeps its regions and peers: Stop
// still follows.
//
// The SDK finds Drainer by type assertion and lists it in Describe
// (InterfaceDrainer); a Transport without it answers the host's Drain with
// codes.Unimplemented, which the host reports as "plugin X does not
// implement Drain".
type Drainer interface {
	Drain(ctx context.Context) error
}

// Aborter is an optional interface (protocol 2) a Transport implements to
// stop descriptors early: the host calls Abort with the tokens of a task
// it canceled or that timed out, because it reports the task ended only
// once no plugin touches the task's memory.
//
// Abort gives back every descriptor the plugin holds whose token is in
// tokens, as soon as the plugin no longer touches its local memory:
//   - one not yet carried (queued) is never sent and completes with
//     ring.StatusCanceled;
//   - a read in flight stops writing local memory (what is left of its
//     payload is read off the wire into scratch memory) and completes
//     with ring.StatusCanceled once it no longer does;
//   - a write already on the wire may have partly landed at the peer;
//     it completes as the peer answers.
//
// Every descriptor still completes exactly once, on its lane's completion
// ring; that completion is the promise that its memory is no longer
// touched. Abort may return before the completions are posted, and
// ignores tokens it does not hold. It returns how many descriptors it
// found.
//
// The SDK lists Aborter in Describe (InterfaceAborter). The host calls it
// only where listed; a plugin without it is waited for (the completion
// of every slice it holds), within a bound after which it is killed.
type Aborter interface {
	Abort(ctx context.Context, tokens []uint64) (int, error)
}

// Fencer is an optional interface (protocol 2) of a two-sided transport
// (one whose peer plugin applies what the initiator sent: tcp): the
// receiving side's half of "ended means ended at both ends".
//
// A write's bytes can outlive the initiator's plugin run that sent them:
// queued in the kernel's send buffer over a slow link, or unread in the
// socket of a receiving plugin that was stopped. When the initiating
// host ends such a run (it killed a stalled plugin, or the plugin died)
// with writes in flight, it asks the receiving engine, over the
// authenticated control service, to fence that run before it reports
// those writes ended or sends a newer write to the same engine. That
// engine calls Fence on its plugin:
//   - from then on, no frame of a connection whose hello named engine
//     from and run is applied to memory (drop it, close the connection),
//     and no new connection of that run is accepted;
//   - a frame being applied when the fence arrives finishes, or is cut
//     off (the connection shut down) if it does not finish promptly;
//   - Fence returns only once no frame of that run is being applied.
//
// A fence names a run that this plugin may never have served (its
// connections died with an earlier run of this plugin, or never came):
// it is recorded all the same, so that a connection of that run that is
// still on its way is refused, and known is false. A run of another
// engine's connections is not fenced: Fence returns an error that says
// whose they are (the host has authenticated from). kit.Fences does all
// of this for a transport.
//
// The SDK lists Fencer in Describe (InterfaceFencer). One-sided
// transports need no Fencer: their writes are the initiator's plugin's
// own stores (shm) or its NIC's (rdma), which end when the host sees that
// plugin's process gone (shm), or when its queue pairs are moved to the
// error state or its memory registrations are revoked (rdma).
type Fencer interface {
	Fence(ctx context.Context, from string, run uint64) (FenceResult, error)
}

// ErrFenceNotYours is what a Fence returns (wrapped) for a run whose
// connections another engine holds: only the engine that sent a run's
// frames may fence it.
var ErrFenceNotYours = errors.New("the run's connections were opened by another engine")

// FenceResult is what a Fence found.
type FenceResult struct {
	Connections int  // the run's connections that were open and are fenced now
	Known       bool // a connection of the run was ever served here
}

// DeviceImporter is an optional interface (protocol 2) of a Transport
// that moves device memory (plugins/nvlink): the host registers a range
// of GPU memory with it as an exported handle (Handle: a CUDA IPC handle,
// a VMM allocation's fd, a simulated device's memfd) instead of a memfd
// of host memory. RegisterDevice opens (imports) h, or checks that it
// can, and names its range [h.Offset, h.Offset+h.Length) region from now
// on: descriptors take it as a local region, peers as a remote one, as
// Perm allows. kind is the region's memory kind (MemoryCUDA). An import
// can be slow (legacy CUDA IPC: 142 ms), so the host registers once and
// the plugin caches.
//
// A handle that no longer opens (its allocation was freed, its exporter
// is gone) fails with an error wrapping ErrStaleHandle, one of a device
// the plugin cannot reach with one wrapping ErrNoDevice; both leave no
// region behind. UnregisterMemory forgets a device region as any other:
// after it returns the plugin (and the peers it handed the handle to)
// no longer touch the range.
//
// The SDK lists DeviceImporter in Describe (InterfaceDeviceImporter); a
// plugin without it, and every plugin of an older SDK, answers the
// host's RegisterDevice with codes.Unimplemented, which the host reports
// as "plugin X does not import device memory".
type DeviceImporter interface {
	RegisterDevice(ctx context.Context, region uint32, perm Perm, kind MemoryKind, h Handle) error
}

// ConfigChecker is an optional interface of a Transport: CheckConfig
// decodes and checks cfg.Config as Start would, with the same errors
// (file:line:col into the operator's file), and starts nothing: no
// listener, no goroutine, no file opened for good. `ferry plugins
// --config` and `ferry doctor` call it. The SDK lists it in Describe
// (InterfaceConfigChecker); a plugin without it is checked only when an
// engine starts it.
type ConfigChecker interface {
	CheckConfig(ctx context.Context, cfg StartConfig) error
}

// Info describes a plugin and what it can do; the host plans from it
// (which transport, which slice size) instead of knowing plugins by name.
// Every capability's zero value means "unknown": the host then uses its
// defaults, as it must for a plugin built for protocol 1, which sends
// none of them.
//
// The host calls Describe before Start and again after it: a plugin whose
// limits depend on its configuration (tcp's max_frame) reports its
// defaults before Start and the configured values after.
type Info struct {
	Name    string // "tcp"
	Version string // the plugin's own version, e.g. "0.1.0"

	// Ops are the descriptor ops the plugin carries: ring.OpWrite and
	// ring.OpRead (OpNop every plugin answers). Empty: unknown, which the
	// host reads as both (see Carries).
	Ops []ring.Op
	// MaxSlice is the largest descriptor length the plugin accepts; a
	// longer one completes with ring.StatusInvalid. 0: no limit known.
	MaxSlice uint64
	// PreferredSlice is the slice length the plugin works best with (for
	// shm, 64 MiB: one copy per slice); 0: the host's default.
	PreferredSlice uint64
	// SameMachineOnly: the plugin reaches only peers on this machine
	// (shm, nvlink).
	SameMachineOnly bool
	MemoryKinds     []MemoryKind // empty: MemoryCPU only
	// ForeignMemory: the plugin takes regions whose Region.Foreign is set,
	// memory the application allocated itself, and reaches them with
	// cross-memory attach (sdk/kit's ForeignCopy), one extra copy. A plugin
	// that must map memory to work (zero copy, like shm) leaves it false;
	// the host then never registers such memory with it nor routes a
	// request on such memory to it. False for plugins of older SDKs.
	ForeignMemory bool
	// ForeignLocalOnly, with ForeignMemory: the plugin reaches such memory
	// only as the local side of its own descriptors, copying it straight
	// between the host process and the peer's memory it mapped (shm: no
	// extra copy); it cannot serve such memory to peers, so the host routes
	// a request whose target is such memory elsewhere. False for plugins of
	// older SDKs, whose ForeignMemory meant both sides.
	ForeignLocalOnly bool
	// TwoSided: the peer's plugin receives what this one sends and holds
	// it in buffers of its own until it lands (tcp), so the host meters
	// what it sends with the receiving engine's credit. One-sided plugins
	// that write straight into registered memory (shm, rdma writes) leave
	// it false, and so do plugins of older SDKs: no credit.
	TwoSided bool
	// TestTool: the plugin is a tool for tests (plugins/fault injects
	// faults), not a transport to run in production. `ferry plugins`
	// lists it only with --all; an engine runs it like any other. False
	// for plugins of older SDKs, which the listing then shows.
	TestTool bool
}

// SpinsAlone is an optional interface of a Transport whose lanes need no
// other goroutine of the plugin to run while they wait for the host's
// next descriptor: it serves a descriptor on the lane's goroutine, or
// hands it to goroutines that have Ps of their own (shm: small copies
// inline, large ones on its copy workers). When SpinsAlone returns true,
// a lane's spin on its submission ring keeps its P for its first
// SpinAloneGosched instead of yielding it to other goroutines at every
// look: a runtime.Gosched costs a trip through the scheduler, and a
// descriptor that comes during it waits for it. Measured with ferry bench
// on two cores, shm 1 MiB writes: 20.2-25.1 -> 24.8-27.0 GB/s, 0.5-1.0 ->
// 0.3 context switches a request. A transport whose connections'
// goroutines need the lane's P does not implement it (tcp: its 1 MiB
// writes lost a tenth of their throughput, and doubled the plugin's
// context switches, with the lane's spin holding the P).
//
// While the lane of such a transport drains a run of small descriptors,
// the completions posted meanwhile (from any goroutine) are published
// eight at a time and at the run's end, not one by one: its Submit must
// return without waiting on other work, or the completions held meanwhile
// wait with it.
type SpinsAlone interface {
	SpinsAlone() bool
}

// RunSubmitter is an optional interface of a Transport that takes a
// lane's run of descriptors (what the host published together, already
// validated, NOPs answered) in one call instead of one Submit each, so
// that what the run's descriptors share is done once a run: looking up
// the peer and the regions, taking their references, counting. SubmitRun
// has Submit's contract for each descriptor of ds: every one completes
// exactly once, and it must not wait on other work (it runs on the
// lane's goroutine). ds is valid only until SubmitRun returns.
//
// A descriptor that SubmitRun finishes before it returns may complete
// through c.CompleteInRun: while the lane holds its run's completions
// (see SpinsAlone), those are posted to the host in groups, one lock and
// one publication a group, not one each. Completions from any other
// goroutine, or after SubmitRun returned, go through c.Complete.
// kit.Run does the lookups for a run.
//
// 4 KiB shm writes in batches of 128 spent about 200 ns a descriptor in
// the plugin with a Submit each (the copy about 80); see plugins/shm's
// SubmitRun for what a run costs.
type RunSubmitter interface {
	SubmitRun(ds []ring.Descriptor, c RunCompleter)
}

// RunCompleter is the Completer SubmitRun is handed.
type RunCompleter interface {
	Completer
	// CompleteInRun is Complete for a descriptor of the run SubmitRun
	// was handed, called on SubmitRun's goroutine before it returns.
	CompleteInRun(token uint64, status ring.Status, bytes uint64)
}

// SpinAloneGosched is how long the lane of a transport that SpinsAlone
// keeps its P at the start of each spin.
const SpinAloneGosched = 20 * time.Microsecond

// Carries reports whether the plugin carries op. A plugin that lists no
// ops (one built for protocol 1) is taken to carry writes and reads, as
// every such plugin did.
func (i Info) Carries(op ring.Op) bool {
	if len(i.Ops) == 0 {
		return op == ring.OpWrite || op == ring.OpRead
	}
	for _, o := range i.Ops {
		if o == op {
			return true
		}
	}
	return false
}

// ProbeResult says whether the plugin can run on this machine.
type ProbeResult struct {
	Available bool
	Reason    string // why not, when Available is false
	Rails     []Rail
}

// Rail is one path the transport can use.
type Rail struct {
	Name          string  `json:"name"`      // e.g. "127.0.0.1:7100"
	NUMANode      int     `json:"numa_node"` // -1 when unknown
	BandwidthGbps float64 `json:"bandwidth_gbps"`
}

// StartConfig is what the host hands a plugin at Start.
type StartConfig struct {
	Engine      string // engine (segment) name
	Incarnation uint64 // new at every engine start; peers address it
	MachineID   string
	// Config is the plugin's own HCL block body, undecoded: the source
	// text between the braces of the `config { ... }` block in the
	// operator's file. ConfigFile/ConfigLine/ConfigColumn/ConfigByte say
	// where that text starts so that the plugin's diagnostics point at the
	// operator's file. Use DecodeConfig to decode it.
	Config       []byte
	ConfigFile   string
	ConfigLine   int
	ConfigColumn int
	ConfigByte   int
	// ClusterSecret is the engine's cluster secret, when it has one
	// (its top-level cluster_secret_file, or the tcp block's): a plugin
	// whose own block names no secret authenticates its peers with it.
	// Nil without one, and from hosts older than this field.
	ClusterSecret []byte
	// Run is a number the host drew for this run of the plugin (0 from
	// hosts older than this field). A two-sided transport carries it in
	// every connection it dials, with the engine's name, so that the
	// peer can fence what this run sent (Fencer) once the host ended it.
	Run uint64
}

// Endpoint is the opaque blob a plugin publishes for its peers (for TCP:
// the addresses it listens on).
type Endpoint []byte

// Region is registered memory as the plugin sees it.
type Region struct {
	ID   uint32
	Mem  []byte // mapped by the SDK; len(Mem) is the region's length
	Perm Perm
	Kind MemoryKind // "" is MemoryCPU

	// FD is the memfd the host sent for this region, for a plugin that
	// shares the memory with a peer plugin on the same machine (it can
	// pass FD over a unix socket with SCM_RIGHTS). Mem maps
	// [FDOffset, FDOffset+len(Mem)) of it. The SDK owns FD: the plugin
	// must not close it, and it stays valid until UnregisterMemory returns
	// (or Stop). It is -1 when the host sent none; a Region literal that
	// omits FD (tests that build one from plain memory) carries 0, which
	// the SDK never delivers (fd 0 is the plugin's stdin): treat FD <= 0
	// as none. Regions the host registered in one batch from one memfd
	// carry the same FD.
	FD       int
	FDOffset uint64

	// Foreign, when not nil, is memory the host's application allocated
	// itself (a Go slice, C malloc, an anonymous mapping): the SDK maps
	// nothing (Mem is nil, FD is -1), and the plugin reaches the bytes in
	// the host process with process_vm_readv/process_vm_writev (sdk/kit's
	// ForeignCopy). The SDK delivers such regions only to a plugin whose
	// Info.ForeignMemory is true, after it read one byte of the range to
	// prove it may.
	//
	// A sealed region has both: the host's remote-read memory that peers
	// may map, whose memfd (FD) is sealed against new writable mappings
	// so that no process it is shared with can make it writable. Mem then
	// maps it read-only: the plugin reads Mem (or Foreign) and must write
	// through Foreign, the host's own mapping, which stays writable. A
	// plugin that reaches a region through Foreign whenever it is set is
	// correct for both kinds. Only a plugin with Info.ForeignMemory gets
	// sealed regions.
	Foreign *Foreign
}

// Foreign is memory in another process: [Addr, Addr+Length) of process
// PID, reached by cross-memory attach. The application promised to keep it
// mapped while it is registered; if it breaks that promise a copy fails
// with EFAULT and touches no one else's memory.
type Foreign struct {
	PID    int
	Addr   uint64
	Length uint64
}

// Len is the region's length, for mapped and foreign regions alike.
func (r Region) Len() uint64 {
	if r.Foreign != nil {
		return r.Foreign.Length
	}
	return uint64(len(r.Mem))
}

// Peer is a remote segment as the plugin sees it.
type Peer struct {
	ID          uint32
	Segment     string
	Incarnation uint64 // the peer's incarnation: frames carry it, the peer checks it
	MachineID   string
	Endpoint    Endpoint // what the peer's plugin returned from Start
}
