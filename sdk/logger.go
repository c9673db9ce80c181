package sdk

import (
	"os"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/ferrydev/ferry/internal/logargs"
)

// LogLevelEnv names the environment variable through which the host tells
// a plugin process its log level ("trace" .. "error"), so that a plugin
// logs what the engine would show and nothing the engine would drop.
const LogLevelEnv = "FERRY_PLUGIN_LOG_LEVEL"

// LogLevel is the level the host asked for in LogLevelEnv, or Info.
func LogLevel() hclog.Level {
	if l := hclog.LevelFromString(os.Getenv(LogLevelEnv)); l != hclog.NoLevel {
		return l
	}
	return hclog.Info
}

// NewLogger returns the logger a plugin writes to: JSON lines on stderr,
// which go-plugin forwards to the host under the plugin's name, at the
// host's level (LogLevel). Durations are logged as text ("5s"): JSON
// would carry them as nanosecond numbers.
func NewLogger(name string) hclog.Logger {
	l := hclog.New(&hclog.LoggerOptions{Name: name, Output: os.Stderr, JSONFormat: true, Level: LogLevel()})
	return logargs.Map(l, logargs.Durations)
}
