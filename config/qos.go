package config

import (
	"strings"
	"time"

	"github.com/ferrydev/ferry/sdk/conf"
	"github.com/hashicorp/hcl/v2"
)

// QoS is the qos block: admission by priority class and tenant. Without
// the block (On false) every request is admitted at once, as if there
// were no admission stage.
//
//	qos {
//	  promotion      = "2ms"     # a request this close to its deadline moves up a class
//	  max_queued     = 4096      # requests held back at most; then busy
//	  busy           = "block"   # or "error": a full queue makes Submit wait, or fails the request
//	  inflight_bytes = "64MiB"   # everything dispatched, whatever its class
//	  class "low" {
//	    inflight_bytes = "8MiB"  # keeps the rings shallow under bulk load
//	  }
//	  tenant "decode" { weight = 3 }
//	  tenant "offload" { weight = 1, rate = "2GiB" }
//	}
type QoS struct {
	// On: admission is on: the file has a qos block with more in it
	// than a credit block (or code set it).
	On bool
	// Credit is receiver credit (the credit block inside qos). It is on
	// by default, with or without a qos block: see Credit.On.
	Credit Credit
	// DefaultTenant is the tenant of requests that name none.
	DefaultTenant string
	// Promotion is how close to its deadline a request moves up a class;
	// 0 is off.
	Promotion time.Duration
	// RejectLate fails at once a request that cannot meet its deadline,
	// given what is ahead of it and the measured bandwidth.
	RejectLate bool
	// MaxQueued bounds the requests held back; 0 is no bound.
	MaxQueued int
	// Busy is what a full queue does: QoSBlock or QoSError.
	Busy string
	// Lanes is how the classes share a plugin's lanes: QoSLanesShared
	// or QoSLanesPerClass.
	Lanes string
	// QoSLimits bound everything dispatched, whatever its class.
	QoSLimits
	Classes []QoSClass
	Tenants []QoSTenant
}

// QoSLimits are a budget: a rate cap (a token bucket) and bounds on what
// is in flight; zero is no bound.
type QoSLimits struct {
	// Rate is in bytes per second; Burst is the bucket's depth.
	Rate, Burst   int64
	InflightBytes int64
	// InflightRequests bounds the requests in flight.
	InflightRequests int
}

// QoSClass is a class block of qos: the budget of one priority class.
type QoSClass struct {
	// Name is "high", "medium" or "low".
	Name string
	QoSLimits
	DeclRange string
	loc       map[string]hcl.Range
}

// QoSTenant is a tenant block of qos: one tenant's weight and budget.
type QoSTenant struct {
	Name   string
	Weight float64
	QoSLimits
	DeclRange string
	loc       map[string]hcl.Range
}

// The busy words.
const (
	QoSBlock = "block"
	QoSError = "error"
)

// The lanes words.
const (
	QoSLanesShared   = "shared"
	QoSLanesPerClass = "per_class"
)

// QoSClasses are the class names, most urgent first (TENT's HIGH, MEDIUM
// and LOW; host.PriorityHigh, PriorityNormal and PriorityLow).
var QoSClasses = []string{"high", "medium", "low"}

// DefaultMaxQueued is qos.max_queued's default.
const DefaultMaxQueued = 4096

// limitFields are the budget settings, shared by the qos block (the
// total), its class blocks and its tenant blocks.
func limitFields[T any](of func(*T) *QoSLimits, what string) []conf.Field[T] {
	return []conf.Field[T]{
		{Name: "rate", Type: conf.Size, DefaultDoc: "no cap", Example: `"2GiB"`,
			Doc: "Caps the bytes per second dispatched " + what + ", written as a size (\"2GiB\" is 2 GiB a second): a token bucket. At least 1.",
			At:  func(t *T) any { return &of(t).Rate }},
		{Name: "burst", Type: conf.Size, DefaultDoc: "rate's 10 ms, at least 64 KiB", Example: `"4MiB"`,
			Doc: "The rate cap's bucket depth: what may go at once after a quiet spell. At least 1.",
			At:  func(t *T) any { return &of(t).Burst }},
		{Name: "inflight_bytes", Type: conf.Size, DefaultDoc: "no bound", Example: `"64MiB"`,
			Doc: "Bytes dispatched " + what + " and not yet done; a request alone goes whatever its size. At least 1.",
			At:  func(t *T) any { return &of(t).InflightBytes }},
		{Name: "inflight_requests", Type: conf.Int, DefaultDoc: "no bound", Example: "64",
			Doc: "Requests dispatched " + what + " and not yet done. At least 1.",
			At:  func(t *T) any { return &of(t).InflightRequests }},
	}
}

