package metrics

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Config is what an engine's exporter needs.
type Config struct {
	// Meter is the engine's request path meter, exported with the rest.
	Meter *Meter
	// Source is read on every scrape.
	Source Source
	// Registerer is an application's registry to register into; nil: a
	// registry of the exporter's own, with the Go runtime's and the
	// process's collectors.
	Registerer prometheus.Registerer
	// Listen is the host:port to serve Path on; "" serves nothing (the
	// application serves its registry).
	Listen string
	// PluginTimeout bounds a scrape's wait for the plugins.
	PluginTimeout time.Duration
	// ConstLabels go on the collector's series (the engine's name).
	ConstLabels prometheus.Labels
	// QoS, when set, reads the admission queue's counters at each
	// scrape (qos.go).
	QoS func() (QoS, bool)
}

// Exporter is an engine's metrics: its meter and collector registered,
// and served when configured. Close undoes it.
type Exporter struct {
	reg        prometheus.Registerer
	registered []prometheus.Collector
	coll       *Collector
	srv        *Server
}

// ErrListen is wrapped by Listen's (and Start's) error when the address
// cannot be bound.
var ErrListen = errors.New("metrics address unavailable")

// Start registers cfg's meter and a collector of its source, and
// serves them at cfg.Listen when set. With an application's registry and
// a listen address, the registry must also be a prometheus.Gatherer (a
// *prometheus.Registry is) so that the endpoint serves what it holds.
func Start(cfg Config) (*Exporter, error) {
	x := &Exporter{reg: cfg.Registerer}
	var g prometheus.Gatherer
	if x.reg == nil {
		r := prometheus.NewRegistry()
		x.reg, g = r, r
		x.register(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	} else if cfg.Listen != "" {
		var ok bool
		if g, ok = cfg.Registerer.(prometheus.Gatherer); !ok {
			return nil, fmt.Errorf("metrics: the application's registry (%T) cannot be served at %s: it is not a prometheus.Gatherer", cfg.Registerer, cfg.Listen)
		}
	}
	x.coll = NewCollector(cfg.Source, cfg.PluginTimeout, cfg.ConstLabels)
	cs := []prometheus.Collector{cfg.Meter, x.coll}
	if cfg.QoS != nil {
		cs = append(cs, NewQoSCollector(cfg.QoS, cfg.ConstLabels))
	}
	if err := x.registerChecked(cs...); err != nil {
		x.Close()
		return nil, err
	}
	if cfg.Listen != "" {
		srv, err := Listen(cfg.Listen, g)
		if err != nil {
			x.Close()
			return nil, err
		}
		x.srv = srv
	}
	return x, nil
}

// register adds the runtime collectors to a registry of our own, where
// nothing else can be registered.
func (x *Exporter) register(cs ...prometheus.Collector) {
	for _, c := range cs {
		x.reg.MustRegister(c)
		x.registered = append(x.registered, c)
	}
}

func (x *Exporter) registerChecked(cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := x.reg.Register(c); err != nil {
			return fmt.Errorf("metrics: register into the registry: %w (two engines in one registry need different names: their series carry an engine label)", err)
		}
		x.registered = append(x.registered, c)
	}
	return nil
}

// Addr returns the address /metrics is served on, "" when none.
func (x *Exporter) Addr() string {
	if x.srv == nil {
		return ""
	}
	return x.srv.Addr()
}

// Close stops serving, stops the collector and unregisters everything it
// registered. Safe to call twice.
func (x *Exporter) Close() error {
	var err error
	if x.srv != nil {
		err = x.srv.Close()
		x.srv = nil
	}
	for _, c := range x.registered {
		x.reg.Unregister(c)
	}
	x.registered = nil
	if x.coll != nil {
		x.coll.Close()
	}
	return err
}
