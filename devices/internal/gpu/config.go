package gpu

import (
	"fmt"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/conf"
)

// DefaultStreams is the number of streams per device without `streams`.
const DefaultStreams = 4

// maxStreams bounds `streams`: each stream has its own thread.
const maxStreams = 64

// settings is a GPU device plugin's `config { ... }` block, decoded.
type settings struct {
	library string // "": the loader's default
	streams int
}

// SettingsOf declares the config block of the GPU device plugin name
// ("cuda", "rocm"), whose driver library is lib by default.
func SettingsOf(name, lib string) conf.Describer { return settingsOf(name, lib) }

func settingsOf(name, lib string) *conf.Table[settings] {
	return &conf.Table[settings]{
		Name: name,
		Doc:  fmt.Sprintf("The %s device plugin (`device %q { config { ... } }`): its driver is loaded at run time.", name, name),
		Fields: []conf.Field[settings]{
			{Name: "library", Type: conf.String, DefaultDoc: "`" + lib + "`, as the dynamic loader finds it", Example: `"/opt/lib/driver.so"`,
				Doc: "The driver library to load.",
				At:  func(s *settings) any { return &s.library },
				Check: func(s *settings) error {
					if s.library == "" {
						return fmt.Errorf(`give a path, or leave library out for the default`)
					}
					return nil
				}},
			{Name: "streams", Type: conf.Int, Default: DefaultStreams, Min: 1, Max: maxStreams,
				Doc: "Streams per device, used in turn; each has a thread of its own.",
				At:  func(s *settings) any { return &s.streams }},
		},
	}
}

// decodeConfig decodes cfg's block for the plugin name; library is ""
// when not set.
func decodeConfig(cfg sdk.StartConfig, name string) (library string, streams int, err error) {
	t := settingsOf(name, "")
	var s settings
	if err := conf.Decode(cfg, t.Name+" config", t, &s, nil); err != nil {
		return "", 0, err
	}
	return s.library, s.streams, nil
}
