package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ferrydev/ferry/host/loader"
	"github.com/ferrydev/ferry/host/metastore"
)

func metastoreListen(ctx context.Context, addr string) (*metastore.HTTPServer, error) {
	return metastore.Listen(ctx, addr)
}

type pluginReport struct {
	Name      string   `json:"name"`
	Path      string   `json:"path"`
	SHA256    string   `json:"sha256,omitempty"`
	Version   string   `json:"version,omitempty"`
	Protocol  int      `json:"protocol,omitempty"`
	Available bool     `json:"available"`
	Reason    string   `json:"reason,omitempty"`
	Rails     []string `json:"rails,omitempty"`
}

// inspect starts one plugin, asks it what it is and whether it can run
// here, and stops it.
func inspect(ctx context.Context, spec loader.Spec) pluginReport {
	r := pluginReport{Name: spec.Name, Path: spec.Path}
	p, err := loader.Start(ctx, spec, nil)
	if err != nil {
		r.Reason = err.Error()
		return r
	}
	defer p.Kill()
	r.SHA256, r.Version, r.Protocol = p.SHA256, p.Info.Version, p.Protocol
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	pr, err := p.Client.Probe(cctx)
	if err != nil {
		r.Reason = "probe failed: " + err.Error()
		return r
	}
	r.Available, r.Reason = pr.Available, pr.Reason
	for _, rl := range pr.Rails {
		r.Rails = append(r.Rails, rl.Name)
	}
	return r
}

func cmdPlugins(args []string) error {
	fs := flag.NewFlagSet("plugins", flag.ExitOnError)
	cfgPath := fs.String("config", "", "HCL config file: list its plugins (default: every ferry-plugin-* in --dir)")
	dir := fs.String("dir", "", "plugin directory (default: beside the ferry binary)")
	asJSON := fs.Bool("json", false, "one JSON object per plugin")
	fs.Parse(args)

	var specs []loader.Spec
	if *cfgPath != "" {
		cfg, err := loadConfig(*cfgPath, "", "")
		if err != nil {
			return err
		}
		d := *dir
		if d == "" {
			d = cfg.PluginDir
		}
		for _, p := range cfg.Plugins {
			specs = append(specs, loader.Spec{Name: p.Name, Path: loader.Resolve(p.Name, p.Path, d, filepath.Dir(cfg.File)), SHA256: p.SHA256})
		}
	} else {
		d := *dir
		if d == "" {
			d = loader.DefaultDir()
		}
		matches, _ := filepath.Glob(filepath.Join(d, loader.BinaryPrefix+"*"))
		sort.Strings(matches)
		for _, m := range matches {
			specs = append(specs, loader.Spec{Name: strings.TrimPrefix(filepath.Base(m), loader.BinaryPrefix), Path: m})
		}
		if len(specs) == 0 {
			return fmt.Errorf("no %s* binaries in %s: run `make build` or pass --dir", loader.BinaryPrefix, d)
		}
	}
	ctx := context.Background()
	var reports []pluginReport
	for _, s := range specs {
		reports = append(reports, inspect(ctx, s))
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		for _, r := range reports {
			enc.Encode(r)
		}
		return nil
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PLUGIN\tVERSION\tPROTOCOL\tSHA256\tPROBE\tPATH")
	for _, r := range reports {
		probe := "available"
		if !r.Available {
			probe = "unavailable: " + r.Reason
		} else if len(r.Rails) > 0 {
			probe += " (" + strings.Join(r.Rails, ", ") + ")"
		}
		sum := r.SHA256
		if len(sum) > 16 {
			sum = sum[:16] + "…"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", r.Name, r.Version, r.Protocol, sum, probe, r.Path)
	}
	return tw.Flush()
}