var qosTable = &conf.Table[QoS]{
	Name: "qos",
	Doc: "Admission by priority class and tenant: requests over a budget are held back and dispatched in order " +
		"(the highest class first, weighted fair shares between tenants, the earliest deadline first). " +
		"Without this block every request is admitted at once. See docs/qos.md.",
	Fields: append([]conf.Field[QoS]{
		{Name: "default_tenant", Type: conf.String, Default: "default",
			Doc: "The tenant of a request that names none; added with weight 1 when no tenant block names it.",
			At:  func(q *QoS) any { return &q.DefaultTenant }},
		{Name: "promotion", Type: conf.Duration, Default: time.Duration(0), Min: time.Duration(0), Max: time.Hour, Hint: ` ("0s": off)`,
			Doc: "A held-back request whose deadline is this close moves up a class (low to medium, medium to high). \"0s\" turns promotion off.",
			At:  func(q *QoS) any { return &q.Promotion }},
		{Name: "reject_late", Type: conf.Bool, Default: false,
			Doc: "Fail at once (ErrDeadlineExceeded, saying why) a request that cannot meet its deadline given the bytes held back ahead of it, those in flight and the measured bandwidth.",
			At:  func(q *QoS) any { return &q.RejectLate }},
		{Name: "max_queued", Type: conf.Int, Default: DefaultMaxQueued, Min: 1, Max: 1 << 24,
			Doc: "Requests held back at most; beyond it busy says what happens.",
			At:  func(q *QoS) any { return &q.MaxQueued }},
		{Name: "busy", Type: conf.String, Default: QoSBlock, Words: []conf.Choice{
			{Word: QoSBlock, Doc: "Submit waits for room, up to the request's deadline"},
			{Word: QoSError, Doc: "the request fails at once with ErrBusy"},
		},
			Doc: "What a full queue does to the next request held back.",
			At:  func(q *QoS) any { return &q.Busy }},
		{Name: "lanes", Type: conf.String, Default: QoSLanesShared, Words: []conf.Choice{
			{Word: QoSLanesShared, Doc: "every class on every lane, round robin; the low class's budgets keep the rings shallow"},
			{Word: QoSLanesPerClass, Doc: "the high class alone on each plugin's first lane, the others on the rest; needs transfer.lanes >= 2"},
		},
			Doc: "How the classes share a plugin's lanes (ring pairs). A lane is first in, first out: a slice waits behind every slice ahead of it in its ring. See docs/qos.md.",
			At:  func(q *QoS) any { return &q.Lanes }},
	}, limitFields(func(q *QoS) *QoSLimits { return &q.QoSLimits }, "in all")...),
}

var qosClassTable = &conf.Table[QoSClass]{
	Name: "class", Label: "name", Many: true,
	Doc:    `The budget of one priority class, labelled "high", "medium" or "low" (TENT's HIGH, MEDIUM and LOW; Ferry's PriorityHigh, PriorityNormal and PriorityLow). Inside qos.`,
	Fields: limitFields(func(c *QoSClass) *QoSLimits { return &c.QoSLimits }, "in the class"),
}

