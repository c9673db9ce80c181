package publish

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/ferrydev/ferry/host/control"
	"github.com/ferrydev/ferry/host/metastore"
	"github.com/ferrydev/ferry/host/segment"
)

// ErrNameInUse is returned, wrapped, when the name is held by a live
// engine or by something that is not a Ferry descriptor. Its text is the
// public API's ErrInvalid, onto which package host maps it.
var ErrNameInUse = errors.New("invalid request")

// Store is what a Publisher needs of the metastore.
type Store interface {
	metastore.Store
	metastore.Leaser
}

// Publisher keeps one engine's descriptor in the metastore.
type Publisher struct {
	store       Store
	key         string
	name        string
	incarnation uint64
	ttl         time.Duration
	timeout     time.Duration // bounds one metastore write
	log         hclog.Logger
	// describe returns the descriptor to publish now; called with mu
	// held, so that the newest write carries the newest state.
	describe func() *segment.Descriptor
	signer   *segment.Signer // nil: no cluster secret
	secret   []byte          // nil: no cluster secret

	// mu is held across each write, so that callers queue behind the
	// write in flight. asked numbers the Publish calls; covered is the
	// highest number whose state a successful write carried (mu held).
	// A caller whose number is covered when it gets mu returns at once:
	// a burst of calls shares one write (group commit).
	mu      sync.Mutex
	asked   atomic.Uint64
	covered uint64
	writes  atomic.Uint64 // descriptor writes to the metastore
	// recent holds the last values this engine wrote, newest last, so
	// that the guard tells its own writes from someone else's.
	recent [][]byte
	// seq is the Seq of the newest descriptor written (mu held): it only
	// grows, across restarts too (segment.NextSeq), so that peers refuse
	// an older one replayed.
	seq   uint64
	lease metastore.Lease // nil until the first publish succeeds
	// health is the latest metastore trouble the lease or a publish
	// reported, nil once the descriptor is back.
	health atomic.Pointer[error]
	poke   chan struct{} // a publish failed: watch checks for recovery
	wg     sync.WaitGroup

	unguard    context.CancelFunc // stops the guard; nil until it runs
	guardWatch atomic.Pointer[metastore.Rewatch]
	closing    atomic.Bool
	repaired   atomic.Uint64
}

// Config says what a Publisher publishes, where.
type Config struct {
	Store       Store
	Key         string // the metastore key, segment.Key(prefix, Name)
	Name        string
	Incarnation uint64
	TTL         time.Duration // of the lease
	Timeout     time.Duration // bounds one metastore call
	Log         hclog.Logger
	Describe    func() *segment.Descriptor
	// Signer signs what is published and judges what squats the name;
	// nil without a cluster secret.
	Signer *segment.Signer
	// Secret is the cluster secret, nil without one: with it the engine
	// that holds the name is pinged as a peer with the secret, which is
	// the only caller it answers.
	Secret []byte
}

// New returns a Publisher that has published nothing yet.
func New(c Config) *Publisher {
	return &Publisher{
		store: c.Store, key: c.Key, name: c.Name, incarnation: c.Incarnation, ttl: c.TTL, timeout: c.Timeout,
		log: c.Log, describe: c.Describe, signer: c.Signer, secret: c.Secret, poke: make(chan struct{}, 1),
	}
}

// Key returns the metastore key the descriptor is published under.
func (p *Publisher) Key() string { return p.key }

