package conf

import (
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

func TestSuggest(t *testing.T) {
	for _, c := range []struct {
		given string
		names []string
		want  string
	}{
		{"tll", []string{"kind", "url", "ttl"}, "ttl"},              // one edit beats two, whatever the order
		{"tlt", []string{"url", "tlx", "ttl"}, "ttl"},               // a swap of neighbours is one edit; same letters win the tie
		{"lsiten", []string{"listen", "lanes"}, "listen"},           // a swap
		{"uri", []string{"ttl", "url"}, "url"},                      // a tie: the same first letter
		{"nmae", []string{"name", "machine_id"}, "name"},            // HCL's own case still holds
		{"compression", []string{"ttl", "url"}, ""},                 // nothing near
		{"TTL", []string{"url", "ttl"}, "ttl"},                      // case does not count
		{"sha265", []string{"path", "sha256", "enabled"}, "sha256"}, // a swap, not two substitutions
	} {
		if got := Suggest(c.given, c.names); got != c.want {
			t.Errorf("Suggest(%q, %q) = %q, want %q", c.given, c.names, got, c.want)
		}
	}
}

// Content rewrites HCL's suggestion for an unknown argument and block.
func TestContentSuggests(t *testing.T) {
	f, diags := hclsyntax.ParseConfig([]byte("tll = \"30s\"\nrial {}\n"), "t.hcl", hcl.InitialPos)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	schema := &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{{Name: "url"}, {Name: "ttl"}},
		Blocks:     []hcl.BlockHeaderSchema{{Type: "real"}, {Type: "rail"}},
	}
	_, diags = Content(f.Body, schema)
	var got string
	for _, d := range diags {
		got += d.Detail + "\n"
	}
	for _, want := range []string{
		`An argument named "tll" is not expected here. Did you mean "ttl"?`,
		`Blocks of type "rial" are not expected here. Did you mean "rail"?`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("diagnostics lack %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, `"url"`) || strings.Contains(got, `"real"`) {
		t.Errorf("diagnostics keep HCL's first-match suggestion:\n%s", got)
	}
}
