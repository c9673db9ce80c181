package conf

import (
	"regexp"
	"strings"

	"github.com/hashicorp/hcl/v2"
)

// Content is body.Content(schema) with a better "Did you mean": HCL
// suggests the first name of the schema within three edits, so `tll` in
// a block that has url before ttl gets "url". Content suggests the
// nearest name instead (fewest edits, a swap of two neighbouring letters
// counting as one), preferring on a tie a name written with the same
// letters, then one with the same first letter, then the first in the
// schema.
func Content(body hcl.Body, schema *hcl.BodySchema) (*hcl.BodyContent, hcl.Diagnostics) {
	content, diags := body.Content(schema)
	var attrs, blocks []string
	for _, a := range schema.Attributes {
		attrs = append(attrs, a.Name)
	}
	for _, b := range schema.Blocks {
		blocks = append(blocks, b.Type)
	}
	for _, d := range diags {
		switch d.Summary {
		case "Unsupported argument":
			d.Detail = resuggest(d.Detail, unsupportedArg, attrs)
		case "Unsupported block type":
			d.Detail = resuggest(d.Detail, unsupportedBlock, blocks)
		}
	}
	return content, diags
}

var (
	unsupportedArg   = regexp.MustCompile(`^An argument named "([^"]*)" is not expected here\.`)
	unsupportedBlock = regexp.MustCompile(`^Blocks of type "([^"]*)" are not expected here\.`)
	didYouMean       = regexp.MustCompile(` Did you mean "[^"]*"\?`)
)

// resuggest replaces HCL's suggestion in detail with Suggest's.
func resuggest(detail string, given *regexp.Regexp, names []string) string {
	m := given.FindStringSubmatch(detail)
	if m == nil {
		return detail
	}
	detail = didYouMean.ReplaceAllString(detail, "")
	if s := Suggest(m[1], names); s != "" {
		detail = m[0] + ` Did you mean "` + s + `"?` + detail[len(m[0]):]
	}
	return detail
}

// Suggest returns the name of names nearest to given, "" when none is
// within HCL's reach (fewer than three edits).
func Suggest(given string, names []string) string {
	best, bestKey := "", [3]int{3, 0, 0}
	for _, n := range names {
		d := editDistance(given, n)
		if d >= 3 {
			continue
		}
		key := [3]int{d, 1, 1}
		if sameLetters(given, n) {
			key[1] = 0
		}
		if given != "" && n != "" && given[0] == n[0] {
			key[2] = 0
		}
		if best == "" || less(key, bestKey) {
			best, bestKey = n, key
		}
	}
	return best
}

func less(a, b [3]int) bool {
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}

// sameLetters reports whether a and b are written with the same set of
// letters: a swap ("rial", "rail") or a doubled letter in the wrong place
// ("tll", "ttl") keeps it, a slip onto another key ("tls") does not.
func sameLetters(a, b string) bool {
	var in [2][256]bool
	for i := 0; i < len(a); i++ {
		in[0][a[i]] = true
	}
	for i := 0; i < len(b); i++ {
		in[1][b[i]] = true
	}
	return in[0] == in[1]
}

// editDistance is the optimal string alignment distance of a and b
// (case-insensitive): insertions, deletions, substitutions and swaps of
// two neighbouring letters, each one edit.
func editDistance(a, b string) int {
	a, b = strings.ToLower(a), strings.ToLower(b)
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
