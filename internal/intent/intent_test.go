package intent

import "testing"

func TestParse(t *testing.T) {
	for _, in := range All {
		if got, err := Parse(string(in)); got != in || err != nil {
			t.Errorf("Parse(%q) = %q, %v", in, got, err)
		}
	}
	if got, err := Parse(""); got != "" || err != nil {
		t.Errorf(`Parse("") = %q, %v; want no intent`, got, err)
	}
	const want = `unknown intent "gossip": want one of "foreground_get", "background_prefetch", "migration", "checkpoint", "weight_loading"`
	if _, err := Parse("gossip"); err == nil || err.Error() != want {
		t.Errorf("Parse(gossip) = %v, want %s", err, want)
	}
}
