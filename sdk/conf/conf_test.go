package conf_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/conf"
)

// settings is a plugin's config as a vendor declares it.
type settings struct {
	Mode    string
	Depth   int
	Chunk   int64
	Timeout time.Duration
	Fast    bool
	Rails   []string
}

var table = &conf.Table[settings]{
	Name: "config",
	Doc:  "A test plugin's settings.",
	Fields: []conf.Field[settings]{
		{Name: "mode", Type: conf.String, Default: "copy", Doc: "How bytes move.",
			Words: []conf.Choice{{Word: "copy", Doc: "memcpy"}, {Word: "splice", Doc: "the kernel moves them"}, {Word: "dma", Refuse: "no DMA engine in this build"}},
			At:    func(s *settings) any { return &s.Mode }},
		{Name: "depth", Type: conf.Int, Default: 8, Min: 1, Max: 64, Doc: "Queue depth.", At: func(s *settings) any { return &s.Depth }},
		{Name: "chunk", Type: conf.Size, Default: int64(1 << 20), Min: int64(4 << 10), Max: int64(1 << 30), Doc: "Slice size.",
			At: func(s *settings) any { return &s.Chunk }},
		{Name: "timeout", Type: conf.Duration, Default: time.Second, Min: time.Millisecond, Max: time.Minute, Doc: "Per-call bound.",
			At: func(s *settings) any { return &s.Timeout }},
		{Name: "fast", Type: conf.Bool, Doc: "Skip the checks.", At: func(s *settings) any { return &s.Fast }},
		{Name: "rails", Type: conf.Strings, Doc: "Rails to use.", At: func(s *settings) any { return &s.Rails }},
	},
}

// decode decodes body as if it sat at line 10, column 3 of engine.hcl.
func decode(body string, rules func(*settings, conf.Block)) (settings, error) {
	var s settings
	err := conf.Decode(sdk.StartConfig{Config: []byte(body), ConfigFile: "engine.hcl", ConfigLine: 10, ConfigColumn: 3}, "test config", table, &s, rules)
	return s, err
}

func TestDecodeDefaultsAndValues(t *testing.T) {
	s, err := decode("", nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := (settings{Mode: "copy", Depth: 8, Chunk: 1 << 20, Timeout: time.Second}); s.Mode != want.Mode || s.Depth != want.Depth || s.Chunk != want.Chunk || s.Timeout != want.Timeout || s.Fast || s.Rails != nil {
		t.Fatalf("an empty block gave %+v, want the defaults %+v", s, want)
	}
	s, err = decode("mode = \"splice\"\ndepth = 16\nchunk = \"4MiB\"\ntimeout = \"250ms\"\nfast = true\nrails = [\"r0\", \"r1\"]\n", nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.Mode != "splice" || s.Depth != 16 || s.Chunk != 4<<20 || s.Timeout != 250*time.Millisecond || !s.Fast || strings.Join(s.Rails, ",") != "r0,r1" {
		t.Fatalf("decoded %+v", s)
	}
	if s, err := decode("chunk = 65536\n", nil); err != nil || s.Chunk != 65536 {
		t.Fatalf("a bare number as a size: %+v, %v", s, err)
	}
}

// TestDecodeErrors: each mistake is reported at its place in the
// operator's file (the block's text starts at 10:3), after the prefix and
// the setting, with what is allowed.
func TestDecodeErrors(t *testing.T) {
	for _, c := range []struct {
		body string
		want []string
	}{
		{"depth = 65\n", []string{"engine.hcl:10:", "test config: depth:", "1..64"}},
		{"\nchunk = \"1KiB\"\n", []string{"engine.hcl:11:", "test config: chunk:", "4KiB"}},
		{"timeout = \"soon\"\n", []string{"engine.hcl:10:", "test config: timeout:"}},
		{"mode = \"zerocopy\"\n", []string{"engine.hcl:10:", "test config: mode:", `"copy"`, `"splice"`}},
		{"mode = \"dma\"\n", []string{"test config: mode:", "no DMA engine in this build"}},
		{"depht = 4\n", []string{"engine.hcl:10:", "depth"}}, // HCL's "did you mean"
		{"depth = \"many\"\n", []string{"engine.hcl:10:", "test config: depth:"}},
		{"depth = \n", []string{"engine.hcl:10:"}}, // a syntax error
	} {
		_, err := decode(c.body, nil)
		if err == nil {
			t.Errorf("%q: no error", c.body)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q: error %q does not say %q", c.body, err, w)
			}
		}
		var ce *conf.Error
		if !errors.As(err, &ce) {
			t.Errorf("%q: error %T is not a *conf.Error", c.body, err)
		}
	}
}

// TestDecodeRules: rules see which settings were written and report at
// the one named; they run only when the table's own checks passed.
func TestDecodeRules(t *testing.T) {
	rules := func(s *settings, b conf.Block) {
		if s.Fast && b.Has("rails") && len(s.Rails) > 1 {
			b.Fail("rails", "fast mode takes one rail, not %d", len(s.Rails))
		}
	}
	_, err := decode("fast = true\n\nrails = [\"a\", \"b\"]\n", rules)
	if err == nil || !strings.Contains(err.Error(), "engine.hcl:12:") || !strings.Contains(err.Error(), "test config: rails: fast mode takes one rail, not 2") {
		t.Fatalf("rule error = %v", err)
	}
	ran := false
	if _, err := decode("depth = 0\n", func(*settings, conf.Block) { ran = true }); err == nil || ran {
		t.Fatalf("a range error (%v) must stop the rules (ran %v)", err, ran)
	}
}

// TestReference renders the table as docs/config.md's plugin sections
// are rendered: every setting, its type, default and range.
func TestReference(t *testing.T) {
	var b strings.Builder
	conf.Markdown(&b, table.Describe(), "###", "Plugin `test`")
	out := b.String()
	for _, w := range []string{"### Plugin `test`", "| `mode` | string | \"copy\" |", "| `depth` | whole number | 8 | 1..64 |",
		"| `chunk` | size | \"1MiB\" | 4KiB..1GiB |", "| `timeout` | duration | \"1s\" |", "| `rails` | list of strings |"} {
		if !strings.Contains(out, w) {
			t.Errorf("reference lacks %q:\n%s", w, out)
		}
	}
	if problems := conf.Lint("config", table); len(problems) != 0 {
		t.Errorf("Lint: %v", problems)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"4096": 4096, "4KiB": 4096, "64 MiB": 64 << 20, "1.5MiB": 3 << 19, "2GB": 2e9, "1tib": 1 << 40} {
		if got, err := conf.ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "4K", "-1", "0.1KiB", "1.5", "MiB", "1e3"} {
		if got, err := conf.ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", in, got)
		}
	}
}