// Publish writes the current descriptor, and returns once a write that
// carries every change made before the call has been made: the caller's
// change is then visible to peers that read the metastore. Calls that
// arrive while a write is in flight share the next one (group commit), so
// a burst of N calls writes a few times, not N, and none waits longer
// than the write in flight and its own. The first call claims the name
// and creates the lease, and fails when either fails; later calls update
// the lease and do not fail on a metastore outage: the lease writes the
// newest value when the metastore answers again, and Health reports the
// outage meanwhile.
func (p *Publisher) Publish(ctx context.Context) error {
	me := p.asked.Add(1)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.covered >= me {
		return nil // a write that started after this call carried its change
	}
	upto := p.asked.Load() // every call so far changed the state before it asked
	d := p.describe()
	seq := segment.NextSeq(p.seq, time.Now().UnixNano())
	d.Seq = seq
	b, err := p.signer.Encode(d)
	if err != nil {
		return fmt.Errorf("engine %q: encode descriptor: %w", p.name, err)
	}
	cctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	p.remember(b)
	p.seq = seq
	p.writes.Add(1)
	if p.lease != nil {
		p.covered = upto // on an outage too: the lease writes b when the metastore returns
		if err := p.lease.Update(cctx, b); err != nil {
			// An outage must not fail a Register, only delay what
			// peers learn of it.
			err = fmt.Errorf("engine %q: publish descriptor %q: %w", p.name, p.key, err)
			p.setHealth(err)
			select {
			case p.poke <- struct{}{}:
			default:
			}
			p.log.Warn("descriptor not published yet; it is written when the metastore returns", "error", err)
		}
		return nil
	}
	if err := p.claim(cctx); err != nil {
		return err
	}
	p.lease, err = p.store.PutLeased(cctx, p.key, b, p.ttl)
	if err != nil {
		p.lease = nil
		return fmt.Errorf("engine %q: publish descriptor %q: %w", p.name, p.key, err)
	}
	p.covered = upto
	p.wg.Add(1)
	go p.watch(p.lease)
	p.startGuard(p.lease)
	return nil
}

// Writes returns how many times Publish has written the descriptor (or
// handed it to the lease to write).
func (p *Publisher) Writes() uint64 { return p.writes.Load() }

// Health returns nil while the descriptor is kept alive in the metastore,
// and the latest error while it cannot be.
func (p *Publisher) Health() error {
	if e := p.health.Load(); e != nil {
		return *e
	}
	return nil
}

func (p *Publisher) setHealth(err error) {
	if err == nil {
		p.health.Store(nil)
		return
	}
	p.health.Store(&err)
}

// Close stops refreshing and deletes the descriptor, then waits for the
// lease's watcher. Publish must not be called afterwards.
func (p *Publisher) Close(ctx context.Context) error {
	p.closing.Store(true)
	p.mu.Lock()
	lease := p.lease
	if p.unguard != nil {
		p.unguard()
	}
	p.mu.Unlock()
	var err error
	if lease != nil {
		err = lease.Close(ctx)
	}
	p.wg.Wait()
	return err
}

// claim makes sure publishing under the key takes over no live engine's
// name: its peers would send this engine writes meant for it. A
// descriptor left by an engine that no longer answers on its control
// address (it crashed and is being restarted) is taken over at once
// rather than after its lease expires. Two engines racing to start under
// one name can still both pass; names are the operator's to keep unique.
func (p *Publisher) claim(ctx context.Context) error {
	raw, err := p.store.Get(ctx, p.key)
	if errors.Is(err, metastore.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("engine %q: check descriptor %q: %w", p.name, p.key, err)
	}
	if p.signer != nil {
		// With a secret only a validly signed descriptor is an engine's
		// claim to the name; anything else squats it and is replaced.
		d, err := p.signer.Decode(p.key, raw)
		if err != nil {
			p.log.Warn("reclaiming the engine's name: the metastore key holds an entry that is not validly signed (someone squats the name, or an engine with another cluster secret left it)", "key", p.key, "error", err)
			return nil
		}
		return p.inUse(ctx, d)
	}
	d, err := segment.Decode(p.key, raw)
	if err != nil {
		return fmt.Errorf("%w: engine %q: key %q holds something that is not a Ferry descriptor (%w); refusing to overwrite it: remove the key or pick another name, or set cluster_secret_file so that unsigned entries are reclaimed", ErrNameInUse, p.name, p.key, err)
	}
	return p.inUse(ctx, d)
}

