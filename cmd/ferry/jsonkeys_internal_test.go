package main

import (
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ferrydev/ferry/cmd/ferry/internal/soak"
	"github.com/ferrydev/ferry/host"
)

// TestJSONKeysSnakeCase: every JSON object the CLI prints (--json of
// every command, the ready lines, the status an engine serves) spells
// its keys in snake_case. A field without a json tag would print its Go
// name ("Counters" beside "plugin_counters").
func TestJSONKeysSnakeCase(t *testing.T) {
	snake := regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)
	for _, v := range []any{
		benchRow{}, qosReport{}, conformanceReport{}, gpuReport{}, peerReady{}, finding{}, pluginReport{},
		readyLine{}, pluginLine{}, soak.Report{}, versionInfo{}, host.EngineStatus{},
	} {
		typ := reflect.TypeOf(v)
		for _, k := range jsonKeyPaths(typ, typ.Name(), map[reflect.Type]bool{}) {
			if !snake.MatchString(k[strings.LastIndexByte(k, '.')+1:]) {
				t.Errorf("JSON key %s is not snake_case: give the field a json tag", k)
			}
		}
	}
}

// jsonKeyPaths lists the keys encoding/json writes for values of type t,
// each as a dotted path from prefix, through pointers, slices, arrays
// and map values.
func jsonKeyPaths(t reflect.Type, prefix string, seen map[reflect.Type]bool) []string {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array || t.Kind() == reflect.Map {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || t == reflect.TypeOf(time.Time{}) || seen[t] {
		return nil
	}
	seen[t] = true
	defer delete(seen, t)
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" {
			out = append(out, jsonKeyPaths(f.Type, prefix, seen)...)
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, prefix+"."+name)
		out = append(out, jsonKeyPaths(f.Type, prefix+"."+name, seen)...)
	}
	return out
}
