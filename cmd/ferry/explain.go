package main

import (
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host"
	"github.com/ferrydev/ferry/sdk"
)

// cmdExplain starts an engine, opens a segment and prints how a request to
// it would be carried, without moving a byte.
func cmdExplain(args []string) error {
	fs := flag.NewFlagSet("explain", flag.ExitOnError)
	engine := addEngineFlags(fs, "HCL config file with the policies (default: built-in single-node config)",
		"this engine's name (default: explain-<pid>, so as not to clash with the config's engine)")
	seg := fs.String("segment", "", "the target segment (required)")
	op := fs.String("op", "write", "read or write")
	size := fs.String("size", "4KiB", "request size, like 4KiB or 64MiB")
	remote := fs.Uint64("remote", 0, "address in the segment (default: the start of its first buffer)")
	hint := fs.String("transport", "", "transport hint: pin the first attempt to this plugin")
	intent := fs.String("intent", "", "request intent: foreground_get, background_prefetch, migration, checkpoint, weight_loading")
	policy := fs.String("policy", "", "name the policy instead of letting the policies match")
	prio := fs.String("priority", "normal", "high, normal or low")
	appMem := fs.Bool("app-memory", false, "the local buffer is memory the application allocated itself (not from Engine.Allocate)")
	fs.Parse(args)
	if *seg == "" {
		return errors.New("--segment is required")
	}
	req := host.Request{Transport: *hint, Intent: host.Intent(*intent), Policy: *policy, Remote: *remote}
	var err error
	if req.Op, err = parseOp(*op); err != nil {
		return err
	}
	if req.Priority, err = sdk.ParsePriority(*prio); err != nil {
		return fmt.Errorf("--priority: %w", err)
	}
	n, err := config.ParseSize(*size)
	if err != nil {
		return fmt.Errorf("--size: %w", err)
	}
	if n <= 0 {
		return fmt.Errorf("--size %q: want a positive size", *size)
	}
	if *engine.name == "" {
		*engine.name = fmt.Sprintf("explain-%d", os.Getpid())
	}
	ctx, e, closeEngine, err := engine.start()
	if err != nil {
		return err
	}
	defer closeEngine()
	s, err := e.OpenSegment(ctx, *seg)
	if err != nil {
		return err
	}
	req.Segment = s.ID
	if req.Remote == 0 && len(s.Buffers) > 0 {
		req.Remote = s.Buffers[0].Base
	}
	// Only the length of Local counts; the pages are never touched. With
	// --app-memory it is registered as the application's own memory, so
	// that the explanation is the one such memory gets.
	req.Local = make([]byte, n)
	if *appMem {
		if _, err := e.Register(ctx, req.Local, host.LocalOnly); err != nil {
			return fmt.Errorf("--app-memory: %w", err)
		}
	}
	text, err := e.Explain(req)
	fmt.Print(text)
	return err
}
