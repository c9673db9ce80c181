package main

import (
	"flag"
	"fmt"
	"os"

	hclog "github.com/hashicorp/go-hclog"
)

// logFlags are --log-level and --log-format, shared by every command
// that starts an engine.
type logFlags struct{ level, format *string }

func addLogFlags(fs *flag.FlagSet) logFlags {
	return logFlags{
		level:  fs.String("log-level", "warn", "log level: trace, debug, info, warn, error or off; plugins log at the same level"),
		format: fs.String("log-format", "text", "log format: text, or json (one JSON object a line)"),
	}
}

// args are the flags again, for a child `ferry run` (bench and demo
// targets).
func (f logFlags) args() []string {
	return []string{"--log-level", *f.level, "--log-format", *f.format}
}

// logger is the logger the flags ask for, or why they are wrong.
func (f logFlags) logger() (hclog.Logger, error) {
	lv := hclog.LevelFromString(*f.level)
	if lv == hclog.NoLevel {
		return nil, fmt.Errorf("--log-level %q: want trace, debug, info, warn, error or off", *f.level)
	}
	var json bool
	switch *f.format {
	case "text":
	case "json":
		json = true
	default:
		return nil, fmt.Errorf("--log-format %q: want text or json", *f.format)
	}
	return hclog.New(&hclog.LoggerOptions{Name: "ferry", Level: lv, Output: os.Stderr, JSONFormat: json}), nil
}
