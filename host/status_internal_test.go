package host

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferrydev/ferry/host/path"
	"github.com/ferrydev/ferry/host/rails"
	"github.com/ferrydev/ferry/host/trace"
)

// TestStatusKeys: EngineStatus's own types keep the JSON keys of the
// sub-package types they replaced, so that a `ferry status` of either
// build reads the other's (StatusFormat 1).
func TestStatusKeys(t *testing.T) {
	for _, c := range []struct {
		name     string
		was, now any
	}{
		{"rail", rails.Status{}, RailStatus{}},
		{"failure", path.Failure{}, Failure{}},
		{"trace", trace.Story{}, TaskTrace{}},
	} {
		was, now := jsonKeys(reflect.TypeOf(c.was), ""), jsonKeys(reflect.TypeOf(c.now), "")
		if !slices.Equal(was, now) {
			t.Errorf("%s: JSON keys %q, were %q", c.name, now, was)
		}
	}
}

// jsonKeys lists the keys encoding/json writes for a struct of type t
// (fields of nested structs and of slices of structs under their
// field's key), sorted.
func jsonKeys(t reflect.Type, prefix string) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && name == "" {
			out = append(out, jsonKeys(f.Type, prefix)...)
			continue
		}
		switch name {
		case "-":
			continue
		case "":
			name = f.Name
		}
		out = append(out, prefix+name)
		ft := f.Type
		if ft.Kind() == reflect.Slice {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct && ft != reflect.TypeOf(time.Time{}) {
			out = append(out, jsonKeys(ft, prefix+name+".")...)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