var qosTenantTable = &conf.Table[QoSTenant]{
	Name: "tenant", Label: "name", Many: true,
	Doc: "One tenant (host.Request.Tenant): its share and budget. Inside qos.",
	Fields: append([]conf.Field[QoSTenant]{
		{Name: "weight", Type: conf.Number, Default: 1.0, Min: 0.001, Max: 1e6,
			Doc: "Its share of what is dispatched against the other tenants with work held back, by bytes.",
			At:  func(t *QoSTenant) any { return &t.Weight }},
	}, limitFields(func(t *QoSTenant) *QoSLimits { return &t.QoSLimits }, "for the tenant")...),
}

// qosRef documents the qos block with its nested class and tenant
// blocks.
type qosRef struct{}

func (qosRef) Describe() conf.Doc {
	b := qosTable.Describe()
	b.Sub = append(b.Sub, qosClassTable.Describe(), qosTenantTable.Describe(), creditTable.Describe())
	return b
}

// qosBlock decodes the qos block with its class and tenant blocks.
func qosBlock() block {
	return block{
		header: hcl.BlockHeaderSchema{Type: qosTable.Name},
		doc:    qosRef{},
		preset: func(c *Config) { qosTable.Defaults(&c.QoS); creditTable.Defaults(&c.QoS.Credit) },
		decode: func(d *decoder, c *Config, b *hcl.Block) {
			c.loc["qos"] = b.DefRange
			s := qosTable.Schema()
			s.Blocks = append(s.Blocks,
				hcl.BlockHeaderSchema{Type: qosClassTable.Name, LabelNames: []string{"name"}},
				hcl.BlockHeaderSchema{Type: qosTenantTable.Name, LabelNames: []string{"name"}},
				hcl.BlockHeaderSchema{Type: creditTable.Name})
			content, diags := conf.Content(b.Body, s)
			d.Diags(diags)
			// A qos block that only tunes receiver credit leaves admission
			// off; anything else in it turns admission on.
			creditOnly := len(content.Attributes) == 0 && len(content.Blocks) > 0
			for _, sb := range content.Blocks {
				creditOnly = creditOnly && sb.Type == creditTable.Name
			}
			c.QoS.On = !creditOnly
			conf.DecodeContent(d.Decoder, qosTable, content, &c.QoS, conf.Place{Loc: c.loc, LocPrefix: "qos.", FieldPrefix: "qos."})
			for _, sb := range content.Blocks {
				if sb.Type == creditTable.Name {
					c.loc["qos.credit"] = sb.DefRange
					conf.DecodeBody(d.Decoder, creditTable, sb.Body, &c.QoS.Credit, conf.Place{Loc: c.loc, LocPrefix: "qos.credit.", FieldPrefix: "qos.credit."})
					continue
				}
				if len(sb.Labels) != 1 {
					continue // Content has reported it
				}
				switch sb.Type {
				case qosClassTable.Name:
					l := newLabelled("qos.class", sb)
					v := QoSClass{Name: l.name, DeclRange: l.decl, loc: l.loc}
					conf.DecodeBody(d.Decoder, qosClassTable, sb.Body, &v, conf.Place{Loc: l.loc, FieldPrefix: "qos.class." + l.name + "."})
					c.QoS.Classes = append(c.QoS.Classes, v)
				case qosTenantTable.Name:
					l := newLabelled("qos.tenant", sb)
					v := QoSTenant{Name: l.name, DeclRange: l.decl, loc: l.loc}
					qosTenantTable.Defaults(&v)
					conf.DecodeBody(d.Decoder, qosTenantTable, sb.Body, &v, conf.Place{Loc: l.loc, FieldPrefix: "qos.tenant." + l.name + "."})
					c.QoS.Tenants = append(c.QoS.Tenants, v)
				}
			}
		},
	}
}