// inUse returns ErrNameInUse, wrapped, when d is a live engine's other
// than this incarnation.
func (p *Publisher) inUse(ctx context.Context, d *segment.Descriptor) error {
	if d.Incarnation == p.incarnation || !answers(ctx, d, p.secret) {
		return nil
	}
	return fmt.Errorf("%w: engine %q: the name is in use by a live engine (incarnation %#x on machine %q, control %s, key %q); pick another name",
		ErrNameInUse, p.name, d.Incarnation, d.MachineID, d.Control, p.key)
}

// answers reports whether the engine that published d still answers a
// ping as that incarnation; with secret, the ping is signed (an engine with
// a secret answers no other). Without a control address it is assumed
// alive until its lease expires.
func answers(ctx context.Context, d *segment.Descriptor, secret []byte) bool {
	if d.Control == "" {
		return true
	}
	c, err := control.DialOptions(d.Control, control.Options{Secret: secret})
	if err != nil {
		return false
	}
	defer c.Close()
	pctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	name, inc, err := c.Ping(pctx)
	return err == nil && name == d.Name && inc == d.Incarnation
}

// watch records and logs metastore trouble the lease reports; the lease
// itself retries and puts the descriptor back when the metastore returns.
// The lease reports only failures, so while it is failing the descriptor
// is read back every ttl/3 to learn that it recovered. It ends when the
// lease stops (Close).
func (p *Publisher) watch(l metastore.Lease) {
	defer p.wg.Done()
	interval := p.ttl / 3
	var ticker *time.Ticker
	var tick <-chan time.Time
	defer func() {
		if ticker != nil {
			ticker.Stop()
		}
	}()
	errc := l.Err()
	for {
		select {
		case err, ok := <-errc:
			if !ok {
				return // the lease stopped: Close
			}
			p.setHealth(err)
			p.log.Warn("metastore unreachable; transfers to known peers go on, the descriptor is refreshed when it returns", "error", err)
			if ticker == nil {
				ticker = time.NewTicker(interval)
				tick = ticker.C
			}
		case <-p.poke:
			if ticker == nil {
				ticker = time.NewTicker(interval)
				tick = ticker.C
			}
		case <-tick:
			if p.published(interval) {
				p.setHealth(nil)
				p.log.Info("metastore back; descriptor published again", "key", p.key)
				ticker.Stop()
				ticker, tick = nil, nil
			}
		}
	}
}

// published reports whether the metastore holds this incarnation's
// descriptor.
func (p *Publisher) published(timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	raw, err := p.store.Get(ctx, p.key)
	if err != nil {
		return false
	}
	d, err := p.signer.Decode(p.key, raw)
	return err == nil && d.Incarnation == p.incarnation
}

// Self is what a descriptor says of the engine that publishes it.
type Self struct {
	Name        string
	Incarnation uint64
	MachineID   string
	Topology    *segment.Topology
	Control     string // its control service's address, "" if none
}

// Endpoint is one running transport as the descriptor lists it.
type Endpoint struct {
	Transport string
	Endpoint  []byte
	Rails     []segment.RailInfo
}

// Descriptor builds the descriptor of self with its registered buffers
// and its running transports.
func Descriptor(self Self, bufs []segment.Buffer, eps []Endpoint) *segment.Descriptor {
	d := &segment.Descriptor{
		Schema: segment.SchemaVersion, Name: self.Name, Incarnation: self.Incarnation, MachineID: self.MachineID,
		Buffers: bufs, Transports: make(map[string][]byte), Topology: self.Topology, Control: self.Control,
	}
	for _, ep := range eps {
		d.Transports[ep.Transport] = ep.Endpoint
		if len(ep.Rails) > 0 {
			if d.Rails == nil {
				d.Rails = make(map[string][]segment.RailInfo)
			}
			d.Rails[ep.Transport] = append(d.Rails[ep.Transport], ep.Rails...)
		}
	}
	return d
}
