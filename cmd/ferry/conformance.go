package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/ferrydev/ferry/sdk/plugintest"
)

// cmdConformance runs the SDK's conformance suite (sdk/plugintest)
// against a plugin binary, as csi-sanity does against a CSI driver: no Go
// toolchain, the cases the plugin's declarations call for, one line per
// case, and a non-zero exit on any failure.
func cmdConformance(args []string) error {
	fs := flag.NewFlagSet("conformance", flag.ExitOnError)
	cfgPath := fs.String("config", "", "HCL file: the plugin's config body (what goes between the braces of its \"config { }\" block), given to both instances; listen on port 0")
	timeout := fs.Duration("timeout", 30*time.Second, "how long to wait for one completion, for Stop or Drain, and for a case's outstanding work to drain")
	asJSON := fs.Bool("json", false, "print one JSON object: the plugin and every case")
	run := fs.String("run", "", "run only the cases whose name matches this regular expression")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: ferry conformance PATH-TO-PLUGIN [--config f.hcl] [--timeout 30s] [--run REGEXP] [--json]\n\ncases: %s\n\n", strings.Join(plugintest.CaseNames(), ", "))
		fs.PrintDefaults()
	}
	// Flags may follow the plugin's path.
	var pos []string
	for {
		fs.Parse(args)
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(pos) != 1 {
		fs.Usage()
		return errors.New("give exactly one plugin binary")
	}
	bin, err := filepath.Abs(pos[0])
	if err != nil {
		return err
	}
	if _, err := os.Stat(bin); err != nil {
		return err
	}
	var body []byte
	if *cfgPath != "" {
		if body, err = os.ReadFile(*cfgPath); err != nil {
			return err
		}
	}
	c := plugintest.Config{Binary: bin, ConfigA: body, ConfigB: body, Wait: *timeout}
	if *run != "" {
		re, err := regexp.Compile(*run)
		if err != nil {
			return fmt.Errorf("--run: %w", err)
		}
		c.Only = re.MatchString
	}
	rep := conformance(c, os.Stdout, *asJSON)
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		enc.Encode(rep)
	} else {
		var optional []string
		for _, k := range rep.Cases {
			if k.Optional {
				optional = append(optional, k.Name)
			}
		}
		opt := ""
		if len(optional) > 0 {
			opt = fmt.Sprintf(" (optional, not implemented: %s)", strings.Join(optional, ", "))
		}
		fmt.Printf("%s: %s %s, protocol %d: %d passed, %d failed, %d skipped%s\n", bin, rep.Name, rep.Version, rep.Protocol, rep.Passed, rep.Failed, rep.Skipped, opt)
	}
	if rep.Failed > 0 {
		return fmt.Errorf("%d of %d cases failed", rep.Failed, len(rep.Cases))
	}
	return nil
}

// conformanceReport is what `ferry conformance --json` prints.
type conformanceReport struct {
	Plugin     string            `json:"plugin"`
	Name       string            `json:"name"`
	Version    string            `json:"version"`
	Protocol   uint32            `json:"protocol"`
	Interfaces []string          `json:"interfaces"`
	Cases      []conformanceCase `json:"cases"`
	Passed     int               `json:"passed"`
	Failed     int               `json:"failed"`
	Skipped    int               `json:"skipped"`
	// Errors are failures outside any case: the last pair's stop.
	Errors []string `json:"errors,omitempty"`
}

type conformanceCase struct {
	Name    string  `json:"name"`
	Result  string  `json:"result"` // PASS, FAIL or SKIP
	Why     string  `json:"why,omitempty"`
	Seconds float64 `json:"seconds"`
	// Optional: a skip because the plugin does not implement an optional
	// interface.
	Optional bool `json:"optional,omitempty"`
}

// conformance runs the suite and returns its report; without asJSON it
// prints each case's line to out as the case ends.
func conformance(c plugintest.Config, out io.Writer, asJSON bool) conformanceReport {
	rep := conformanceReport{Plugin: c.Binary}
	root := &reporter{name: "", line: func(k conformanceCase) {
		rep.Cases = append(rep.Cases, k)
		switch k.Result {
		case "PASS":
			rep.Passed++
		case "FAIL":
			rep.Failed++
		default:
			rep.Skipped++
		}
		if asJSON {
			return
		}
		why := ""
		if k.Why != "" {
			why = ": " + strings.ReplaceAll(k.Why, "\n", "\n      ")
		}
		fmt.Fprintf(out, "%s  %s (%.2fs)%s\n", k.Result, k.Name, k.Seconds, why)
	}}
	var sum plugintest.Summary
	root.do(func() { sum = plugintest.RunWith(root, c) })
	rep.Name, rep.Version, rep.Protocol, rep.Interfaces = sum.Name, sum.Version, sum.Protocol, sum.Interfaces
	if len(root.msgs) > 0 {
		rep.Errors = root.msgs
		rep.Failed++
		if !asJSON {
			fmt.Fprintf(out, "FAIL  (after the cases): %s\n", strings.Join(root.msgs, "\n      "))
		}
	}
	return rep
}

// reporter is a plugintest.Reporter that runs each case on its own
// goroutine, as testing does, so that Fatalf and Skipf end the case
// (runtime.Goexit) and nothing else. Top-level cases become lines; a
// sub-case's failure is told in its parent's line.
type reporter struct {
	name   string
	parent *reporter
	line   func(conformanceCase) // the root's: one call per top-level case

	mu       sync.Mutex
	failed   bool
	skipped  string
	msgs     []string
	cleanups []func()
}

func (r *reporter) Helper() {}

func (r *reporter) Logf(string, ...any) {}

func (r *reporter) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = true
	r.msgs = append(r.msgs, fmt.Sprintf(format, args...))
}

func (r *reporter) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	runtime.Goexit()
}

func (r *reporter) Skipf(format string, args ...any) {
	r.mu.Lock()
	r.skipped = fmt.Sprintf(format, args...)
	r.mu.Unlock()
	runtime.Goexit()
}

func (r *reporter) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}

func (r *reporter) Cleanup(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cleanups = append(r.cleanups, f)
}

// do runs f on a goroutine of its own, then the cleanups, and waits.
func (r *reporter) do(f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			for i := len(r.cleanups) - 1; i >= 0; i-- {
				r.cleanups[i]()
			}
		}()
		f()
	}()
	<-done
}

func (r *reporter) Run(name string, f func(plugintest.Reporter)) bool {
	k := &reporter{name: name, parent: r}
	start := time.Now()
	k.do(func() { f(k) })
	if r.parent != nil {
		// A sub-case: its failure is its parent's, under its name.
		for _, m := range k.msgs {
			r.Errorf("%s: %s", name, m)
		}
		return !k.failed
	}
	c := conformanceCase{Name: name, Result: "PASS", Seconds: time.Since(start).Seconds()}
	switch {
	case k.failed:
		c.Result, c.Why = "FAIL", strings.Join(k.msgs, "\n")
	case k.skipped != "":
		c.Result, c.Why = "SKIP", k.skipped
		c.Optional = strings.HasPrefix(k.skipped, "optional:")
	}
	r.line(c)
	return !k.failed
}