// validateQoS checks the qos block: its settings' ranges, the class
// labels, tenants named once, and budgets that contradict each other (a
// class's or tenant's above the total).
func (c *Config) validateQoS() []error {
	q := &c.QoS
	if !q.On {
		return nil
	}
	var errs []error
	fail := func(field, format string, args ...any) {
		errs = append(errs, conf.ErrorAt(c.where(field), field, format, args...))
	}
	qosTable.Check(q, "qos.", c.has, fail)
	checkCaps(func(name, format string, args ...any) { fail("qos."+name, format, args...) },
		&q.QoSLimits, func(name string) bool { return c.has("qos." + name) })
	if q.Lanes == QoSLanesPerClass && c.Transfer.Lanes < 2 {
		fail("qos.lanes", `%q needs at least 2 lanes per plugin, and transfer.lanes is %d; set transfer.lanes = 2 or more, or lanes = %q`, q.Lanes, c.Transfer.Lanes, QoSLanesShared)
	}
	if q.DefaultTenant == "" {
		fail("qos.default_tenant", `is empty; name the tenant of requests that name none, such as "default"`)
	}
	seen := map[string]string{}
	for i := range q.Classes {
		k := &q.Classes[i]
		l := labelled{kind: "qos.class", name: k.Name, decl: k.DeclRange, loc: k.loc}
		f := l.failer(&errs)
		if !contains(QoSClasses, k.Name) {
			f("name", "%q is not a class: want %s (TENT's HIGH, MEDIUM and LOW)", k.Name, conf.OrList(QoSClasses))
		}
		if decl, dup := seen[k.Name]; dup {
			f("", "class %q is declared twice; the first is at %s: merge them into one", k.Name, decl)
		}
		seen[k.Name] = k.DeclRange
		qosClassTable.Check(k, "", l.has, f)
		checkCaps(f, &k.QoSLimits, l.has)
		contradicts(f, "the class's", &k.QoSLimits, &q.QoSLimits, c.qosWhere)
	}
	seen = map[string]string{}
	for i := range q.Tenants {
		t := &q.Tenants[i]
		l := labelled{kind: "qos.tenant", name: t.Name, decl: t.DeclRange, loc: t.loc}
		f := l.failer(&errs)
		if t.Name == "" || strings.TrimSpace(t.Name) != t.Name {
			f("name", "tenant name %q is empty or has surrounding spaces; write it as requests name it (host.Request.Tenant)", t.Name)
		}
		if decl, dup := seen[t.Name]; dup {
			f("", "tenant %q is declared twice; the first is at %s: merge them into one", t.Name, decl)
		}
		seen[t.Name] = t.DeclRange
		qosTenantTable.Check(t, "", l.has, f)
		checkCaps(f, &t.QoSLimits, l.has)
		contradicts(f, "the tenant's", &t.QoSLimits, &q.QoSLimits, c.qosWhere)
	}
	return errs
}

// qosWhere says where the qos block set a total setting, for messages.
func (c *Config) qosWhere(name string) string {
	if r, ok := c.loc["qos."+name]; ok {
		return " (qos." + name + " at " + conf.PosString(r) + ")"
	}
	return " (qos." + name + ")"
}

// contradicts reports each bound of l above the same bound of the total:
// it could never be reached.
func contradicts(fail func(attr, format string, args ...any), whose string, l, total *QoSLimits, where func(string) string) {
	check := func(name string, v, max int64) {
		if v > 0 && max > 0 && v > max {
			fail(name, "%d is above the total of %d%s: %s budget can never be reached; lower it, or raise the total", v, max, where(name), whose)
		}
	}
	check("rate", l.Rate, total.Rate)
	check("inflight_bytes", l.InflightBytes, total.InflightBytes)
	check("inflight_requests", int64(l.InflightRequests), int64(total.InflightRequests))
}

// checkCaps refuses a budget setting written as zero or below: a cap of
// nothing would hold every request back forever. (A negative size is
// refused where it is decoded.)
func checkCaps(fail func(attr, format string, args ...any), l *QoSLimits, has func(string) bool) {
	for _, c := range []struct {
		name string
		v    int64
	}{{"rate", l.Rate}, {"burst", l.Burst}, {"inflight_bytes", l.InflightBytes}, {"inflight_requests", int64(l.InflightRequests)}} {
		if has(c.name) && c.v <= 0 {
			fail(c.name, "%d is not a cap: want at least 1 (a cap of nothing holds every request back forever); leave it out for no bound", c.v)
		}
	}
}
