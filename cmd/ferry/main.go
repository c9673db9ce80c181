package main

import (
	"fmt"
	"os"
	"strings"
)

var commands = []struct {
	name, help string
	run        func(args []string) error
}{
	{"run", "run an engine from a config file and expose memory", cmdRun},
	{"metad", "serve the embedded HTTP metastore", cmdMetad},
	{"plugins", "list plugins with version, checksum, protocol and probe result", cmdPlugins},
	{"bench", "measure a transport between two processes against a raw baseline", cmdBench},
	{"explain", "say which transport a request to a segment would take, and why", cmdExplain},
	{"status", "one screen of a running engine: plugins, rails, open segments, recent failures", cmdStatus},
	{"top", "ferry status, refreshed live", cmdTop},
	{"doctor", "check plugins, metastore and machine, and with --peer every path to a peer; says what to do", cmdDoctor},
	{"version", "print the version and the plugin protocol versions", cmdVersion},
	{"demo", "start a metastore and two engines, move verified data through every transport", cmdDemo},
	{"conformance", "run the plugin conformance suite against a plugin binary: one line per case, non-zero exit on failure", cmdConformance},
	{"soak", "verified traffic between two engines while faults are injected; reports wrong bytes, hangs and leaks", cmdSoak},
	{"gpu-check", "move verified data GPU to GPU (nvlink, staged over tcp) and host to GPU between two processes, against the driver's copy", cmdGPUCheck},
	{"bench-peer", "(internal) the raw-socket baseline's far end", cmdBenchPeer},
	{"gpu-check-peer", "(internal) gpu-check's far engine", cmdGPUCheckPeer},
}

func usage() {
	fmt.Fprintf(os.Stderr, "usage: ferry <command> [flags]\n\ncommands:\n")
	for _, c := range commands {
		if strings.HasPrefix(c.help, "(internal)") {
			continue
		}
		fmt.Fprintf(os.Stderr, "  %-8s %s\n", c.name, c.help)
	}
	fmt.Fprintf(os.Stderr, "\nrun `ferry <command> -h` for its flags\n")
}

func main() {
	if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
		usage()
		os.Exit(2)
	}
	if os.Args[1] == "--version" || os.Args[1] == "-version" {
		os.Args[1] = "version"
	}
	for _, c := range commands {
		if c.name == os.Args[1] {
			if err := c.run(os.Args[2:]); err != nil {
				fmt.Fprintf(os.Stderr, "ferry %s: %v\n", c.name, err)
				os.Exit(1)
			}
			return
		}
	}
	fmt.Fprintf(os.Stderr, "ferry: unknown command %q\n\n", os.Args[1])
	usage()
	os.Exit(2)
}
