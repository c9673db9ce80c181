package config

import "testing"

// TestNestCredit: the credit table nested in another block (qos.credit)
// reaches the same fields through its parent.
func TestNestCredit(t *testing.T) {
	type parent struct{ Credit Credit }
	tb := nestCredit(func(p *parent) *Credit { return &p.Credit })
	checkFields(t, "qos.credit", tb, &parent{})
	var p parent
	for _, f := range tb.fields {
		if f.at(&p) == nil {
			t.Errorf("%s reaches no field", f.name)
		}
	}
	if got, want := tb.fields[1].at(&p), any(&p.Credit.InitialBytes); got != want {
		t.Errorf("initial_bytes reaches %p, want %p", got, want)
	}
}
