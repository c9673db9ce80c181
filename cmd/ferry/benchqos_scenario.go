package main

import (
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclsyntax"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host"
	"github.com/ferrydev/ferry/host/admission"
	"github.com/ferrydev/ferry/sdk"
)

// qosScenario is a `ferry bench --qos` workload: streams of requests,
// each with its own shape, class and tenant, measured over rounds of
// phases (the HIGH streams alone, then every stream).
type qosScenario struct {
	Name       string
	Duration   time.Duration // measured time of each phase
	Warmup     time.Duration // unmeasured, before each phase
	Rounds     int
	Transports []string
	Tenants    []qosTenant // the declared tenants, compared by Jain's index
	Streams    []qosStream
}

// qosTenant is a declared tenant and its weight. Cap, when set, is the
// bandwidth cap (bytes per second) the engine's qos configuration gives
// the tenant: the bench does not enforce it, it reports the tenant's
// throughput against it.
type qosTenant struct {
	Name   string
	Weight float64
	Cap    int64
}

// qosDefaultTenant names the tenant of streams that name none. It is not
// declared, so Jain's index does not compare it.
const qosDefaultTenant = "default"

// qosStream is one stream: threads submitters, each repeating a batch of
// batch requests of size bytes.
type qosStream struct {
	Name     string
	Op       host.Op
	Size     int64
	Batch    int
	Threads  int
	Priority host.Priority
	Tenant   string // qosDefaultTenant when the scenario names none
	Intent   host.Intent
	Deadline time.Duration // per request, from its submission; 0: none
	Rate     int64         // bytes per second over the stream's threads; 0: as fast as they complete
	// Transports, when set, are the only ones of the scenario's the
	// stream runs over (a tenant capped at a share of one transport's
	// link, say); nil is every one.
	Transports []string
}

// on reports whether the stream runs over transport tr.
func (s qosStream) on(tr string) bool {
	return s.Transports == nil || slices.Contains(s.Transports, tr)
}

// streamsOn returns the indices of the streams that run over tr.
func (sc *qosScenario) streamsOn(tr string) []int {
	var out []int
	for i, s := range sc.Streams {
		if s.on(tr) {
			out = append(out, i)
		}
	}
	return out
}

// tenantOn reports whether a stream of tenant name runs over tr.
func (sc *qosScenario) tenantOn(name, tr string) bool {
	for _, s := range sc.Streams {
		if s.Tenant == name && s.on(tr) {
			return true
		}
	}
	return false
}

// bytes is the buffer space the stream needs on each side.
func (s qosStream) bytes() int64 { return s.Size * int64(s.Batch) * int64(s.Threads) }

// qosDefaultScenario is bench/scenarios/mixed.hcl (TestQoSDefaultScenarioIsTheExample
// keeps the two the same).
const qosDefaultScenario = `
duration   = "1s"
warmup     = "200ms"
rounds     = 3
transports = ["tcp", "shm"]

tenant "a" {
  weight = 3
}

tenant "b" {
  weight = 1
}

stream "decode" {
  op       = "read"
  size     = "4KiB"
  batch    = 1
  threads  = 1
  priority = "high"
  intent   = "foreground_get"
  deadline = "5ms"
}

stream "bulk-a" {
  op       = "write"
  size     = "64MiB"
  batch    = 1
  threads  = 2
  priority = "low"
  tenant   = "a"
  intent   = "checkpoint"
}

stream "bulk-b" {
  op       = "write"
  size     = "64MiB"
  batch    = 1
  threads  = 2
  priority = "low"
  tenant   = "b"
  intent   = "checkpoint"
}
`

// loadQoSScenario reads the scenario at path; "default" is the built-in
// one.
func loadQoSScenario(path string) (*qosScenario, error) {
	if path == "default" {
		return parseQoSScenario([]byte(qosDefaultScenario), "default")
	}
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--qos: %w", err)
	}
	return parseQoSScenario(src, path)
}

// The scenario file's shape, as gohcl decodes it. Sizes and durations
// are strings ("64MiB", "5ms") and are parsed after.
type qosFile struct {
	Duration   *string         `hcl:"duration,optional"`
	Warmup     *string         `hcl:"warmup,optional"`
	Rounds     *int            `hcl:"rounds,optional"`
	Transports []string        `hcl:"transports,optional"`
	Tenants    []qosTenantFile `hcl:"tenant,block"`
	Streams    []qosStreamFile `hcl:"stream,block"`
}

type qosTenantFile struct {
	Name   string  `hcl:"name,label"`
	Weight float64 `hcl:"weight"`
	Cap    *string `hcl:"cap,optional"`
}

type qosStreamFile struct {
	Name     string  `hcl:"name,label"`
	Op       string  `hcl:"op"`
	Size     string  `hcl:"size"`
	Batch    *int    `hcl:"batch,optional"`
	Threads  *int    `hcl:"threads,optional"`
	Priority *string `hcl:"priority,optional"`
	Tenant   *string `hcl:"tenant,optional"`
	Intent   *string `hcl:"intent,optional"`
	Deadline *string `hcl:"deadline,optional"`
	Rate     *string `hcl:"rate,optional"`
	// Transports restricts the stream to some of the scenario's.
	Transports []string `hcl:"transports,optional"`
}

// qosScenarioMaxBytes bounds the buffers of a scenario on each side, as
// the plain bench bounds size*batch*threads.
const qosScenarioMaxBytes = 8 << 30

// parseQoSScenario decodes src, the scenario file named filename. Every
// error names file:line:column and the setting; several are joined.
func parseQoSScenario(src []byte, filename string) (*qosScenario, error) {
	f, diags := hclsyntax.ParseConfig(src, filename, hcl.InitialPos)
	if diags.HasErrors() {
		return nil, qosDiagError(diags)
	}
	var raw qosFile
	if diags := gohcl.DecodeBody(f.Body, nil, &raw); diags.HasErrors() {
		return nil, qosDiagError(diags)
	}
	body := f.Body.(*hclsyntax.Body)
	var errs []error
	bad := func(r hcl.Range, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s:%d:%d: %s", r.Filename, r.Start.Line, r.Start.Column, fmt.Sprintf(format, args...)))
	}
	// at is where attribute name is set in b, else where b starts.
	at := func(b *hclsyntax.Body, name string, whole hcl.Range) hcl.Range {
		if a, ok := b.Attributes[name]; ok {
			return a.SrcRange
		}
		return whole
	}
	blocks := func(typ string) []*hclsyntax.Block {
		var out []*hclsyntax.Block
		for _, b := range body.Blocks {
			if b.Type == typ {
				out = append(out, b)
			}
		}
		return out
	}
	file := hcl.Range{Filename: filename, Start: hcl.InitialPos, End: hcl.InitialPos}

	sc := &qosScenario{Name: filename, Duration: time.Second, Warmup: 200 * time.Millisecond, Rounds: 3, Transports: []string{"tcp", "shm"}}
	dur := func(s *string, name string, into *time.Duration, b *hclsyntax.Body, whole hcl.Range, what string, zeroOK bool) {
		if s == nil {
			return
		}
		d, err := time.ParseDuration(*s)
		switch {
		case err != nil:
			bad(at(b, name, whole), "%s%s %q: want a duration like \"500ms\" or \"2s\"", what, name, *s)
		case d < 0 || d == 0 && !zeroOK:
			bad(at(b, name, whole), "%s%s %q: want a duration above 0", what, name, *s)
		default:
			*into = d
		}
	}
	dur(raw.Duration, "duration", &sc.Duration, body, file, "", false)
	dur(raw.Warmup, "warmup", &sc.Warmup, body, file, "", true)
	if raw.Rounds != nil {
		if *raw.Rounds < 1 || *raw.Rounds > 100 {
			bad(at(body, "rounds", file), "rounds %d: want 1 to 100 (3 or more for a median and a range)", *raw.Rounds)
		} else {
			sc.Rounds = *raw.Rounds
		}
	}
	if raw.Transports != nil {
		if len(raw.Transports) == 0 {
			bad(at(body, "transports", file), `transports is empty: name at least one transport plugin, like ["tcp", "shm"]`)
		}
		seen := map[string]bool{}
		for _, t := range raw.Transports {
			if t == "" || seen[t] {
				bad(at(body, "transports", file), "transports %q: each transport once, none empty", raw.Transports)
				break
			}
			seen[t] = true
		}
		sc.Transports = raw.Transports
	}

	weights := map[string]bool{}
	for i, t := range raw.Tenants {
		blk := blocks("tenant")[i]
		switch {
		case t.Name == "" || t.Name == qosDefaultTenant:
			bad(blk.DefRange(), "tenant %q: name it something other than %q and \"\" (streams that name no tenant are the default one)", t.Name, qosDefaultTenant)
		case weights[t.Name]:
			bad(blk.DefRange(), "tenant %q is declared twice", t.Name)
		case !(t.Weight > 0) || math.IsInf(t.Weight, 0):
			bad(at(blk.Body, "weight", blk.DefRange()), "tenant %q: weight %v: want a number above 0", t.Name, t.Weight)
		}
		weights[t.Name] = true
		tn := qosTenant{Name: t.Name, Weight: t.Weight}
		if t.Cap != nil {
			c, err := config.ParseSize(*t.Cap)
			switch {
			case err != nil:
				bad(at(blk.Body, "cap", blk.DefRange()), "tenant %q: cap (bytes per second): %v", t.Name, err)
			case c <= 0:
				bad(at(blk.Body, "cap", blk.DefRange()), "tenant %q: cap %q: want more than 0 bytes per second, or leave cap out", t.Name, *t.Cap)
			}
			tn.Cap = c
		}
		sc.Tenants = append(sc.Tenants, tn)
	}

	if len(raw.Streams) == 0 {
		bad(file, `no stream block: a scenario needs at least one, like stream "high" { op = "read"  size = "4KiB"  priority = "high" }`)
	}
	names := map[string]bool{}
	var total int64
	for i, r := range raw.Streams {
		blk := blocks("stream")[i]
		b, whole := blk.Body, blk.DefRange()
		what := fmt.Sprintf("stream %q: ", r.Name)
		s := qosStream{Name: r.Name, Batch: 1, Threads: 1, Priority: sdk.PriorityNormal, Tenant: qosDefaultTenant}
		if r.Name == "" || names[r.Name] {
			bad(whole, "stream %q: each stream needs a name of its own", r.Name)
		}
		names[r.Name] = true
		var err error
		if s.Op, err = parseOp(r.Op); err != nil {
			bad(at(b, "op", whole), "%sop %q: want read or write", what, r.Op)
		}
		if s.Size, err = config.ParseSize(r.Size); err != nil {
			bad(at(b, "size", whole), "%ssize: %v", what, err)
		} else if s.Size <= 0 {
			bad(at(b, "size", whole), "%ssize %q: want more than 0 bytes", what, r.Size)
		}
		for _, n := range []struct {
			name string
			v    *int
			into *int
		}{{"batch", r.Batch, &s.Batch}, {"threads", r.Threads, &s.Threads}} {
			if n.v == nil {
				continue
			}
			if *n.v < 1 || *n.v > 1024 {
				bad(at(b, n.name, whole), "%s%s %d: want 1 to 1024", what, n.name, *n.v)
				continue
			}
			*n.into = *n.v
		}
		if r.Priority != nil {
			if c, ok := admission.ParseClass(*r.Priority); ok {
				s.Priority = c.Priority()
			} else if s.Priority, err = sdk.ParsePriority(*r.Priority); err != nil {
				bad(at(b, "priority", whole), "%spriority %q: want high, medium (or normal) or low", what, *r.Priority)
			}
		}
		if r.Tenant != nil {
			s.Tenant = *r.Tenant
			if !weights[s.Tenant] {
				bad(at(b, "tenant", whole), "%stenant %q is not declared: add a tenant %q { weight = 1 } block, or leave tenant out for the default tenant", what, s.Tenant, s.Tenant)
			}
		}
		if r.Intent != nil {
			if s.Intent, err = config.ParseIntent(*r.Intent); err != nil {
				bad(at(b, "intent", whole), "%sintent: %v", what, err)
			}
		}
		dur(r.Deadline, "deadline", &s.Deadline, b, whole, what, false)
		if r.Rate != nil {
			if s.Rate, err = config.ParseSize(*r.Rate); err != nil {
				bad(at(b, "rate", whole), "%srate (bytes per second): %v", what, err)
			} else if s.Rate <= 0 {
				bad(at(b, "rate", whole), "%srate %q: want more than 0 bytes per second, or leave rate out for as fast as it goes", what, *r.Rate)
			}
		}
		if r.Transports != nil {
			seen := map[string]bool{}
			for _, t := range r.Transports {
				switch {
				case seen[t]:
					bad(at(b, "transports", whole), "%stransports %q: %q is listed twice", what, r.Transports, t)
				case !slices.Contains(sc.Transports, t):
					bad(at(b, "transports", whole), "%stransports %q: %q is not one of the scenario's transports %q; add it to the top-level transports or leave it out here", what, r.Transports, t, sc.Transports)
				}
				seen[t] = true
			}
			if len(r.Transports) == 0 {
				bad(at(b, "transports", whole), "%stransports is empty: name at least one of the scenario's transports %q, or leave transports out for all of them", what, sc.Transports)
			}
			s.Transports = r.Transports
		}
		if s.Size > 0 {
			total += s.bytes()
		}
		sc.Streams = append(sc.Streams, s)
	}
	if total > qosScenarioMaxBytes {
		bad(file, "the streams need %d bytes of buffers on each side (size*batch*threads summed): more than 8 GiB; lower one of them", total)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return sc, nil
}

// qosDiagError turns HCL diagnostics into file:line:column errors.
func qosDiagError(diags hcl.Diagnostics) error {
	var errs []error
	for _, d := range diags {
		if d.Severity != hcl.DiagError {
			continue
		}
		msg := d.Summary
		if d.Detail != "" {
			msg += ": " + strings.TrimSuffix(d.Detail, ".")
		}
		if d.Subject != nil {
			msg = fmt.Sprintf("%s:%d:%d: %s", d.Subject.Filename, d.Subject.Start.Line, d.Subject.Start.Column, msg)
		}
		errs = append(errs, errors.New(msg))
	}
	return errors.Join(errs...)
}

// highStreams returns the indices of the scenario's HIGH streams: the
// ones whose isolation the bench measures.
func (sc *qosScenario) highStreams() []int {
	var out []int
	for i, s := range sc.Streams {
		if s.Priority == sdk.PriorityHigh {
			out = append(out, i)
		}
	}
	return out
}
